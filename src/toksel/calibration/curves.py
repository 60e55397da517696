"""Known answers for the training claims, planted on a dataset's own token statistics.

The curve, rank and spread claims read a model's token scores against the held-out split's token statistics.
Their known answers keep the dataset's tokens, how often each occurs in the training and held-out splits and its
class posterior (the training counts, add-half smoothed), and redraw the counts of both splits for every seed:
the held-out statistics then carry exactly the measurement noise of the data. A planted model learns from the
training draw with its labels keeping a share of their signal (each occurrence keeps its class with probability
`strength`, else takes one at random: 1, the effect at the paper's size; 1/2, half of it; 0, none, like the
claims' shuffled-label controls), and its scores follow the statistic it learnt with the correlation
`fidelity`, as a trained model follows its training split. The statistic is computed by the claims' own code
(toksel.theory.token_curves) on the table of the draw (its true training and held-out statistics).

Ranks are all the statistics read, so alpha_s is drawn in count form: (c_1 - c_0) / N for two classes,
(c_k - n_s / K) / N for class k of K (the exact alpha_s weighs each occurrence by 1/T of its review, which moves
a token's rank little).

The accuracy gap's known answers are the gap between the arms' test accuracies drawn per seed around a planted
gap, with the between-seed spread of the real runs' gaps and tails heavier than a Gaussian's (accuracy_gaps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from toksel.data.frequency import posterior_difference
from toksel.data.token_table import TokenTable
from toksel.theory.token_curves import CurveSettings, binned_curves, heldout_tokens, spreads, token_curves


@dataclass(frozen=True)
class TokenPopulation:
    """The tokens a dataset's curves use (held-out count at least the curves' minimum), with what a draw needs."""

    train_counts: np.ndarray  # (T,) occurrences in the training split
    heldout_counts: np.ndarray  # (T,) occurrences in the held-out split
    posterior: np.ndarray  # (T, K) class posterior of each token
    shares: np.ndarray  # (K,) each class's share of all occurrences: a token without signal

    @classmethod
    def of(cls, tokens: TokenTable, min_count: int) -> TokenPopulation:
        kept = heldout_tokens(tokens, min_count)
        counts = tokens.per_class("count")[:, kept].T.astype(float)  # (T, K)
        posterior = (counts + 0.5) / (counts + 0.5).sum(axis=1, keepdims=True)
        return cls(counts.sum(axis=1).astype(np.int64), tokens.column("heldout_count")[kept].astype(np.int64),
                   posterior, counts.sum(axis=0) / counts.sum())

    @property
    def num_classes(self) -> int:
        return len(self.shares)

    def draw(self, strength: float, rng: np.random.Generator) -> tuple[TokenTable, TokenTable]:
        """One draw of the data (its token table: training and held-out counts from the posteriors), and the table
        of what a model learns from its training split when each occurrence keeps its class with probability
        `strength` and otherwise takes a class at random (the class shares)."""
        train = rng.multinomial(self.train_counts, self.posterior)  # (T, K)
        heldout = rng.multinomial(self.heldout_counts, self.posterior)
        kept = rng.binomial(train, strength)
        learnt = kept + rng.multinomial(train.sum(axis=1) - kept.sum(axis=1), self.shares)
        return self._table(train, heldout), self._table(learnt, heldout)

    def _table(self, train: np.ndarray, heldout: np.ndarray) -> TokenTable:
        classes = self.num_classes
        columns: dict[str, np.ndarray] = {"token": np.arange(len(train))}
        alpha = _count_alpha(train)
        heldout_alpha = _count_alpha(heldout)
        for k in range(classes):
            columns |= {f"count_class_{k}": train[:, k], f"alpha_class_{k}": alpha[:, k],
                        f"heldout_alpha_class_{k}": heldout_alpha[:, k],
                        f"heldout_presence_class_{k}": heldout_alpha[:, k]}
        columns |= {"posterior_difference": posterior_difference(train.T), "heldout_count": heldout.sum(axis=1),
                    "heldout_posterior_difference": posterior_difference(heldout.T)}
        if classes == 2:
            columns |= {"alpha": (train[:, 1] - train[:, 0]) / train.sum(),
                        "heldout_alpha": (heldout[:, 1] - heldout[:, 0]) / heldout.sum(),
                        "token_type": np.zeros(len(train), dtype=np.int64)}
            columns["importance"] = np.abs(columns["alpha"])
        else:
            columns["importance"] = np.abs(alpha).max(axis=1)
        return TokenTable(pd.DataFrame(columns), classes)


def _count_alpha(counts: np.ndarray) -> np.ndarray:
    """(T, K): each class's signed frequency in count form, (c_k - n_s / K) / N."""
    return (counts - counts.sum(axis=1, keepdims=True) / counts.shape[1]) / counts.sum()


