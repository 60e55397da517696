"""Steps per second of gradient flow on a prepared dataset (default: full IMDB train, d = 2048), and the
split of one step between the fused pass and the two products with E.

Needs the dataset's `prepare` and `one_step` outputs:  dvc repro one_step@imdb
Run:  python -m benchmarks.gradient_flow_rate [dataset] [repeats]
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import numba

from toksel.data.corpus import PackedSplit
from toksel.data.token_table import num_classes, read_token_table
from toksel.io import read_npz
from toksel.models.fused import FusedBags, loss_and_token_gradients
from toksel.models.products import scores, transposed_product
from toksel.paths import processed_dir, results_dir
from toksel.training.gradient_flow import run_gradient_flow

STEPS = 100


def median_seconds(action: Callable[[], object], repeats: int, calls: int = 20) -> float:
    action()  # compile, warm the caches
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            action()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def main(dataset: str = "imdb", repeats: int = 5) -> None:
    train = PackedSplit.load(processed_dir(dataset) / "train.npz")
    bags = FusedBags.from_split(train, num_classes(read_token_table(processed_dir(dataset) / "tokens.csv")))
    embeddings = read_npz(results_dir("one_step", dataset) / "embeddings.npz", producer="one_step")
    E, p, v = embeddings["E1"], embeddings["p0"], embeddings["v"]
    values = E @ v
    print(f"{dataset}: n = {train.n:,}, {len(bags.tokens):,} entries, |S| = {E.shape[0]:,}, d = {E.shape[1]}, "
          f"{numba.get_num_threads()} threads")

    rates = []
    run_gradient_flow(E, p, v, bags, steps=2, lr=1.0)
    for _ in range(repeats):
        start = time.perf_counter()
        run_gradient_flow(E, p, v, bags, steps=STEPS, lr=1.0, log_every=STEPS)
        rates.append(STEPS / (time.perf_counter() - start))
    print(f"gradient flow: {statistics.median(rates):.1f} steps/s (median of {repeats} x {STEPS} steps; "
          f"{', '.join(f'{rate:.1f}' for rate in rates)})")

    a = scores(E, p)
    g = loss_and_token_gradients(a, values, bags, with_values=False)[1]
    parts = {
        "fused pass": lambda: loss_and_token_gradients(a, values, bags, with_values=False),
        "E p": lambda: scores(E, p),
        "E^T g": lambda: transposed_product(E, g),
    }
    print(", ".join(f"{name} {1e3 * median_seconds(part, repeats):.2f} ms" for name, part in parts.items()))


if __name__ == "__main__":
    main(*(sys.argv[1:2] or ["imdb"]), *(int(arg) for arg in sys.argv[2:3]))
