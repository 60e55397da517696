"""Which stages a `dvc exp run` would run, before it runs them: `python -m tools.plan [dvc exp run options]`
(`make quick REPRO_FLAGS="--dry -S ..."` plans the quick profile's experiment the same way).

DVC's own `dvc exp run --dry` cannot say: it plans in a temporary copy of the project that holds no outputs, and
fails at the first stage that would run on another stage's output (DVC 3.67; github.com/treeverse/dvc/issues/10135).
Here the experiment itself runs in such a copy (`--temp`), with DVC deciding stage by stage as it would: a stage it
would run starts, says so and stops (TOKSEL_PLAN: no computing, nothing written), and DVC skips what depends on it,
which would run after it; a stage its run cache holds is restored (copies, seconds); an unchanged one is skipped.
The settings check and the ledger run for real (the first refuses a bad value here too); the settings check's run
stays in DVC's run cache, so the experiment then restores it, and the plan says so. Nothing else is kept: no
experiment, no other run cache entry, no MLflow run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

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
    checked: list[str] = field(default_factory=list)  # ran for real here (check_params): the run restores it

    @property
    def to_run(self) -> list[str]:
        return [*self.runs, *self.after]


def read_plan(lines: Sequence[str], always_run: Sequence[str] = ()) -> Plan:
    """The plan in the output of a planning `dvc exp run` (see the module's notes); `always_run`: the stages DVC
    runs every time (always_changed), which its run cache never restores."""
    plan, stage, said, stopped = Plan(), "", [], set()
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
        elif (found := EXITED.search(line)) and stage:
            stopped.add(stage)
            if int(found.group(1)) != PLANNED:
                plan.refused.append(f"{stage} stopped (exit code {found.group(1)}): {said[-1] if said else ''}")
        elif stage and not line.startswith(("WARNING", "ERROR", "> ")):
            said.append(line)
    # a stage that ran to its end here (the settings check) is in DVC's run cache now: the experiment restores it
    plan.checked = [name for name in plan.runs if name not in stopped and name not in always_run]
    plan.runs = [name for name in plan.runs if name not in plan.checked]
    plan.after = [name for name in plan.after if name not in plan.runs]
    return plan


def always_run(dvc_yaml: Path = Path("dvc.yaml")) -> list[str]:
    """The stages of dvc.yaml that DVC runs every time (always_changed)."""
    stages = (yaml.safe_load(dvc_yaml.read_text()) or {}).get("stages") or {}
    return [name for name, stage in stages.items() if isinstance(stage, dict) and stage.get("always_changed")]


def planned(options: Sequence[str], environment: dict[str, str] | None = None) -> tuple[Plan, int]:
    """Plan `dvc exp run --temp <options>` (the profile's settings, the user's, targets) as the module says; the
    exit code: 0, or 2 where a stage refused a value."""
    name = f"plan-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    command = ["dvc", "exp", "run", "--temp", "--keep-going", *_without_name(options), "-n", name]
    # one stream, unbuffered, in the order DVC printed it: a stage's exit code follows its start
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env={**(environment or os.environ), PLAN_ENV: "1", "PYTHONUNBUFFERED": "1"})
    # where nothing would run, the experiment finished: it is no result of anyone's, so it goes
    subprocess.run(["dvc", "exp", "remove", name], capture_output=True, text=True)
    plan = read_plan(done.stdout.splitlines(), always_run())
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
            f"from DVC's run cache {len(plan.restored)}: {names(plan.restored)}"
            + (f" (and {names(plan.checked)}, which ran here to check the values)" if plan.checked else ""),
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