def planted(statistic: np.ndarray, fidelity: float, rng: np.random.Generator, tighter: float = 1.0) -> np.ndarray:
    """Scores that follow `statistic` with correlation `fidelity` on its normal scores (its ranks, mapped to a
    standard normal: a statistic's heavy tail, a few frequent tokens, would otherwise swamp the rest); fidelity 0:
    scores that carry nothing of it; `tighter` divides their scatter (an arm whose curve is that many times
    tighter)."""
    from scipy.stats import norm, rankdata  # here: a second to import, which only this stage pays

    ranks = rankdata(statistic, axis=0)
    standard = norm.ppf(ranks / (len(statistic) + 1))
    scatter = math.sqrt(1 - fidelity**2) / tighter
    return fidelity * standard + scatter * rng.standard_normal(statistic.shape)


def model_scores(learnt: TokenTable, fidelity: float | tuple[float, float], rng: np.random.Generator,
                 tighter: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(E_s^T p, E_s^T v) of a planted model: the <cls> score follows |posterior difference| (a U), the value
    score alpha_s (for K classes each v_k its alpha_s^(k)), both as the model learnt them; fidelity: one for
    both, or (p's, v's)."""
    fidelity_p, fidelity_v = fidelity if isinstance(fidelity, tuple) else (fidelity, fidelity)
    score_p = planted(np.abs(learnt.column("posterior_difference")), fidelity_p, rng, tighter)
    alpha = learnt.column("alpha") if learnt.binary else learnt.per_class("alpha").T
    return score_p, planted(alpha, fidelity_v, rng, tighter)


Drawn = tuple[TokenTable, TokenTable]  # a draw of the data's table, and the table of what a model learnt from it


def curve_statistics(drawn: Drawn, fidelity: float, settings: CurveSettings,
                     rng: np.random.Generator) -> dict[str, float]:
    """One seed: a planted model's curve metrics (token_curves) on a draw of the data (TokenPopulation.draw). Its
    E_s^T v follows alpha_s, as Lemma 4.1 has it; the metrics prefixed `posterior_` are those of a model whose
    E_s^T v follows the posterior difference instead, the x of the paper's figures and tables (the claims on the
    sides of x). rng: the model's noise alone, so that one draw of the data serves every fidelity."""
    table, learnt = drawn
    score_p, score_v = model_scores(learnt, fidelity, rng)
    metrics = token_curves(table, score_p, score_v, settings)[0]
    if table.binary:
        by_posterior = planted(learnt.column("posterior_difference"), fidelity, rng)
        metrics |= {f"posterior_{name}": value
                    for name, value in token_curves(table, score_p, by_posterior, settings)[0].items()}
    return metrics


def spread_statistics(drawn: Drawn, tighter: float, fidelity: tuple[float, float], settings: CurveSettings,
                      rng: np.random.Generator) -> dict[str, float]:
    """One seed: a full-training arm and an arm whose scatter is `tighter` times smaller, on one draw of the
    data; the ratio of their spreads, raw and scale-free, for E_s^T v and E_s^T p (the spread claims' statistics).
    fidelity: (p's, v's) of the full-training arm, as the real trained arm's own statistics measure them."""
    table, learnt = drawn
    trained = spreads(binned_curves(table, *model_scores(learnt, fidelity, rng), settings))
    frozen = spreads(binned_curves(table, *model_scores(learnt, fidelity, rng, tighter), settings))
    return {f"{name}_{vector}": trained[f"{name}_{vector}"] / frozen[f"{name}_{vector}"]
            for name in ("bin_spread", "bin_std") for vector in ("v", "p")}


ACCURACY_TAIL_DF = 4  # the seeds' noise: a Student t this many degrees of freedom, tails heavier than a Gaussian's


def accuracy_gaps(gap: float, spread: float, seeds: int, rng: np.random.Generator) -> list[float]:
    """One verdict's seeds: trained minus untrained test accuracy, `gap` plus noise of standard deviation `spread`
    (the between-seed spread of the real runs' gaps, which carries the two arms' correlation within a seed). Three
    seeds tell a spread, not a shape, so the noise is a Student t of ACCURACY_TAIL_DF degrees of freedom scaled to
    that spread: a t-rule keeps its nominal rate on Gaussian numbers by construction, and heavier tails are where
    it could fail to."""
    scale = spread / math.sqrt(ACCURACY_TAIL_DF / (ACCURACY_TAIL_DF - 2))
    return list(gap + scale * rng.standard_t(ACCURACY_TAIL_DF, seeds))
