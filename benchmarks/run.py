"""`make bench`: every benchmark on the real data, in one process, written to benchmarks/results.md.

Needs the pipeline's IMDB outputs (dvc repro one_step@imdb-0, or make repro) and, for the peak-memory table, the
stages' metrics.json. Run:  python -m benchmarks.run [--repeats 5] [--out benchmarks/results.md]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import numba
import numpy as np
import psutil
import torch
from omegaconf import OmegaConf

from benchmarks import cost_model as cost_model_module
from benchmarks import gradient_flow_rate, overheads, repro_timing, training
from benchmarks.dense import POSITIONS_PER_BATCH, bag_gradients, dense_gradients
from benchmarks.timing import timed
from toksel.data.corpus import PackedSplit
from toksel.data.draws import data_dir
from toksel.data.prepared import prepare_text
from toksel.data.token_table import read_token_table
from toksel.models.fused import FusedBags
from toksel.params import Config, first_seeds
from toksel.runtime.config import load_config
from toksel.runtime.io import read_npz
from toksel.runtime.paths import results_dir, seed_dir

DATASET = "imdb"
ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "benchmarks" / "logs"  # stamped `dvc repro -f` logs, named repro-<date>.log so that they sort by time


def machine() -> list[str]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    packages = ", ".join(f"{name} {version(name)}" for name in ("torch", "numpy", "numba", "pytorch-lightning"))
    return [f"- Machine: {cpu}, {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB; "
            f"{platform.system()} {platform.release()}",
            f"- Python {platform.python_version()}; {packages}; numba threads {numba.get_num_threads()}, "
            f"torch threads {torch.get_num_threads()}",
            f"- GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}",
            f"- Run on {time.strftime('%Y-%m-%d %H:%M %Z')} by `python -m benchmarks.run`"]


def loss_and_gradient(repeats: int) -> list[str]:
    train = PackedSplit.load(data_dir(DATASET, 0) / "train.npz")
    bags = FusedBags.from_split(train)
    start = read_npz(seed_dir(results_dir("one_step", DATASET), 0) / "embeddings.npz", producer="one_step")
    E, p, v = np.ascontiguousarray(start["E1"]), start["p0"] * 10, start["v"]  # a peaked softmax, as after GD
    bag_gradients(E, p, v, bags)  # compile
    bag = timed(lambda: bag_gradients(E, p, v, bags), repeats)
    dense = timed(lambda: dense_gradients(E, p, v, train), repeats)
    difference = bag.result.relative_difference(dense.result)
    speed_up = dense.median / bag.median
    lengths = train.lengths
    return [
        f"Full IMDB train: n = {train.n:,} reviews, {lengths.sum():,} positions (longest {lengths.max():,}), "
        f"{len(bags.tokens):,} (review, token) entries, |S| = {E.shape[0]:,}, d = {E.shape[1]}, float64; "
        "E = E1 of one_step@imdb, p = 10 p0 (a peaked softmax), v of the run. One loss and its gradients in E, p "
        f"and v. Median of {repeats} runs.",
        "",
        "| path | median | runs (s) |",
        "|---|---|---|",
        f"| (a) dense autograd, E_X gathered in minibatches of at most {POSITIONS_PER_BATCH:,} positions | "
        f"{dense.median:.2f} s | "
        f"{', '.join(f'{s:.2f}' for s in dense.seconds)} |",
        f"| (b) bag of tokens: fused pass + products with E | {1e3 * bag.median:.1f} ms | "
        f"{', '.join(f'{s:.4f}' for s in bag.seconds)} |",
        "",
        f"(b) is **{speed_up:,.0f} times** faster than (a) (target: at least 100). Largest relative difference "
        f"(Frobenius, over the loss and the three gradients): **{difference:.1e}** (target: at most 1e-5); "
        f"loss {bag.result.loss:.12f} against {dense.result.loss:.12f}.",
        f"Target met: {'yes' if speed_up >= 100 and difference <= 1e-5 else 'NO'}.",
    ]


def step_rate(repeats: int) -> list[str]:
    rate = gradient_flow_rate.measure(DATASET, repeats)
    bandwidth = gradient_flow_rate.read_bandwidth()
    step = 1 / rate.steps_per_second
    lines = [
        f"Plain GD on p with E frozen at E1, full IMDB train ({rate.entries:,} entries, |S| = {rate.vocab_size:,}, "
        f"d = {rate.d}, float64), {rate.threads} threads: **{rate.steps_per_second:.1f} steps per second** "
        f"(median of {repeats} runs of {gradient_flow_rate.STEPS} steps: "
        f"{', '.join(f'{r:.1f}' for r in rate.rates)}); target 100.",
        "",
        f"Where a step's {1e3 * step:.1f} ms go, against the bytes each part must read at the read bandwidth "
        f"measured here ({bandwidth / 1e9:.1f} GB/s: the threaded E p product on a 1 GiB matrix, far beyond the "
        "caches):",
        "",
        "| part | median | bytes read at least | time at the measured bandwidth | share of the bandwidth used |",
        "|---|---|---|---|---|",
    ]
    for name, seconds in rate.parts.items():
        moved = rate.bytes_per_step[name]
        lines.append(f"| {name} | {1e3 * seconds:.2f} ms | {moved / 1e6:.0f} MB | {1e3 * moved / bandwidth:.2f} ms | "
                     f"{moved / bandwidth / seconds:.0%} |")
    floor = sum(rate.bytes_per_step.values()) / bandwidth
    rest = step - sum(rate.parts.values())
    products = (rate.bytes_per_step["E p"] + rate.bytes_per_step["E^T g"]) / bandwidth
    fused = rate.parts["fused pass"]
    lines += [
        f"| the rest (GD update, loop) | {1e3 * rest:.2f} ms | | | |",
        "",
        f"A step must read at least {sum(rate.bytes_per_step.values()) / 1e6:.0f} MB: at {bandwidth / 1e9:.1f} GB/s "
        f"that is {1e3 * floor:.2f} ms, a ceiling of {1 / floor:.0f} steps per second from memory bandwidth alone.",
        "",
        f"The fused pass is not bound by bytes but by its {rate.entries:,} irregular accesses: the least any pass "
        "over the entries does, a bare compiled loop on the same threads that reads each entry, gathers its "
        f"token's score and value and adds one number into that token's gradient, takes **{1e3 * rate.entry_floor:.2f} "
        f"ms** here ({1e9 * rate.entry_floor * rate.threads / rate.entries:.1f} ns per entry per thread); the fused "
        f"pass, which also computes the softmax, the loss and the difference-form sums, takes "
        f"{fused / rate.entry_floor:.1f} times that.",
        "",
        f"So on this machine a step cannot take less than the bare pass over the entries plus the two products at "
        f"the measured bandwidth, {1e3 * rate.entry_floor:.2f} + {1e3 * products:.2f} = "
        f"{1e3 * (rate.entry_floor + products):.2f} ms: at most **{1 / (rate.entry_floor + products):.0f} steps per "
        f"second**, against the {rate.steps_per_second:.1f} measured "
        f"({rate.steps_per_second * (rate.entry_floor + products):.0%} of that limit).",
    ]
    return lines


def gradient_flow_stage(repeats: int) -> list[str]:
    """`python -m pipelines.gradient_flow dataset=imdb` as DVC runs it, in a scratch project that links the
    real inputs, so the real outputs and the MLflow store stay untouched."""
    with tempfile.TemporaryDirectory() as scratch:
        project = Path(scratch)
        (project / "results").mkdir()
        (project / "params.yaml").write_text((ROOT / "params.yaml").read_text())
        (project / "data").symlink_to(ROOT / "data")
        (project / "results" / "one_step").symlink_to(ROOT / "results" / "one_step")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKSEL_PROGRESS": "0",
               "MLFLOW_TRACKING_URI": f"sqlite:///{project / 'mlflow.db'}"}
        command = [sys.executable, "-m", "pipelines.gradient_flow", f"dataset={DATASET}"]
        stage = timed(lambda: subprocess.run(command, cwd=project, env=env, check=True, capture_output=True),
                      repeats)
        written = seed_dir(project / "results" / "gradient_flow" / DATASET, 0) / "metrics.json"
        metrics = json.loads(written.read_text())
        record = json.loads((project / "runs" / "gradient_flow" / f"{DATASET}.json").read_text())["runs"][0]
    settings = load_config([f"dataset={DATASET}"]).gradient_flow
    return [f"`python -m pipelines.gradient_flow dataset={DATASET}` (flow time {settings.horizon:g}, "
            f"{metrics['steps']:,.0f} steps of the first seed and as many again halved, its control, "
            f"{len(first_seeds(load_config().base.seeds, settings.seeds))} seeds, MLflow and outputs included, "
            "a fresh process each time): median "
            f"**{stage.median:.1f} s** of {repeats} runs ({', '.join(f'{s:.1f}' for s in stage.seconds)}); peak memory "
            f"{_peak(record):,.0f} MiB."]


PHASE_D = 256  # the row of the phase grid the fan-out benchmark runs


def phase_fanout(repeats: int) -> list[str]:
    """One row of the phase grid at 4 times the default eta0 resolution (4 points per doubling instead of 1), its
    cells through the embedded Dask default on one worker and on every core, in a scratch project that links the
    real data. The same numbers both ways (checked)."""
    config = load_config()
    low, high = min(config.phase.eta0), max(config.phase.eta0)
    grid = [float(f"{low * 2 ** (k / 4):.4g}") for k in range(int(4 * np.log2(high / low)) + 1)]
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as scratch:
        project = Path(scratch)
        (project / "params.yaml").write_text((ROOT / "params.yaml").read_text())
        (project / "data").symlink_to(ROOT / "data")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKSEL_PROGRESS": "0"}
        written = project / "results" / "phase" / f"d{PHASE_D}" / "metrics.json"

        def row(workers: int) -> dict:
            command = [sys.executable, "-m", "pipelines.phase", f"model.d={PHASE_D}",
                       f"phase.eta0=[{','.join(f'{eta0:g}' for eta0 in grid)}]", f"compute.workers={workers}"]
            subprocess.run(command, cwd=project, env=env, check=True, capture_output=True)
            return json.loads(written.read_text())

        one, every = timed(lambda: row(1), repeats), timed(lambda: row(cores), repeats)
    same = json.dumps(one.result, sort_keys=True) == json.dumps(every.result, sort_keys=True)
    cells = sum(len(seeds) for seeds in one.result.values())
    return [f"`python -m pipelines.phase model.d={PHASE_D}` with {len(grid)} values of eta0 from {low:g} to {high:g} "
            f"(4 per doubling, 4 times the default {len(config.phase.eta0)}), {cells} cells with the seeds' edge "
            f"cells, a fresh process each time, median of {repeats} runs:", "",
            "| workers | seconds | speed-up |", "|---|---|---|",
            f"| 1 | {one.median:.1f} ({', '.join(f'{s:.1f}' for s in one.seconds)}) | 1.00 |",
            f"| {cores} (this machine's cores, the default) | {every.median:.1f} "
            f"({', '.join(f'{s:.1f}' for s in every.seconds)}) | {one.median / every.median:.2f} |", "",
            f"The metrics of every cell {'bit for bit the same' if same else 'DIFFER'} both ways."]


def _peak(record: dict) -> float:
    """The peak memory a run record or the runs nested in it recorded (runtime/records.py), the largest; 0 if none."""
    own = record["metrics"].get("peak_memory_mb", [[0, 0.0, 0]])[-1][1]
    return max([own, *(_peak(child) for child in record["children"])])


def prepare_throughput(repeats: int) -> list[str]:
    config = load_config([f"dataset={DATASET}"])
    prepare = timed(lambda: prepare_text(DATASET, config.data, config.base.data_seed), repeats)
    median, splits = prepare.median, prepare.result.splits.values()
    reviews = sum(split.n for split in splits)
    tokens = sum(int(split.lengths.sum()) for split in splits)
    return [f"`prepare` of {DATASET} from the mirror's parquet files (load, balanced subsample, tokenize with "
            f"`{config.data.tokenizer}`, vocabulary, encode, pack, token statistics), {reviews:,} reviews and "
            f"{tokens:,} tokens kept: median **{median:.1f} s** of {repeats} runs "
            f"({', '.join(f'{s:.1f}' for s in prepare.seconds)}): **{reviews / median:,.0f} reviews/s, "
            f"{tokens / median / 1e6:.2f} M tokens/s**."]


def lightning(windows: int) -> list[str]:
    config = load_config([f"dataset={DATASET}"])
    one = training.one_layer_step(config, DATASET, windows, steps=10)
    with training.autograd_products():
        plain = training.one_layer_step(config, DATASET, windows, steps=10)
    vocabulary = len(read_token_table(data_dir(DATASET, 0) / "tokens.csv"))
    E_bytes = vocabulary * config.model.d * 4  # float32: precision 32-true
    bandwidth = gradient_flow_rate.read_bandwidth()
    floor = overheads.training_step_floor(E_bytes, bandwidth)
    lines = [f"One-layer bag-of-tokens model (the `train` stage, E, p and v trained, d = {config.model.d}, batch "
             f"{config.train.batch_size}, precision {config.train.precision}, fused AdamW, freed memory kept, CPU): "
             f"**{one.steps_per_second:.1f} steps/s**, {one.sequences_per_second:,.0f} reviews/s, "
             f"{one.tokens_per_second / 1e6:.2f} M tokens/s (median of {one.windows} windows of {one.steps} steps).",
             "",
             f"Its memory-bandwidth floor: E is {E_bytes / 1e6:.0f} MB; a step must read it once for the products, "
             f"write its gradient once, and the fused AdamW reads E, the gradient and both moments and writes three "
             f"of them back: 9 x {E_bytes / 1e6:.0f} = {9 * E_bytes / 1e6:.0f} MB, at the {bandwidth / 1e9:.1f} GB/s "
             f"measured here {1e3 * floor:.1f} ms, **{1 / floor:.0f} steps/s**. Measured: "
             f"**{one.steps_per_second * floor:.0%} of the floor** (target: 50 %). The same step with E p and E v "
             f"as plain torch products differentiated by autograd (two passes over E forward, two back, dE as two "
             f"outer products then added): {plain.steps_per_second:.1f} steps/s, "
             f"{plain.steps_per_second * floor:.0%} of the floor.", "",
             f"Two-layer model over positions (the `ablation` stage's `two_layer`, d = {config.sequence.cpu.d}, "
             f"batch {config.sequence.batch_size}, CPU), tokens per second with and without length bucketing "
             f"(median of {windows} windows of 10 steps):", "",
             "| reviews cut to | bucketed | steps/s | tokens/s (no padding) | positions/s (with padding) | "
             "padding |", "|---|---|---|---|---|---|"]
    for max_len in (config.sequence.cpu.max_len, 512):
        for bucketed in (True, False):
            rate = training.two_layer_step(config, DATASET, bucketed, max_len, windows, steps=10)
            lines.append(f"| {max_len} | {'yes' if bucketed else 'no'} | {rate.steps_per_second:.2f} | "
                         f"{rate.tokens_per_second:,.0f} | {rate.padded_tokens_per_second:,.0f} | "
                         f"{1 - rate.tokens_per_second / rate.padded_tokens_per_second:.1%} |")
    if not torch.cuda.is_available():
        lines += ["", "GPU (bf16 autocast, TF32): not measured, this machine has no GPU."]
    return lines


def fixed_cost(repeats: int) -> list[str]:
    costs = overheads.fixed_costs(repeats)
    lines = ["A fresh process per stage kind (as DVC starts it, without DVC's own cost): importing the stage's module, "
             "and importing it then running `run_stage` with a body that does nothing (config, its run record "
             "written with its outputs; no stage opens MLflow). Median of "
             f"{repeats} runs each, the synthetic dataset.", "",
             "| stage kind | import only | import + run_stage, nothing done | of which run_stage |",
             "|---|---|---|---|"]
    for cost in costs:
        own = cost.total - cost.imports
        lines.append(f"| {cost.stage} | {cost.imports:.2f} s | {cost.total:.2f} s | {own:.2f} s |")
    seeded = overheads.seeded_fixed_costs(repeats)
    lines += ["", f"A stage that runs every seed, over {seeded[0].seeds} seeds with a body that only imports the "
              "stage's module: its seeds in processes of their own (the default: each process imports the stage's "
              "modules before its seed's work, both at once on the two cores), and every seed in the stage's process "
              "(`compute.workers=1`, as before the seeds fanned out):", "",
              "| stage kind | seeds fanned out | seeds in the stage's process | difference |", "|---|---|---|---|"]
    for cost in seeded:
        lines.append(f"| {cost.stage} | {cost.fanned_out:.2f} s | {cost.in_process:.2f} s | "
                     f"{cost.fanned_out - cost.in_process:+.2f} s |")
    return lines


def torch_against_numba(repeats: int) -> list[str]:
    train = PackedSplit.load(data_dir(DATASET, 0) / "train.npz")
    start = read_npz(seed_dir(results_dir("one_step", DATASET), 0) / "embeddings.npz", producer="one_step")
    E, p, v = np.ascontiguousarray(start["E1"]), start["p0"], start["v"]
    times = overheads.pass_in_p(E, p, v, FusedBags.from_split(train), train, repeats)
    return ["One full-batch loss and its gradient in p, full IMDB train (E frozen at E1, p0), as each gradient_flow "
            f"step computes it; median of {repeats} runs:", "",
            "| path | median | against numba |", "|---|---|---|",
            f"| numba: fused pass + E p + E^T g, float64 (gradient_flow's) | {1e3 * times.numba:.1f} ms | 1 |",
            f"| torch eager autograd, float64 | {1e3 * times.torch_float64:.1f} ms | "
            f"{times.torch_float64 / times.numba:.1f}x |",
            f"| torch eager autograd, float32 | {1e3 * times.torch_float32:.1f} ms | "
            f"{times.torch_float32 / times.numba:.1f}x |", "",
            f"The two float64 gradients differ by {times.relative_difference:.1e} (relative). The numba pass earns its "
            "place (torch.compile, which needs a C++ toolchain at run time, is not measured)."]


@functools.cache
def _dense_batch_gib(dataset: str) -> float:
    """n x T_max x d float32 of a dataset's train split, in GiB (each split read once)."""
    split = PackedSplit.load(data_dir(dataset, 0) / "train.npz")
    return split.n * int(split.lengths.max()) * load_config([f"dataset={dataset}"]).model.d * 4 / 2**30


