"""Which stages a `dvc exp run` would run, before it runs them: `python -m tools.plan [dvc exp run options]`
(`make quick REPRO_FLAGS="--dry -S ..."` plans the quick profile's experiment the same way).

DVC's own `dvc exp run --dry` cannot say: it plans in a temporary copy of the project that holds no outputs, and
fails at the first stage that would run on another stage's output (DVC 3.67; github.com/treeverse/dvc/issues/10135).
Here the experiment itself runs in such a copy (`--temp`), with DVC deciding stage by stage as it would: a stage it
would run starts, says so and stops (TOKSEL_PLAN: no computing, nothing written), and DVC skips what depends on it,
which would run after it; a stage its run cache holds is restored (copies, seconds); an unchanged one is skipped.
The settings check and the ledger run for real (the first refuses a bad value here too). Nothing is kept: no
experiment, no run cache entry, no MLflow run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from toksel.runtime.cli import PLAN_ENV, PLANNED

RUNS = re.compile(r"^Running stage '([^']+)'")
RESTORED = re.compile(r"^Stage '([^']+)' is cached - skipping run")
UNCHANGED = re.compile(r"^Stage '([^']+)' didn't change, skipping")
AFTER = re.compile(r"Stages? (.+) will be skipped due to this failure")
EXITED = re.compile(r"exited with (-?\d+)")
NAMED = re.compile(r"'([^']+)'")


@dataclass
class Plan:
    runs: list[str] = field(default_factory=list)  # the stages DVC would start: their inputs or settings changed
    after: list[str] = field(default_factory=list)  # those that read what a stage of `runs` remakes
    restored: list[str] = field(default_factory=list)  # from DVC's run cache: a run with the same inputs and settings
    unchanged: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # a stage that stopped for real (check_params: a bad value)

    @property
    def to_run(self) -> list[str]:
        return [*self.runs, *self.after]


def read_plan(lines: Sequence[str]) -> Plan:
    """The plan in the output of a planning `dvc exp run` (see the module's notes)."""
    plan, stage, said = Plan(), "", []
    for line in lines:
        if found := RUNS.match(line):
            stage, said = found.group(1), []
            plan.runs.append(stage)
        elif found := RESTORED.match(line):
            plan.restored.append(found.group(1))
        elif found := UNCHANGED.match(line):
            plan.unchanged.append(found.group(1))
        elif found := AFTER.search(line):
            plan.after.extend(name for name in NAMED.findall(found.group(1)) if name not in plan.after)
        elif (found := EXITED.search(line)) and stage and int(found.group(1)) != PLANNED:
            plan.refused.append(f"{stage} stopped (exit code {found.group(1)}): {said[-1] if said else ''}")
        elif stage and not line.startswith(("WARNING", "ERROR", "> ")):
            said.append(line)
    plan.after = [name for name in plan.after if name not in plan.runs]
    return plan


def planned(options: Sequence[str], environment: dict[str, str] | None = None) -> tuple[Plan, int]:
    """Plan `dvc exp run --temp <options>` (the profile's settings, the user's, targets) as the module says; the
    exit code: 0, or 2 where a stage refused a value."""
    name = f"plan-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    command = ["dvc", "exp", "run", "--temp", "--keep-going", *_without_name(options), "-n", name]
    done = subprocess.run(command, capture_output=True, text=True, env={**(environment or os.environ), PLAN_ENV: "1"})
    # where nothing would run, the experiment finished: it is no result of anyone's, so it goes
    subprocess.run(["dvc", "exp", "remove", name], capture_output=True, text=True)
    plan = read_plan((done.stdout + done.stderr).splitlines())
    return plan, 2 if plan.refused else 0


def _without_name(options: Sequence[str]) -> list[str]:
    """The options without --dry, -n/--name (the plan names its own, throw-away experiment) and --temp."""
    kept, skip = [], False
    for option in options:
        if skip:
            skip = False
        elif option in ("-n", "--name"):
            skip = True
        elif not (option.startswith("--name=") or option in ("--dry", "--temp")):
            kept.append(option)
    return kept


def describe(plan: Plan) -> list[str]:
    """The plan in a few lines."""
    def names(stages: list[str]) -> str:
        return ", ".join(stages) if stages else "none"

    return [f"would run {len(plan.to_run)}: {names(plan.runs)}" + (f"; then, on what those remake: {names(plan.after)}"
                                                                   if plan.after else ""),
            f"from DVC's run cache {len(plan.restored)}: {names(plan.restored)}",
            f"unchanged {len(plan.unchanged)}: {names(plan.unchanged)}",
            *plan.refused]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__.strip())
        return 0
    plan, code = planned(argv)
    print("\n".join(describe(plan)))
    return code


if __name__ == "__main__":
    sys.exit(main())
