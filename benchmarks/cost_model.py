"""What the pipeline costs in units of work, and what N workers or a GPU would take, from measured costs.

The default pipeline: a stamped `dvc repro -f` log (benchmarks/repro_timing.py) holds, for every stage, its wall
time and a line per unit it fanned out ("<stage> <dataset> seed 1: ... done in 31.5 s"), timed in the process that
ran it. A stage's time is its overhead (start-up, reading, gathering, writing) plus its units' makespan; the
overhead is what the stage took here beyond the makespan its units had here, on this machine's workers. With N
workers, the units are taken in order by the first free worker, as the pool and a Dask cluster hand them out.
A phase row's cells are not timed one by one: the row counts as its cells, each the row's time on two workers
(1.99 times one worker's, measured) split evenly. calibrate counts as one unit: its replicates fan out, its data
families do not, and the log does not tell them apart (so its share is not scaled: a conservative figure).

The paper-scale profile (profiles/paper.yaml): what it adds to the default is the ablations at the paper's sizes.
Their cost is counted from one training step of each variant at d 2048 over whole reviews, measured here (CPU),
its floating-point operations counted by torch's FlopCounterMode, the steps of an epoch, and the epochs each fit
took in the default run's ablations (the only measurement of them there is).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from benchmarks.repro_timing import stage_runs

UNIT_LINE = re.compile(r"^(?P<name>.+?): (?:.*; )?done in (?P<seconds>[\d.]+) s")
HERE = 2  # this machine's workers (cores) in the measured run
SEEDED = ("one_step", "gradient_flow", "train", "ablation")  # the stages that run every seed, a unit each


@dataclass
class StageCost:
    name: str
    wall: float  # seconds here
    units: list[float]  # each unit's seconds (one unit: the stage's own work)

    def makespan(self, workers: int) -> float:
        """The units taken in order by the first free worker."""
        free = [0.0] * min(workers, len(self.units))
        for seconds in self.units:
            free[free.index(min(free))] += seconds
        return max(free)

    @property
    def overhead(self) -> float:
        return max(self.wall - self.makespan(HERE), 0.0)

    def seconds(self, workers: int) -> float:
        return self.overhead + self.makespan(workers)


def stage_costs(log: Path, phase_cells: dict[str, int]) -> list[StageCost]:
    """Each stage of the log with its units; `phase_cells`: a phase stage's name -> its cells."""
    runs, _ = stage_runs(log)
    stages = [StageCost(run.name, run.seconds, []) for run in runs]
    units = {run.name: [float(unit["seconds"]) for line in run.lines if (unit := UNIT_LINE.match(line))
                        and "," not in unit["name"]]  # a fit's line names its parents after commas
             for run in runs}
    for stage in stages:
        if stage.name in phase_cells:  # a row: its cells, each the row's two-worker time split evenly
            cells = phase_cells[stage.name]
            stage.units = [stage.wall * HERE / cells] * cells
        elif stage.name.startswith("calibrate") or len(units[stage.name]) < 2:
            stage.units = [max(stage.wall - _fixed(stage.name), 0.0)]
        else:
            stage.units = units[stage.name]
    return stages


def _fixed(stage: str) -> float:
    """A stage's start-up here (benchmarks/results.md, fixed cost): the training stages import torch."""
    return 4.4 if stage.split("@")[0] in ("train", "ablation", "d_sweep") else 0.8


def scaled(stages: list[StageCost], seeds: int, phase_factor: int) -> list[StageCost]:
    """A larger study from the same unit costs: every stage whose units are its seeds with `seeds` of them, every
    phase row with `phase_factor` times its cells; the other stages as they were."""
    larger = []
    for stage in stages:
        kind, units = stage.name.split("@")[0], stage.units
        if kind == "phase":
            units = units * phase_factor
        elif kind in SEEDED and len(units) > 1:
            units = [units[i % len(units)] for i in range(seeds)]
        bigger = StageCost(stage.name, 0.0, units)
        bigger.wall = stage.overhead + bigger.makespan(HERE)  # the overhead kept, the units' makespan grown
        larger.append(bigger)
    return larger


def pipeline_table(stages: list[StageCost], workers: tuple[int, ...]) -> list[str]:
    kinds: dict[str, list[StageCost]] = defaultdict(list)
    for stage in stages:
        kinds[stage.name.split("@")[0]].append(stage)
    lines = ["| stage kind | stages | units | seconds here (2 workers) | " +
             " | ".join(f"{n} worker{'s' if n > 1 else ''}" for n in workers) + " |",
             "|---|---|---|---|" + "---|" * len(workers)]
    for kind, members in kinds.items():
        lines.append(f"| {kind} | {len(members)} | {sum(len(s.units) for s in members):,} | "
                     f"{sum(s.wall for s in members):,.0f} | " +
                     " | ".join(f"{sum(s.seconds(n) for s in members):,.0f}" for n in workers) + " |")
    lines.append(f"| **all** | {len(stages)} | {sum(len(s.units) for s in stages):,} | "
                 f"**{sum(s.wall for s in stages):,.0f}** | " +
                 " | ".join(f"**{sum(s.seconds(n) for s in stages):,.0f}**" for n in workers) + " |")
    return lines


@dataclass(frozen=True)
class StepCost:
    variant: str
    dataset: str
    seconds: float  # one training step here (CPU), the mean over the measured steps
    flops: float  # one training step's floating-point operations (forward and backward)
    steps_per_epoch: int
    epochs: float  # per seed, every fit (the kept one and the control), from the default run

    def fits_seconds(self) -> float:
        return self.seconds * self.steps_per_epoch * self.epochs

    def fits_flops(self) -> float:
        return self.flops * self.steps_per_epoch * self.epochs


def epochs_per_seed(folder: Path) -> float:
    """The mean over the seeds of a default-run ablation's epochs, its kept fit's and its control's."""
    runs = [json.loads(path.read_text()) for path in sorted(folder.glob("seed*/metrics.json"))]
    if not runs:
        raise FileNotFoundError(f"{folder}: no seed's metrics (run the default pipeline's ablations first)")
    return statistics.mean(run["epochs"] + run.get("control_epochs", 0.0) for run in runs)


def gpu_hours(flops: float, rate: float) -> float:
    return flops / rate / 3600


def measured_gpu_steps(logs: Path) -> tuple[str, dict[tuple[str, str], float]] | None:
    """The newest GPU measurement of a training step (benchmarks/logs/gpu-<date>.json, written by benchmarks/gpu.py
    on a lent GPU): its name and the seconds a step of each (variant, dataset); None when no GPU has measured."""
    found = sorted(logs.glob("gpu-*.json"))
    if not found:
        return None
    rows = json.loads(found[-1].read_text())
    return found[-1].name, {(row["variant"], row["dataset"]): row["seconds_per_step"] for row in rows}


def ceil_div(a: int, b: int) -> int:
    return -(-a // b) if b else math.inf