def peak_memory() -> list[str]:
    """Each stage's recorded peak memory (its run records, the largest of its seeds) against the n x T x d array
    the dense model would hold."""
    lines = ["| stage | peak memory | n x T_max x d in float32 (a dense full batch of its data) |",
             "|---|---|---|"]
    for path in sorted(Path("runs").glob("**/[!.]*.json")):
        runs = json.loads(path.read_text())["runs"]
        peak = max(_peak(run) for run in runs)
        stage, dataset = path.parts[1], path.parts[2].removesuffix(".json") if len(path.parts) > 2 else ""
        dense = ""
        prepared = dataset and (Path("data") / "processed" / dataset / "draws.json").exists()
        if prepared and stage in ("one_step", "gradient_flow", "train", "evaluate"):
            dense = f"{_dense_batch_gib(dataset):,.1f} GiB"
        lines.append(f"| {path.with_suffix('')} | {peak:,.0f} MiB | {dense} |")
    return lines


def repro_by_stage_kind() -> list[str]:
    """The stamped `dvc repro -f` logs kept in benchmarks/logs (python -m benchmarks.repro_timing run), side by side."""
    logs = sorted(LOGS.glob("repro-*.log"))
    if not logs:
        return [f"No stamped log in {LOGS}: `python -m benchmarks.repro_timing run {LOGS}/repro-<date>.log`."]
    return ["The whole pipeline from nothing (`dvc repro -f`, default params.yaml, 2 cores), each log stamped line by "
            "line by `python -m benchmarks.repro_timing run`; a stage lasts from its `Running stage` line to the "
            "next one, so DVC's own cost per stage is in it. Oldest log first:", "",
            *[f"- `{log.name}`: {line}" for log in logs for line in log_notes(log)], "",
            *repro_timing.table(logs)]


