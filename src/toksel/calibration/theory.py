"""Known answers for the theory's claims, in each dataset's own regime: its data, its d, its eta0, its flow.

- The one step (Lemma 4.1's families) on the dataset's own training split (every seed's draw of it), its labels
  keeping a share of their signal (PackedSplit.with_signal: 1 is the data, the lemma's setting; 0 its shuffled
  control; in between, each row keeps its label with that probability). The update along v is computed exactly
  from a draw of the token projections (a, B, p0^T v) with the law E0 gives them (theory/one_step.py), so a
  replicate at IMDB's d = 2048 and 7,295 tokens costs one pass over the corpus, not an |S| x d matrix.
- The flow on p (Lemmas 4.2, 4.4, Theorem 4.3) on fresh draws of a synthetic dataset's own generator, at its d,
  eta0, horizon and tolerance: the one step on labels keeping a share of their signal, then the flow on the true
  labels; or the one step on the true labels and the flow on the loss plus a penalty lambda/2 |p|^2, lambda =
  penalty / horizon, which has a finite minimiser (Lemma 4.2's null, bounded by construction).

Every number comes from the stages' own functions (the step, the flow, the selection, the QP), so what is
calibrated is what the claims run.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from toksel.data.corpus import PackedSplit
from toksel.data.synthetic import SyntheticVocabulary, generate
from toksel.data.token_table import TokenTable, read_token_table
from toksel.models.fused import FusedBags
from toksel.models.initial import initialise
from toksel.params import GradientFlowConfig, SyntheticConfig
from toksel.theory.convergence import bound_ratio, log_growth
from toksel.theory.gradient_flow import Integration, run_gradient_flow
from toksel.theory.max_margin import constraint_pairs, cosine, solve_max_margin
from toksel.theory.one_step import (
    embedding_update,
    lemma41_statistics,
    projected_initialisation,
    theory_slope,
    update_along_outputs,
)
from toksel.theory.selection import selected_entries, selection_fraction

T = TypeVar("T")


def seed_of(*parts: int) -> int:
    """One integer seed from several (the replicate's, the seed's): torch's generator takes one int."""
    return int(np.random.SeedSequence(parts).generate_state(1)[0])


@functools.lru_cache(maxsize=16)
def _split(folder: str) -> tuple[PackedSplit, TokenTable, FusedBags]:
    """A draw's training split, token table and the split in the compiled pass's layout, read once per process."""
    split, tokens = PackedSplit.load(Path(folder) / "train.npz"), read_token_table(Path(folder) / "tokens.csv")
    return split, tokens, FusedBags.from_split(split, tokens.num_classes)


@dataclass(frozen=True)
class StepRegime:
    """What the one step's known answers need of a dataset: each seed's draw, d and eta0."""

    folders: tuple[str, ...]  # the data of seed 0, 1, ... (a dataset used whole: the same folder)
    d: int
    eta0: float
    salt: int  # the dataset's own stream of random numbers


def one_step_statistics(regime: StepRegime, share: float, replicate: int) -> list[dict[str, float]]:
    """One verdict's seeds: Lemma 4.1's statistics of the one step on labels keeping `share` of their signal,
    regressed on the true alpha_s."""
    found = []
    for seed, folder in enumerate(regime.folders):
        split, tokens, bags = _split(folder)
        classes = tokens.num_classes
        draw = (regime.salt, replicate, seed)
        labels = split.with_signal(share, draw).labels  # the same rows: only the labels change
        scores, values, p_dot_v = projected_initialisation(split.vocab_size, regime.d, classes,
                                                           np.random.default_rng((*draw, 1)))
        along = update_along_outputs(scores, values, p_dot_v, dataclasses.replace(bags, labels=labels),
                                     regime.eta0)
        alpha = tokens.column("alpha") if tokens.binary else tokens.per_class("alpha")
        found.append(lemma41_statistics(along, alpha, theory_slope(regime.eta0, classes),
                                        np.flatnonzero(tokens.occurring())))
    return found


