"""How far in flow time the gradient flow on p (E frozen at E1) gets on the real data, and whether Lemma 4.2's
statistic has settled there: for each dataset and horizon T, the flow (default: the implicit ROS2 method of
theory/stiff_flow.py) and its run with every step halved, their seconds, steps, refused steps, gradient
evaluations, Hessian-vector products (implicit-krylov) and builds of W (implicit), |p_T|, L(p_T), log_growth, its
reading on the doubling before (growth_settledness) and whether the two agree, and the largest gap to the halved
run (of |p_t|, the loss and the final angle; "(!)" beyond --agreement). A dataset's larger horizons are skipped
once a flow and its halved run together cost more than --budget seconds.

Needs the datasets' `prepare` and `one_step` outputs (seed 0):  dvc repro one_step
Run:  python -m benchmarks.stiff_flow [--datasets yelp_polarity imdb] [--horizons 1e3 1e4 ...] [--method implicit]
      [--tolerance 3e-4] [--budget 180]
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

import numba
import numpy as np

from toksel.data.corpus import PackedSplit
from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.models.fused import FusedBags
from toksel.runtime.io import read_npz
from toksel.runtime.paths import results_dir, seed_dir
from toksel.theory.convergence import agreement, growth_settledness, log_growth
from toksel.theory.gradient_flow import Integration, Trajectory, halved, run_gradient_flow

HORIZONS = (1e3, 1e4, 1e5, 1e6, 1e7, 1e8)
DATASETS = ("yelp_polarity", "imdb")
BUDGET = 180.0  # seconds for a flow and its halved run: beyond it, a dataset's larger horizons are skipped


@dataclass(frozen=True)
class Problem:
    E: np.ndarray
    p0: np.ndarray
    v: np.ndarray
    bags: FusedBags


def load(dataset: str, seed: int = 0) -> Problem:
    """E1, p0, v of the dataset's one_step and its training split, as the gradient_flow stage reads them."""
    data = data_dir(dataset, seed)
    embeddings = read_npz(seed_dir(results_dir("one_step", dataset), seed) / "embeddings.npz", producer="one_step")
    train, tokens = PackedSplit.load(data / "train.npz"), read_token_table(data / "tokens.csv")
    return Problem(embeddings["E1"], embeddings["p0"], embeddings["v"], FusedBags.from_split(train, tokens.num_classes))


@dataclass(frozen=True)
class Row:
    dataset: str
    horizon: float
    seconds: float
    halved_seconds: float
    run: Trajectory
    finer: Trajectory

    def cells(self, agreement_tolerance: float) -> list[str]:
        run = self.run
        settled = growth_settledness(run.times, run.p_norm)
        check = agreement(run, self.finer, 0.0, 0.0)
        gap = max(check.p_norm_gap, check.loss_gap, check.angle)
        return [self.dataset, f"{self.horizon:.0e}", f"{self.seconds:.1f}", f"{self.halved_seconds:.1f}",
                str(run.steps), str(run.rejected), str(run.evaluations), str(run.products), str(len(run.rebuilds)),
                f"{run.p_norm[-1]:.3f}", f"{run.loss[-1]:.5f}", f"{log_growth(run.times, run.p_norm):.3f}",
                f"{settled.previous:.3f}", "yes" if settled.settled else "no",
                f"{gap:.1e}" + ("" if check.faithful(agreement_tolerance) else " (!)")]


HEADER = ["dataset", "T", "run s", "halved s", "steps", "refused", "gradients", "Hv", "W builds", "|p_T|", "L(p_T)",
          "log_growth", "previous doubling", "settled", "halved gap"]


def measure(problem: Problem, dataset: str, horizon: float, method: str, tolerance: float) -> Row:
    start = time.perf_counter()
    run = run_gradient_flow(problem.E, problem.p0, problem.v, problem.bags, Integration(horizon, tolerance, method))
    middle = time.perf_counter()
    finer = halved(problem.E, problem.p0, problem.v, problem.bags, run)
    return Row(dataset, horizon, middle - start, time.perf_counter() - middle, run, finer)


def warm_up(problem: Problem, method: str) -> None:
    """Compile the passes (numba's cache) outside the timings."""
    run_gradient_flow(problem.E, problem.p0, problem.v, problem.bags, Integration(1e-3, 1e-3, method))


def markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--horizons", nargs="+", type=float, default=list(HORIZONS))
    parser.add_argument("--method", default="implicit")
    parser.add_argument("--tolerance", type=float, default=3e-4)
    parser.add_argument("--agreement", type=float, default=0.02)
    parser.add_argument("--budget", type=float, default=BUDGET)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(f"method {args.method}, tolerance {args.tolerance:g}, numba threads {numba.get_num_threads()}, "
          f"load average before {os.getloadavg()}", flush=True)
    table: list[list[str]] = []
    for dataset in args.datasets:
        problem = load(dataset, args.seed)
        warm_up(problem, args.method)
        for horizon in sorted(args.horizons):
            row = measure(problem, dataset, horizon, args.method, args.tolerance)
            table.append(row.cells(args.agreement))
            print(" | ".join(table[-1]), f"(load {os.getloadavg()[0]:.2f})", flush=True)
            if row.seconds + row.halved_seconds > args.budget:
                print(f"{dataset}: T = {horizon:g} cost {row.seconds + row.halved_seconds:.0f} s > {args.budget:g} s: "
                      "larger horizons skipped", flush=True)
                break
    print()
    print(markdown(table))
    print(f"load average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
