"""Steps per second of gradient flow (each step one evaluation of the loss and its gradient in p) on a prepared
dataset (default: full IMDB train, d = 2048), the split of one step between the fused pass and the two products with
E, the bytes a step moves against the memory bandwidth this machine measures, and the least time any pass over the
corpus entries takes here.

Needs the dataset's `prepare` and `one_step` outputs:  dvc repro one_step@imdb-0
Run:  python -m benchmarks.gradient_flow_rate [dataset] [repeats]
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass

import numba
import numpy as np

from benchmarks.timing import timed
from toksel.data.corpus import PackedSplit
from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.models.fused import FusedBags, loss_and_token_gradients
from toksel.models.products import scores, transposed_product
from toksel.runtime.io import read_npz
from toksel.runtime.paths import results_dir, seed_dir
from toksel.theory.flow_field import FlowField

STEPS = 100


def read_bandwidth(megabytes: int = 1024, repeats: int = 5) -> float:
    """Bytes per second that numba's threads read from memory: the E p product (products.scores, vectorised)
    on a matrix far larger than the caches, so nearly every byte comes from memory."""
    matrix = np.ones((megabytes * 2**20 // (8 * 2048), 2048))
    x = np.ones(2048)
    return matrix.nbytes / timed(lambda: scores(matrix, x), repeats, calls=3, warm_up=True).median


def entry_floor(token_scores: np.ndarray, token_values: np.ndarray, bags: FusedBags) -> np.ndarray:
    """The least work a pass over the corpus entries can do: read each (review, token, count) entry, gather its
    token's score and value, and add one number into that token's gradient. The fused pass does this and the
    softmax besides; timing this bare loop on the same threads says how much of the fused pass is the
    irregular access itself."""
    gradient = np.zeros((numba.get_num_threads(), bags.vocab_size))
    _gather_scatter(token_scores, token_values, bags.indptr, bags.tokens, bags.counts, gradient)
    return gradient.sum(axis=0)


@numba.njit(parallel=True, cache=True)
def _gather_scatter(a, b, indptr, tokens, counts, gradient):  # pragma: no cover (compiled)
    rows, chunks = len(indptr) - 1, gradient.shape[0]
    for chunk in numba.prange(chunks):  # the fused pass's split: whole reviews, an equal number per thread
        for entry in range(indptr[chunk * rows // chunks], indptr[(chunk + 1) * rows // chunks]):
            token = tokens[entry]
            gradient[chunk, token] += counts[entry] * a[token] * b[token]


@dataclass(frozen=True)
class StepRate:
    dataset: str
    n: int
    entries: int
    vocab_size: int
    d: int
    threads: int
    rates: list[float]  # steps per second, one per run of STEPS steps
    parts: dict[str, float]  # seconds of each part of one step (medians)
    bytes_per_step: dict[str, int]  # what each part must read at least
    entry_floor: float  # seconds of the bare gather-and-scatter loop over the entries (median)

    @property
    def steps_per_second(self) -> float:
        return statistics.median(self.rates)


def measure(dataset: str = "imdb", repeats: int = 5) -> StepRate:
    train = PackedSplit.load(data_dir(dataset, 0) / "train.npz")
    bags = FusedBags.from_split(train, read_token_table(data_dir(dataset, 0) / "tokens.csv").num_classes)
    embeddings = read_npz(seed_dir(results_dir("one_step", dataset), 0) / "embeddings.npz", producer="one_step")
    E, p, v = np.ascontiguousarray(embeddings["E1"]), embeddings["p0"], embeddings["v"]
    values = E @ v

    field = FlowField(E, v, bags, penalty=0.0)  # what each step of the flow evaluates once
    field(p)  # compile
    runs = timed(lambda: [field(p) for _ in range(STEPS)], repeats)

    a = scores(E, p)
    g = loss_and_token_gradients(a, values, bags, with_values=False)[1]
    parts = {
        "fused pass": lambda: loss_and_token_gradients(a, values, bags, with_values=False),
        "E p": lambda: scores(E, p),
        "E^T g": lambda: transposed_product(E, g),
    }
    floor = timed(lambda: entry_floor(a, values, bags), repeats, calls=20, warm_up=True).median
    corpus = bags.indptr.nbytes + bags.tokens.nbytes + bags.counts.nbytes + bags.labels.nbytes
    return StepRate(dataset, train.n, len(bags.tokens), E.shape[0], E.shape[1], numba.get_num_threads(),
                    [STEPS / seconds for seconds in runs.seconds],
                    {name: timed(part, repeats, calls=20, warm_up=True).median for name, part in parts.items()},
                    {"fused pass": corpus + 2 * a.nbytes + values.nbytes, "E p": E.nbytes, "E^T g": E.nbytes},
                    floor)


def main(dataset: str = "imdb", repeats: int = 5) -> None:
    rate = measure(dataset, repeats)
    print(f"{dataset}: n = {rate.n:,}, {rate.entries:,} entries, |S| = {rate.vocab_size:,}, d = {rate.d}, "
          f"{rate.threads} threads")
    print(f"gradient flow: {rate.steps_per_second:.1f} steps/s (median of {repeats} x {STEPS} steps; "
          f"{', '.join(f'{r:.1f}' for r in rate.rates)})")
    print(", ".join(f"{name} {1e3 * seconds:.2f} ms" for name, seconds in rate.parts.items())
          + f"; bare gather and scatter over the entries {1e3 * rate.entry_floor:.2f} ms")
    print(f"read bandwidth {read_bandwidth() / 1e9:.1f} GB/s; a step reads at least "
          f"{sum(rate.bytes_per_step.values()) / 1e6:.0f} MB")


if __name__ == "__main__":
    main(*(sys.argv[1:2] or ["imdb"]), *(int(arg) for arg in sys.argv[2:3]))