@dataclass(frozen=True)
class FlowRegime:
    """What the flow's known answers need of a synthetic dataset: its generator, d, eta0 and flow settings."""

    synthetic: SyntheticConfig
    d: int
    eta0: float
    flow: GradientFlowConfig
    seeds: int
    salt: int


class Recent:
    """What the last `most` keys made, kept in this process: a replicate's rungs are units of their own that read
    the same draw, which is made once for them."""

    def __init__(self, most: int = 64) -> None:
        self.most = most
        self._made: dict[Hashable, Any] = {}

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        if key not in self._made:
            if len(self._made) >= self.most:  # the oldest first: a chunk of units reads each replicate's rungs together
                self._made.pop(next(iter(self._made)))
            self._made[key] = make()
        return self._made[key]


_DRAWS = Recent()


def training_draw(synthetic: SyntheticConfig, draw: tuple[int, ...]) -> tuple[PackedSplit, np.ndarray]:
    """A fresh training split of the generator (the same draw prepare makes for seed `draw`: the train split is
    its first) and which tokens are important, without the test split and token table the flows do not read;
    the last few are kept, so that a replicate's rungs share theirs."""
    def make() -> tuple[PackedSplit, np.ndarray]:
        vocab = SyntheticVocabulary(synthetic.n_positive, synthetic.n_negative, synthetic.n_irrelevant)
        split = generate(synthetic.mode, vocab, synthetic.n_train, synthetic.seq_len, synthetic.delta,
                         np.random.default_rng(draw))
        return split, vocab.groups() != 0

    return _DRAWS.get((dataclasses.astuple(synthetic), draw), make)


def flow_statistics(regime: FlowRegime, share: float, penalty: float, replicate: int) -> list[dict[str, float]]:
    """One verdict's seeds: each a fresh draw of the data and initialisation, the one step on labels keeping
    `share` of their signal, then the flow on the true labels with the penalty `penalty` / horizon on |p|^2/2:
    log_growth (Lemma 4.2) and, with a penalty, its bound over its end (bound_ratio); without a penalty on
    Assumption-1 data the selection fraction at the horizon (Lemma 4.4) and cos(p_T, p_mm) for the selection of the
    important tokens (Theorem 4.3)."""
    found = []
    flow = regime.flow
    for seed in range(regime.seeds):
        draw = (regime.salt, replicate, seed)
        train, important = training_draw(regime.synthetic, draw)
        init = initialise(train.vocab_size, regime.d, seed_of(*draw))
        E0, p0, v = init.E.numpy(), init.p.numpy(), init.v.numpy()
        E1 = embedding_update(E0, p0, v, FusedBags.from_split(train.with_signal(share, draw)), regime.eta0
                              ).applied(E0, p0, v)
        trajectory = run_gradient_flow(E1, p0, v, FusedBags.from_split(train),
                                       Integration(flow.horizon, flow.tolerance), penalty=penalty / flow.horizon)
        statistics = {"log_growth": log_growth(trajectory.times, trajectory.p_norm)}
        if penalty:  # how far beyond the end the penalised flow's bound lies: the growth rule's reach
            statistics["bound_ratio"] = bound_ratio(E1, v, FusedBags.from_split(train), penalty / flow.horizon,
                                                    trajectory.p[-1])
        if penalty == 0 and flow.max_margin:
            p_final = trajectory.p[-1]
            chosen = selected_entries(E1 @ p_final / np.linalg.norm(p_final), train, flow.selection_tol)
            target = solve_max_margin(E1, constraint_pairs(important[train.bag_tokens], train))
            statistics |= {"selection_fraction": selection_fraction(chosen, important, train),
                           "cos_max_margin_important": cosine(p_final, target.direction) if target.solved else None}
        found.append(statistics)
    return found


def step_unit(regime: StepRegime, unit: tuple[float, int]) -> list[dict[str, float]]:
    """A (share, replicate) unit of the fan-out."""
    return one_step_statistics(regime, *unit)


def flow_unit(regime: FlowRegime, unit: tuple[float, float, int]) -> list[dict[str, float]]:
    """A (share, penalty, replicate) unit of the fan-out."""
    return flow_statistics(regime, *unit)