WORKERS = (1, 2, 8, 32, 128)  # the cost model's cluster sizes
STUDY_SEEDS, STUDY_PHASE = 20, 40  # a larger study: 20 seeds, the phase grid at 10 x its eta0 and 4 x its seeds
PAPER_VARIANTS = ("mlp", "mlp_residual", "two_layer", "two_layer_kq")
PAPER_DATASETS = ("imdb", "yelp_polarity")
H100_BF16_DENSE = 989e12  # FLOP/s, NVIDIA's figure for the H100 SXM's dense bf16 tensor cores


def paper_config() -> Config:
    """params.yaml with profiles/paper.yaml on top, as `python -m tools.profile paper` runs it."""
    merged = OmegaConf.merge(OmegaConf.load(ROOT / "params.yaml"), OmegaConf.load(ROOT / "profiles" / "paper.yaml"))
    with tempfile.TemporaryDirectory() as folder:
        OmegaConf.save(merged, Path(folder) / "params.yaml")
        return load_config(path=Path(folder) / "params.yaml")


def cost_model(steps: int) -> list[str]:
    """The default pipeline's units from the newest stamped log, N workers from their measured costs; the paper-scale
    profile's ablations from a step of each variant measured here and its counted FLOPs."""
    logs = sorted(LOGS.glob("repro-*.log"))
    if not logs:
        return [f"No stamped log in {LOGS}: `python -m benchmarks.repro_timing run {LOGS}/repro-<date>.log`."]
    log = logs[-1]
    cells = {f"phase@{path.parent.name.removeprefix('d')}":
             sum(len(seeds) for seeds in json.loads(path.read_text()).values())
             for path in Path("results", "phase").glob("d*/metrics.json")}
    stages = cost_model_module.stage_costs(log, cells)
    study = cost_model_module.scaled(stages, STUDY_SEEDS, STUDY_PHASE)
    most = max(len(stage.units) for stage in stages if not stage.name.startswith("phase"))
    lines = [f"The default pipeline, from `{log.name}` (its note: {log_notes(log)[0][:120]}...). A unit is a seed of a "
             "seeded stage, a (d, seed) point of the d sweep, a phase cell; a stage that fans nothing out is one "
             "unit, and so is calibrate (conservative: its replicates do fan out). Stages one after another, as "
             "`dvc repro` runs them; each stage's overhead (its time here beyond its units' makespan on 2 workers) "
             "kept as measured. Seconds:", "", *cost_model_module.pipeline_table(stages, WORKERS), "",
             f"No stage of the default run but the phase rows has more than {most} units, so beyond 8 workers it "
             f"gains nothing. A study that outgrows a laptop, from the same unit costs: {STUDY_SEEDS} seeds in every "
             f"seeded stage and the phase grid at {STUDY_PHASE} times its cells (eta0 at 10 times the resolution, "
             "4 times the seeds). Seconds:", "", *cost_model_module.pipeline_table(study, WORKERS), ""]
    config, default_dataset = paper_config(), load_config([]).ablation.datasets[0]
    costs = []
    for dataset in PAPER_DATASETS:
        if not (data_dir(dataset, 0) / "train.npz").exists():
            return [*lines, f"The paper-scale profile: data/processed/{dataset} is missing (dvc repro "
                            f"prepare@{dataset})."]
        for variant in PAPER_VARIANTS:
            module, data = training.sequence_model(config, dataset, variant, "paper")
            rate = training.measure(module, data, 1, steps, config.train.precision)
            flops = training.step_flops(module, data, steps)
            train_rows = len(data.rows("train")[1])
            default_run = Path("results", "ablation", default_dataset, variant)
            costs.append(cost_model_module.StepCost(
                variant, dataset, 1 / rate.steps_per_second, flops,
                cost_model_module.ceil_div(train_rows, config.sequence.batch_size),
                cost_model_module.epochs_per_seed(default_run)))
    seeds, measured = config.train.seeds, cost_model_module.measured_gpu_steps(LOGS)
    if measured is None:
        gpu_note = ("The GPU columns are not measured (no GPU has run benchmarks/gpu.sh): the FLOPs over the H100's "
                    "dense bf16 peak, a bound no run reaches, and over a fifth of it; a step of these small models "
                    "also pays a launch and loader cost of some milliseconds that FLOPs do not count, so the steps "
                    "are given too:")
        gpu_columns = "H100 minutes at peak | at 1/5 of peak"
    else:
        gpu_note = (f"The GPU columns are measured: a step's seconds on the GPU from benchmarks/logs/{measured[0]} "
                    "(benchmarks/gpu.sh), times the steps:")
        gpu_columns = "GPU s/step (measured) | GPU minutes, all seeds"
    lines += [f"The paper-scale profile's ablations (profiles/paper.yaml: d {config.sequence.paper.d}, whole "
              f"reviews, all rows, {seeds} seeds, {len(PAPER_VARIANTS)} variants on {' and '.join(PAPER_DATASETS)}). "
              f"One training step measured here (CPU, both cores, {config.train.precision}, batch "
              f"{config.sequence.batch_size}, bucketed, mean of {steps} steps after {training.WARM_UP} of "
              f"warm-up); its FLOPs counted over {steps} batches; the epochs of a seed's fits (kept + control) "
              f"those of the default run's {default_dataset} ablations. {gpu_note}", "",
              "| variant | dataset | s/step here | GFLOP/step | steps/epoch | epochs per seed | steps, all seeds | "
              f"CPU hours, all seeds | {gpu_columns} |", "|---" * 10 + "|"]
    total_cpu = total_flops = total_steps = total_gpu = 0.0
    for cost in costs:
        cpu, flops = cost.fits_seconds() * seeds / 3600, cost.fits_flops() * seeds
        steps_all = cost.steps_per_epoch * cost.epochs * seeds
        total_cpu, total_flops, total_steps = total_cpu + cpu, total_flops + flops, total_steps + steps_all
        if measured is None:
            gpu = (f"{60 * cost_model_module.gpu_hours(flops, H100_BF16_DENSE):.1f} | "
                   f"{60 * cost_model_module.gpu_hours(flops, H100_BF16_DENSE / 5):.1f}")
        else:
            step = measured[1].get((cost.variant, cost.dataset), math.nan)
            total_gpu += steps_all * step / 60
            gpu = f"{step:.4f} | {steps_all * step / 60:.1f}"
        lines.append(f"| {cost.variant} | {cost.dataset} | {cost.seconds:.2f} | {cost.flops / 1e9:,.0f} | "
                     f"{cost.steps_per_epoch:,} | {cost.epochs:.1f} | {steps_all:,.0f} | {cpu:,.1f} | {gpu} |")
    gpu_total = (f"**{60 * cost_model_module.gpu_hours(total_flops, H100_BF16_DENSE):.1f}** | "
                 f"**{60 * cost_model_module.gpu_hours(total_flops, H100_BF16_DENSE / 5):.1f}**"
                 if measured is None else f" | **{total_gpu:.1f}**")
    lines.append(f"| **all** | | | | | | **{total_steps:,.0f}** | **{total_cpu:,.1f}** | {gpu_total} |")
    longest = max(cost.fits_seconds() for cost in costs) / 3600
    lines += ["", f"Its units are {len(costs) * seeds} seeds ({len(costs)} variant-dataset pairs x {seeds}): on as "
              f"many workers as units, each as fast as this machine, it takes the longest unit, {longest:.1f} h "
              f"(against {total_cpu:,.1f} h one unit after another here)."]
    return lines


