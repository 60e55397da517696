"""Where a whole `dvc repro -f` spends its time, by stage kind.

`python -m benchmarks.repro_timing run LOG [COMMAND ...]` runs COMMAND (default `dvc repro -f`; e.g. `make quick`
or `dvc exp run -S key=value`) in the project, stamping every line of its output with the time (seconds since the
epoch) into LOG; `python -m benchmarks.repro_timing table LOG [LOG ...]` reads
such logs and prints, per stage kind, the stages run and the seconds they took (a stage lasts from its
"Running stage" line to the next one, or to the end of the run), one column per log, as Markdown;
`python -m benchmarks.repro_timing loop LOG [LOG ...]` reads a variant's log (an experiment that runs some stages and
restores or skips the others) and prints, per log, the seconds DVC spent on the stages it ran (each named), on those
it restored from its run cache and on those it found unchanged, each lasting to DVC's next such line.
Run it with the project's environment active (the stages call `python`) and the data mirror set.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

STAGE_LINE = re.compile(r"^(\d+) Running stage '([^']+)'")
DECIDED = {"ran": STAGE_LINE,
           "restored": re.compile(r"^(\d+) Stage '([^']+)' is cached - skipping run"),
           "unchanged": re.compile(r"^(\d+) Stage '([^']+)' didn't change, skipping")}
STAMPED = re.compile(r"^(\d+) ")


@dataclass(frozen=True)
class Breakdown:
    stages: dict[str, list[float]]  # stage kind -> the seconds of each of its stages
    total: float  # first stage start to the last line

    def kind_seconds(self, kind: str) -> float:
        return sum(self.stages.get(kind, []))


def run(log: Path, command: list[str] | None = None) -> int:
    """`command` (`dvc repro -f`), every output line stamped with the time, into `log`."""
    # Unbuffered, or DVC's lines reach the pipe in blocks and their stamps say when a block was full.
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("w", buffering=1) as out, subprocess.Popen(command or ["dvc", "repro", "-f"], stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, text=True, env=environment) as process:
        for line in process.stdout:
            out.write(f"{int(time.time())} {line}")
        code = process.wait()
        out.write(f"{int(time.time())} exit {code}\n")
    return code


@dataclass(frozen=True)
class StageRun:
    name: str  # dvc.yaml's, with its @item
    seconds: float  # from its "Running stage" line to the next one, or to the end of the run
    lines: list[str]  # what it printed, stamps left off


def stage_runs(log: Path) -> tuple[list[StageRun], float]:
    """Every stage of a stamped log in order, and the whole run's seconds (first line to last)."""
    runs: list[tuple[str, int, list[str]]] = []
    first = last = None
    for line in log.read_text().splitlines():
        stamped = STAMPED.match(line)
        if not stamped:
            continue
        last = int(stamped.group(1))
        first = last if first is None else first
        stage = STAGE_LINE.match(line)
        if stage:
            runs.append((stage.group(2), last, []))
        elif runs:
            runs[-1][2].append(line[stamped.end():])
    if not runs or last is None:
        raise ValueError(f"{log}: no stage was run")
    stops = [start for _, start, _ in runs[1:]] + [last]
    found = [StageRun(name, float(stop - start), lines) for (name, start, lines), stop in zip(runs, stops, strict=True)]
    return found, float(last - first)


def breakdown(log: Path) -> Breakdown:
    runs, total = stage_runs(log)
    stages: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        stages[run.name.split("@")[0]].append(run.seconds)
    return Breakdown(dict(stages), total)


def table(logs: list[Path]) -> list[str]:
    found = [breakdown(log) for log in logs]
    kinds = list(dict.fromkeys(kind for result in found for kind in result.stages))
    lines = ["| stage kind | " + " | ".join(f"{log.name}: stages, seconds" for log in logs) + " |",
             "|---|" + "---|" * len(logs)]
    for kind in kinds:
        cells = [f"{len(result.stages.get(kind, []))}, {result.kind_seconds(kind):,.0f} s" for result in found]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines.append("| **all** | " + " | ".join(f"**{sum(len(v) for v in result.stages.values())}, "
                                              f"{result.total:,.0f} s**" for result in found) + " |")
    return lines


def loop(log: Path) -> str:
    """A variant's log in a few lines: its seconds by what DVC decided for each stage, the stages it ran."""
    lines = log.read_text().splitlines()
    stamps = [int(found.group(1)) for line in lines if (found := STAMPED.match(line))]
    decided = [(int(found.group(1)), kind, found.group(2)) for line in lines for kind, pattern in DECIDED.items()
               if (found := pattern.match(line))]
    if not decided:
        raise ValueError(f"{log}: DVC decided on no stage")
    seconds: dict[str, int] = defaultdict(int)
    ran = []
    for (start, kind, stage), stop in zip(decided, [at for at, _, _ in decided[1:]] + [stamps[-1]], strict=True):
        seconds[kind] += stop - start
        if kind == "ran":
            ran.append(f"{stage} {stop - start} s")
    counts = {kind: sum(1 for _, found, _ in decided if found == kind) for kind in DECIDED}
    return (f"{log.name}: {stamps[-1] - stamps[0]:,} s; before the first stage {decided[0][0] - stamps[0]} s; "
            + "; ".join(f"{kind} {counts[kind]} stages, {seconds[kind]:,} s" for kind in DECIDED)
            + f"\n  ran: {', '.join(ran)}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) >= 2 and args[0] == "run":
        return run(Path(args[1]), args[2:])
    if len(args) >= 2 and args[0] == "table":
        print("\n".join(table([Path(name) for name in args[1:]])))
        return 0
    if len(args) >= 2 and args[0] == "loop":
        print("\n".join(loop(Path(name)) for name in args[1:]))
        return 0
    print("usage: python -m benchmarks.repro_timing run LOG [COMMAND ...] | table LOG [LOG ...] | loop LOG [LOG ...]",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
