"""The GPU benchmark: the stages on one GPU, timed, with the GPU's busy share, and one seed's numbers against the
CPU run's. benchmarks/gpu.sh runs it on a machine with a GPU (a lent one: at most 8 minutes, its budget):

    python -m benchmarks.gpu [--parts train yelp imdb_ablation steps] [--budget 480] [--out DIR]

Each step runs a stage as `dvc repro` would (python -m pipelines.<stage> key=value ...) in this checkout, while
`nvidia-smi dmon` samples the GPU's SM activity every second (the share of the second in which a kernel ran); a
step's busy share is the mean of its samples. The steps run in order, each within what is left of the budget: one
that does not finish is stopped there and the table says so.

Parts:
- train: prepare imdb (seed 0), train imdb (one seed, the full protocol: screens, kept, matched and control fits
  of the three arms); its metrics against the CPU run's seed 0 (benchmarks/gpu_reference), each within the half
  width of the CPU run's 95 % interval over its seeds (what the report's intervals allow); then compare@imdb with
  the GPU's seed 0 beside the CPU run's seeds 1 and 2, its verdicts against the CPU run's.
- yelp: prepare yelp_polarity (3 seeds), then the four ablation variants at the paper's sizes, 3 seeds each.
- imdb_ablation: two_layer at the paper's sizes on IMDB (25,000 whole reviews), seed 0, with its time per epoch.
- steps: seconds per training step of each paper-scale ablation variant on each dataset (the cost model's GPU
  columns: benchmarks/run.py reads the newest benchmarks/logs/gpu-*.json).

Writes OUT/gpu.json (every figure), OUT/gpu.md (the table, also appended to benchmarks/results.md) and OUT/dmon.log.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from toksel.claims.verdict import seed_interval

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "benchmarks" / "gpu_reference"  # the CPU run's files these numbers are set against
RESULTS = ROOT / "benchmarks" / "results.md"
VARIANTS = ("mlp", "mlp_residual", "two_layer", "two_layer_kq")
PAPER = "sequence.scale=paper"


@dataclass
class Step:
    name: str
    command: list[str]  # python -m <these>
    seconds: float = math.nan
    status: str = "not run"
    busy: float | None = None  # mean SM activity over the step, %; None without nvidia-smi
    busy_samples: int = 0
    per_epoch: float | None = None  # an ablation's seconds per epoch trained (epoch_seconds)


def stage(name: str, module: str, *values: str) -> Step:
    return Step(name, [f"pipelines.{module}", *values])


def steps_of(part: str) -> list[Step]:
    if part == "train":
        return [stage("prepare imdb, seed 0", "prepare", "dataset=imdb", "base.seeds=[0]"),
                stage("train imdb, 1 seed (3 arms, full protocol)", "train", "dataset=imdb", "train.seeds=1")]
    if part == "yelp":
        return [stage("prepare yelp_polarity, 3 seeds", "prepare", "dataset=yelp_polarity", "base.seeds=[0,1,2]"),
                *(stage(f"ablation yelp_polarity {variant} (paper sizes), 3 seeds", "ablation",
                        "dataset=yelp_polarity", f"sequence.variant={variant}", PAPER, "base.seeds=[0,1,2]",
                        "train.seeds=3") for variant in VARIANTS)]
    if part == "imdb_ablation":
        return [stage("prepare imdb, seed 0", "prepare", "dataset=imdb", "base.seeds=[0]"),
                stage("ablation imdb two_layer (paper sizes), seed 0", "ablation", "dataset=imdb",
                      "sequence.variant=two_layer", PAPER, "base.seeds=[0]", "train.seeds=1")]
    if part == "steps":
        return [Step("seconds per step, paper-scale ablations", ["benchmarks.gpu", "--step-rates"])]
    raise SystemExit(f"unknown part {part!r}: train, yelp, imdb_ablation or steps")


class Sampler:
    """`nvidia-smi dmon` in the background: one line a second with the time and the SM activity (%)."""

    def __init__(self, log: Path) -> None:
        self.log, self.process = log, None
        if shutil.which("nvidia-smi"):
            self.process = subprocess.Popen(["nvidia-smi", "dmon", "-s", "u", "-d", "1", "-o", "T"],
                                            stdout=log.open("w"), stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait()

    def busy(self, start: float, end: float) -> tuple[float | None, int]:
        """The mean SM activity over the samples taken in [start, end] (wall-clock seconds), and their number."""
        if self.process is None:
            return None, 0
        values = [sm for at, sm in dmon_samples(self.log.read_text(), start) if start <= at <= end]
        return (statistics.mean(values) if values else None), len(values)


def dmon_samples(text: str, day_start: float) -> list[tuple[float, float]]:
    """(wall-clock time, SM %) of each `nvidia-smi dmon -o T` line ('#' lines are its headers; '-' no reading);
    the HH:MM:SS times are read on the local day of `day_start`."""
    midnight = time.mktime(time.localtime(day_start)[:3] + (0, 0, 0, 0, 0, -1))
    found = []
    for line in text.splitlines():
        fields = line.split()
        if not fields or line.startswith("#") or len(fields) < 3 or not fields[2].isdigit():
            continue
        hours, minutes, seconds = map(int, fields[0].split(":"))
        found.append((midnight + 3600 * hours + 60 * minutes + seconds, float(fields[2])))
    return found


def run_steps(steps: list[Step], budget: float, out: Path) -> None:
    sampler, deadline = Sampler(out / "dmon.log"), time.time() + budget
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        for step in steps:
            left = deadline - time.time()
            if left < 5:
                step.status = "not started: the budget was spent"
                continue
            start = time.time()
            with (out / "stages.log").open("a") as log:
                log.write(f"\n## {step.name}\n")
                log.flush()
                process = subprocess.Popen([sys.executable, "-m", *step.command], cwd=ROOT, env=env, stdout=log,
                                           stderr=subprocess.STDOUT)
                try:
                    code = process.wait(timeout=left)
                    step.status = "done" if code == 0 else f"failed (exit {code})"
                except subprocess.TimeoutExpired:
                    process.terminate()  # SIGTERM: a stage stops the seeds it fanned out, and writes nothing
                    try:
                        process.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait()
                    step.status = "stopped: the budget was spent"
            step.seconds = time.time() - start
            step.busy, step.busy_samples = sampler.busy(start, time.time())
            if step.command[0] == "pipelines.ablation" and step.status == "done":
                step.per_epoch = epoch_seconds(step)
            print(f"{step.name}: {step.status}, {step.seconds:.0f} s, GPU busy {_busy(step)}", flush=True)
    finally:
        sampler.stop()


def _busy(step: Step) -> str:
    return "n/a (no nvidia-smi)" if step.busy is None else f"{step.busy:.0f} % ({step.busy_samples} samples)"


def against_cpu(dataset: str = "imdb", gpu_root: Path = ROOT, reference: Path = REFERENCE) -> dict:
    """The GPU's seed 0 of train@dataset against the CPU run's (benchmarks/gpu_reference): per arm and metric the
    difference and the tolerance (half the CPU run's 95 % interval over its seeds); timing metrics left out."""
    rows, within = [], True
    for arm in ("trained", "untrained", "one_step"):
        gpu = json.loads((gpu_root / "results" / "train" / dataset / arm / "seed0" / "metrics.json").read_text())
        seeds = sorted((reference / "results" / "train" / dataset / arm).glob("seed*/metrics.json"))
        cpu = [json.loads(path.read_text()) for path in seeds]
        for metric in sorted(set(gpu) & set(cpu[0])):
            values = [run.get(metric) for run in cpu]
            if "seconds" in metric or not all(isinstance(value, int | float) for value in [gpu[metric], *values]):
                continue
            if not all(math.isfinite(value) for value in [gpu[metric], *values]):
                continue
            interval = seed_interval(values)  # the report's interval over the seeds
            tolerance = (interval.high - interval.low) / 2
            difference = gpu[metric] - values[0]
            ok = abs(difference) <= tolerance or difference == 0
            within &= ok
            rows.append({"arm": arm, "metric": metric, "cpu": values[0], "gpu": gpu[metric],
                         "difference": difference, "tolerance": tolerance, "within": ok})
    return {"rows": rows, "within": within}


def verdicts_with_gpu_seed(dataset: str = "imdb") -> dict:
    """compare@dataset over the GPU's seed 0 and the CPU run's seeds 1 and 2, its verdicts against the CPU run's
    (its seeds 0 to 2): each claim's `<claim>_holds` and the counts held, failed, inconclusive."""
    for folder in ("train", "one_step", "gradient_flow"):
        source = REFERENCE / "results" / folder / dataset
        for path in source.rglob("*"):
            target = ROOT / "results" / folder / dataset / path.relative_to(source)
            if path.is_file() and not (folder == "train" and "seed0" in path.parts):  # the GPU's own seed 0 stays
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
    done = subprocess.run([sys.executable, "-m", "pipelines.compare", f"dataset={dataset}"], cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode != 0:
        return {"status": f"compare failed: {done.stderr.strip().splitlines()[-1:]}"}
    cpu, gpu = (_read(base / "results" / "compare" / dataset) for base in (REFERENCE, ROOT))
    moved = {name: (cpu[name], gpu.get(name)) for name in cpu if cpu[name] != gpu.get(name)}
    return {"status": "done", "claims": len(cpu) - 3, "moved": moved}


def _read(folder: Path) -> dict[str, float]:
    """A compare stage's verdicts: 1 or 0 for each claim's `_holds`, and its counts (held, failed, inconclusive).
    Not the theory protocol's rows: they read the one-step embeddings, 229 MB a seed, which do not travel."""
    metrics = json.loads((folder / "metrics.json").read_text())
    counts = json.loads((folder / "verdicts.json").read_text())
    return {name: value for name, value in metrics.items()
            if name.endswith("_holds") and "_theory_protocol" not in name} | counts


def epoch_seconds(step: Step) -> float | None:
    """An ablation step's seconds per epoch trained: its stage's time (starts, readings and all) over the epochs of
    its seeds' kept and control fits."""
    values = dict(value.split("=", 1) for value in step.command[1:])
    folder = ROOT / "results" / "ablation" / values["dataset"] / values["sequence.variant"]
    runs = [json.loads(path.read_text()) for path in folder.glob("seed*/metrics.json")]
    epochs = sum(run.get("epochs", 0) + run.get("control_epochs", 0) for run in runs)
    return step.seconds / epochs if epochs else None


def step_rates() -> int:
    """Seconds per training step of every paper-scale ablation variant on each prepared dataset: gpu-steps.json."""
    from benchmarks import training
    from toksel.data.draws import data_dir
    from toksel.runtime.config import load_config

    config, found = load_config([PAPER]), []
    for dataset in ("yelp_polarity", "imdb"):
        if not (data_dir(dataset, 0) / "train.npz").exists():
            continue
        for variant in VARIANTS:
            module, data = training.sequence_model(config, dataset, variant, "paper")
            rate = training.measure(module, data, 3, 10, config.train.precision)
            found.append({"dataset": dataset, "variant": variant, "seconds_per_step": 1 / rate.steps_per_second})
            print(f"{dataset} {variant}: {1 / rate.steps_per_second:.4f} s a step", flush=True)
    Path(os.environ.get("GPU_STEPS", "gpu-steps.json")).write_text(json.dumps(found, indent=1))
    return 0


def table(steps: list[Step], machine: str, checks: dict) -> str:
    lines = [f"## On a GPU: {machine}", "",
             f"`benchmarks/gpu.sh` on {time.strftime('%Y-%m-%d')}: each stage as `dvc repro` runs it, timed, with "
             "the GPU's mean SM activity over the stage (`nvidia-smi dmon`, one sample a second).", "",
             "| step | status | seconds | s per epoch | GPU busy (mean SM %) |", "|---|---|---|---|---|"]
    lines += [f"| {step.name} | {step.status} | {'' if math.isnan(step.seconds) else f'{step.seconds:.0f}'} | "
              f"{'' if step.per_epoch is None else f'{step.per_epoch:.1f}'} | {_busy(step)} |" for step in steps]
    compared = checks.get("against_cpu")
    if compared:
        outside = [row for row in compared["rows"] if not row["within"]]
        largest = max(compared["rows"], key=lambda row: abs(row["difference"]) / max(abs(row["cpu"]), 1e-12))
        lines += ["", f"IMDB seed 0 on the GPU against the CPU run's seed 0 (benchmarks/gpu_reference): "
                      f"{len(compared['rows'])} metrics of the three arms, {len(outside)} outside the tolerance (half "
                      "the CPU run's 95 % interval over its seeds); the largest relative change: "
                      f"{largest['arm']} {largest['metric']} {largest['cpu']:.6g} -> {largest['gpu']:.6g}."]
        lines += [f"- outside: {row['arm']} {row['metric']} {row['cpu']:.6g} -> {row['gpu']:.6g} (tolerance "
                  f"{row['tolerance']:.3g})" for row in outside]
    verdicts = checks.get("verdicts")
    if verdicts:
        moved = verdicts.get("moved", {})
        lines += ["", f"compare@imdb over the GPU's seed 0 and the CPU run's seeds 1-2: {verdicts['status']}"
                      + (f"; of its {verdicts['claims']} claims' verdicts and its counts, {len(moved)} moved against "
                         f"the CPU run's{': ' + json.dumps(moved) if moved else ''}."
                         if verdicts["status"] == "done" else ".")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", default=["train", "yelp", "imdb_ablation", "steps"])
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for all the steps (default 480)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "gpu-out")
    parser.add_argument("--step-rates", action="store_true", help=argparse.SUPPRESS)  # the `steps` part's process
    args = parser.parse_args(argv)
    if args.step_rates:
        return step_rates()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["GPU_STEPS"] = str(args.out / "gpu-steps.json")
    steps, seen = [], set()
    for part in args.parts:
        steps += [step for step in steps_of(part) if step.name not in seen]
        seen |= {step.name for step in steps}
    run_steps(steps, args.budget, args.out)
    checks = {}
    trained = next((step for step in steps if step.command[0] == "pipelines.train"), None)
    if trained is not None and trained.status == "done":
        checks = {"against_cpu": against_cpu(), "verdicts": verdicts_with_gpu_seed()}
    import torch

    machine = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU (a dry run on the CPU)"
    text = table(steps, machine, checks)
    (args.out / "gpu.md").write_text(text)
    (args.out / "gpu.json").write_text(json.dumps({"machine": machine, "steps": [asdict(step) for step in steps],
                                                   **checks}, indent=1, default=str))
    with RESULTS.open("a") as results:
        results.write("\n" + text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