def log_notes(log: Path) -> list[str]:
    """What a kept log was run on: the text lines of its `.md` companion before any table (the table this section
    draws anyway), if any."""
    note = log.with_suffix(".md")
    if not note.exists():
        return ["(no note)"]
    text = note.read_text().split("\n|", 1)[0]
    return [line for line in text.strip().splitlines() if line.strip()]


def _sections(text: str) -> dict[str, list[str]]:
    """The lines of each `## title` section of an earlier results.md, heading included."""
    sections: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("## "):
            title = line[3:]
            sections[title] = []
        if sections:
            sections[title].append(line)
    return sections


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per measurement (the medians are over them)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results.md")
    parser.add_argument("--only", nargs="+", metavar="WORD",
                        help="re-measure only the sections whose title holds one of these words, and replace them "
                             "in --out (the dense baseline alone takes about 18 minutes)")
    args = parser.parse_args(argv)
    if not (seed_dir(results_dir("one_step", DATASET), 0) / "embeddings.npz").exists():
        print(f"benchmarks: {results_dir('one_step', DATASET)}/embeddings.npz is missing: run "
              f"`dvc repro one_step@{DATASET}` first", file=sys.stderr)
        return 2
    sections = {
        "Machine": machine,
        "(a) dense autograd against (b) the bag-of-tokens path: one full-batch loss and gradient":
            lambda: loss_and_gradient(args.repeats),
        "Gradient-flow steps per second, and the memory-bandwidth account": lambda: step_rate(args.repeats),
        "A whole gradient_flow stage": lambda: gradient_flow_stage(args.repeats),
        "prepare throughput": lambda: prepare_throughput(args.repeats),
        "Lightning training throughput": lambda: lightning(args.repeats),
        "Fixed cost of a stage, by kind": lambda: fixed_cost(args.repeats),
        "The phase grid's cells on one worker and on every core": lambda: phase_fanout(min(args.repeats, 3)),
        "The full-batch pass in p: numba against torch": lambda: torch_against_numba(args.repeats),
        "`dvc repro -f` from nothing, by stage kind": repro_by_stage_kind,
        "Peak memory of every stage (its run records, from the last dvc repro)": peak_memory,
        "What a cluster or a GPU would take: the cost model": lambda: cost_model(8),
    }
    earlier = _sections(args.out.read_text()) if args.out.exists() else {}
    kept = earlier if args.only else {}
    lines = ["# toksel benchmarks", ""]
    for title, section in sections.items():
        if title in kept and not any(word in title for word in args.only):
            lines += kept[title]
            continue
        print(f"benchmarks: {title} ...", file=sys.stderr, flush=True)
        lines += [f"## {title}", "", *section(), ""]
    for title, recorded in earlier.items():  # measured by other means (a CI run): kept as they were
        if title not in sections:
            lines += recorded
    args.out.write_text("\n".join(lines))
    print(f"benchmarks: written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
