"""What a stage costs before it does any work, the Lightning training step against its memory-bandwidth floor, and
the full-batch pass in p on numba against torch.

- Fixed cost of a stage kind: a fresh process that imports the stage's module and runs `run_stage` with a body
  that does nothing (config, its run record, written with the stage's outputs), timed from outside, beside the same
  process that only imports the module. It runs in a throw-away project folder: its records touch nothing here.
- Training step floor: the bytes a trained-E step of the `train` stage must move at least (read E once for the
  products, write its gradient once, and the fused AdamW's four reads and three writes of E-sized arrays) at the
  read bandwidth measured here.
- torch against numba: one full-batch loss and its gradient in p on full IMDB (E frozen at E1), the numba path
  (fused pass and the two products: what gradient_flow runs) against torch's autograd on the bag-of-tokens model.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from benchmarks.cost_model import SEEDED
from benchmarks.timing import timed
from toksel.data.corpus import PackedSplit
from toksel.models import one_layer
from toksel.models.fused import FusedBags, loss_and_token_gradients
from toksel.models.products import scores, transposed_product

ROOT = Path(__file__).resolve().parents[1]
# stage -> the arguments of its cheapest real invocation (the synthetic data, one seed)
STAGES = {
    "prepare": ["dataset=synthetic"], "one_step": ["dataset=synthetic"], "gradient_flow": ["dataset=synthetic"],
    "phase": ["dataset=synthetic"], "evaluate": ["dataset=synthetic"], "compare": ["dataset=synthetic"],
    "phase_diagram": [], "ablation_report": [], "calibrate": [], "report": [], "train": ["dataset=synthetic"],
    "ablation": ["dataset=synthetic"], "d_sweep": ["dataset=synthetic"],
}
NOTHING = """
import sys
import tempfile
from importlib import import_module
stage = import_module("pipelines." + sys.argv[1])
from toksel.runtime.cli import run_stage
sys.exit(run_stage(sys.argv[1], stage.SECTIONS, lambda config, run: None, sys.argv[2:]))
"""


# run_stage over every seed of base.seeds with a body that only imports the stage's module: where the seeds run in
# processes of their own, what each process pays before a seed's work.
NOTHING_SEEDED = """
import sys
from importlib import import_module
stage = import_module("pipelines." + sys.argv[1])
from toksel.runtime.cli import run_stage
from toksel.runtime.paths import results_dir
sys.exit(run_stage(sys.argv[1], stage.SECTIONS, lambda config, run: import_module("pipelines." + sys.argv[1]),
                   sys.argv[2:], every_seed=lambda config: results_dir(sys.argv[1], config.dataset)))
"""


@dataclass(frozen=True)
class SeededFixedCost:
    stage: str
    seeds: int
    fanned_out: float  # median seconds, the seeds in processes of their own (the default)
    in_process: float  # median seconds, compute.workers=1: every seed in the stage's process


def seeded_fixed_costs(repeats: int, seeds: int = 2) -> list[SeededFixedCost]:
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        shutil.copy(ROOT / "params.yaml", project / "params.yaml")
        chosen = f"base.seeds=[{','.join(map(str, range(seeds)))}]"
        return [SeededFixedCost(stage, seeds,
                                _process_seconds(NOTHING_SEEDED, [stage, *STAGES[stage], chosen], repeats, project),
                                _process_seconds(NOTHING_SEEDED, [stage, *STAGES[stage], chosen, "compute.workers=1"],
                                                 repeats, project))
                for stage in SEEDED]


@dataclass(frozen=True)
class FixedCost:
    stage: str
    imports: float  # median seconds of a process that imports the stage's module
    total: float  # median seconds of a process that also runs run_stage with a body that does nothing


def _process_seconds(code: str, args: list[str], repeats: int, project: Path) -> float:
    environment = {**os.environ, "TOKSEL_PROGRESS": "0", "PYTHONPATH": str(ROOT)}

    def run() -> None:
        subprocess.run([sys.executable, "-c", code, *args], cwd=project, env=environment, check=True,
                       capture_output=True)

    return timed(run, repeats, warm_up=True).median


def fixed_costs(repeats: int) -> list[FixedCost]:
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        shutil.copy(ROOT / "params.yaml", project / "params.yaml")
        return [FixedCost(stage, _process_seconds(f"import pipelines.{stage}", [], repeats, project),
                          _process_seconds(NOTHING, [stage, *args], repeats, project))
                for stage, args in STAGES.items()]


def training_step_floor(E_bytes: int, bandwidth: float) -> float:
    """Seconds a trained-E step takes at least: E read once, its gradient written once, and AdamW's fused pass
    reading E, the gradient and the two moments and writing E and the moments back (9 E-sized passes)."""
    return 9 * E_bytes / bandwidth


@dataclass(frozen=True)
class PassTimes:
    numba: float  # median seconds: fused pass + E p + E^T g, float64
    torch_float64: float  # autograd on one_layer.loss, gradient in p only
    torch_float32: float
    relative_difference: float  # |grad_torch64 - grad_numba| / |grad_numba|


def pass_in_p(E: np.ndarray, p: np.ndarray, v: np.ndarray, bags: FusedBags, split: PackedSplit,
              repeats: int) -> PassTimes:
    values = E @ v

    def with_numba() -> np.ndarray:
        _, grad_scores, _ = loss_and_token_gradients(scores(E, p), values, bags, with_values=False)
        return transposed_product(E, grad_scores)

    def with_torch(dtype: torch.dtype) -> Callable[[], np.ndarray]:
        tensor_bags = one_layer.Bags.from_split(split, dtype)
        E_t, v_t = torch.from_numpy(E).to(dtype), torch.from_numpy(v).to(dtype)
        p_t = torch.from_numpy(p).to(dtype).requires_grad_(True)

        def step() -> np.ndarray:
            p_t.grad = None
            one_layer.loss(E_t, p_t, v_t, tensor_bags).backward()
            return p_t.grad.double().numpy()

        return step

    numba_time = timed(with_numba, repeats, calls=5, warm_up=True)
    float64 = timed(with_torch(torch.float64), repeats, warm_up=True)
    float32 = timed(with_torch(torch.float32), repeats, warm_up=True)
    reference = numba_time.result
    difference = float(np.linalg.norm(float64.result - reference) / np.linalg.norm(reference))
    return PassTimes(numba_time.median, float64.median, float32.median, difference)
