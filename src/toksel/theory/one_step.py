"""Lemma 4.1: one full-batch GD step on E from the Gaussian initialisation moves E_s by about (eta0/2) alpha_s v.

The check regresses the update along v, (E1 - E0)_s^T v, on alpha_s: slope eta0/2, Pearson r near 1, and the
part of the update orthogonal to v small next to the part along v.

K > 2 classes (the rebuttal): with K orthonormal output vectors and the cross-entropy,
the update along v_k is eta0 alpha_s^(k), alpha^(k) the class-k signed frequency. At the initialisation every
class has probability about 1/K, so dL/df_k = 1/K - 1{y = k}; the binary model's sigmoid'(0) = 1/2 is what
halves its slope.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toksel.data.corpus import PackedSplit
from toksel.data.token_table import TokenTable
from toksel.models.fused import FusedBags, loss_and_token_gradients
from toksel.models.initial import initialise
from toksel.runtime.errors import ToksError


@dataclass(frozen=True)
class EmbeddingUpdate:
    """One step's change of E in factored form, E1 - E0 = along_p p0^T + along_v V^T: it only moves each E_s
    within span(p0, v_1, .., v_K), so |S| (K + 1) numbers hold what an |S| x d matrix would."""

    along_p: np.ndarray  # (|S|,): -eta0 dL/da
    along_v: np.ndarray  # (|S|, K'): -eta0 dL/db, one column per output vector

    def applied(self, E0: np.ndarray, p0: np.ndarray, v: np.ndarray) -> np.ndarray:
        """E0 plus the update."""
        return E0 + np.outer(self.along_p, p0) + self.along_v @ v.reshape(len(p0), -1).T


def embedding_update(E0: np.ndarray, p0: np.ndarray, v: np.ndarray, bags: FusedBags, eta0: float) -> EmbeddingUpdate:
    """-eta0 grad_E L(p0, E0), with grad_E L = (dL/da) p0^T + (dL/dB) V^T; p0 and V do not move.

    v: (d,) for two classes, (d, K) for K > 2.
    """
    _, grad_scores, grad_values = loss_and_token_gradients(E0 @ p0, E0 @ v, bags)
    return EmbeddingUpdate(-eta0 * grad_scores, -eta0 * grad_values.reshape(len(E0), -1))


def one_gradient_step_on_embeddings(
    E0: np.ndarray, p0: np.ndarray, v: np.ndarray, bags: FusedBags, eta0: float
) -> np.ndarray:
    """E1 = E0 - eta0 grad_E L(p0, E0)."""
    return embedding_update(E0, p0, v, bags, eta0).applied(E0, p0, v)


def update_along_outputs(scores: np.ndarray, values: np.ndarray, p_dot_v: np.ndarray, bags: FusedBags,
                         eta0: float) -> np.ndarray:
    """(E1 - E0)_s^T v_k for every token s and output vector k (orthonormal v_k), from the token scores a = E0 p0,
    the values B = E0 V and p0^T v_k alone: the step moves E_s by -eta0 (dL/da_s p0 + dL/dB_s V^T), so along v_k
    by -eta0 (dL/da_s p0^T v_k + dL/dB_sk). What Lemma 4.1's statistics read, without E0 itself. (|S|, K')."""
    _, grad_scores, grad_values = loss_and_token_gradients(scores, values, bags)
    return -eta0 * (np.outer(grad_scores, p_dot_v) + grad_values.reshape(len(grad_scores), -1))


def projected_initialisation(vocab_size: int, d: int, num_classes: int, rng: np.random.Generator
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A draw of (a, B, p0^T v_k) with the law they have under E0, p0 ~ N(0, I/d) and v (K orthonormal v_k): p0
    and V drawn in R^d, then each token's projections (E0_s^T p0, E0_s^T v_k), which for E0_s ~ N(0, I/d) are
    jointly Gaussian with covariance G / d, G the Gram matrix of p0, v_1, ..., v_K. O(|S| K + d K) instead of the
    |S| x d matrix: the known answers of Lemma 4.1 at the real data's d and vocabulary, by the thousand."""
    outputs = 1 if num_classes == 2 else num_classes
    p0 = rng.standard_normal(d) / np.sqrt(d)
    directions = np.linalg.qr(rng.standard_normal((d, outputs)))[0]
    basis = np.column_stack([p0, directions])
    projections = rng.standard_normal((vocab_size, outputs + 1)) @ np.linalg.cholesky(basis.T @ basis / d).T
    values = projections[:, 1] if outputs == 1 else projections[:, 1:]
    return projections[:, 0], values, directions.T @ p0


def lemma41_statistics(along: np.ndarray, alpha: np.ndarray, slope_theory: float, tokens: np.ndarray
                       ) -> dict[str, float]:
    """Lemma 4.1's statistics of an update along the output vectors ((|S|, K')) against alpha_s ((|S|,), or
    (K, |S|) for K classes) over `tokens`: the worst class's Pearson r and relative slope error."""
    alphas = alpha.reshape(along.shape[1], -1)[:, tokens]
    per_class = [_regression(along[tokens, k], alphas[k], slope_theory) for k in range(along.shape[1])]
    return {"pearson_r": min(item["pearson_r"] for item in per_class),
            "slope_rel_error": max(item["slope_rel_error"] for item in per_class)}


def pair_alignment(along_v: np.ndarray, alpha: np.ndarray, pair: np.ndarray, first_order: np.ndarray,
                   slope_theory: float) -> dict[str, float]:
    """How far one step moved the pair's tokens (`pair`: not, good, bad) along v, in units of what Lemma 4.1 gives
    the weakest tenth of the first-order tokens (slope_theory times their tenth percentile of |alpha_s|): their
    largest |update| (pair_alignment), the negator's signed one (negator_alignment) and good's and bad's opposite
    alignment, (update_good - update_bad) / 2 (pair_polarity: signed, about 0 where the pair carries no first-order
    signal, about the planted alignment where good and bad carry alpha_s of opposite signs)."""
    unit = slope_theory * float(np.quantile(np.abs(alpha[first_order]), 0.1))
    relative = along_v[pair] / unit
    return {"pair_alignment": float(np.abs(relative).max()), "negator_alignment": float(relative[0]),
            "pair_polarity": float((relative[1] - relative[2]) / 2)}


def theory_slope(eta0: float, num_classes: int) -> float:
    """The slope of the update along v (v_k) in alpha_s (alpha_s^(k)): eta0/2 for two classes, eta0 for K."""
    return eta0 / 2 if num_classes == 2 else eta0


def _regression(along: np.ndarray, x: np.ndarray, slope_theory: float) -> dict[str, float]:
    slope, intercept = np.polyfit(x, along, deg=1)
    return {
        "slope": float(slope),
        "slope_theory": float(slope_theory),
        "slope_rel_error": float(abs(slope - slope_theory) / slope_theory),
        "intercept": float(intercept),
        "pearson_r": float(np.corrcoef(x, along)[0, 1]),
    }


def alignment_metrics(
    E0: np.ndarray, E1: np.ndarray, v: np.ndarray, alpha: np.ndarray, slope_theory: float, tokens: np.ndarray
) -> dict[str, float]:
    """Regression of the update along v on alpha_s over `tokens` (those that occur in the data).

    K classes: v is (d, K) and alpha (K, |S|); one regression per class, its metrics suffixed `_class_k`, and
    `slope_rel_error`, `pearson_r` the worst class's. `orthogonal_ratio`: the update outside span(v) against
    the update inside it.
    """
    update = (E1 - E0)[tokens]
    directions = v.reshape(len(v), -1)
    coefficients = np.linalg.lstsq(directions, update.T, rcond=None)[0].T  # (tokens, K): update along each v_k
    inside = coefficients @ directions.T
    orthogonal_ratio = float(np.linalg.norm(update - inside) / np.linalg.norm(inside))
    alphas = alpha.reshape(directions.shape[1], -1)[:, tokens]
    per_class = [_regression(coefficients[:, k], alphas[k], slope_theory) for k in range(directions.shape[1])]
    if len(per_class) == 1:
        return {**per_class[0], "orthogonal_ratio": orthogonal_ratio}
    metrics = {f"{name}_class_{k}": value for k, regression in enumerate(per_class)
               for name, value in regression.items() if name != "slope_theory"}
    return {
        **metrics,
        "slope_theory": float(slope_theory),
        "slope_rel_error": max(regression["slope_rel_error"] for regression in per_class),
        "pearson_r": min(regression["pearson_r"] for regression in per_class),
        "orthogonal_ratio": orthogonal_ratio,
    }


@dataclass(frozen=True)
class OneStep:
    E0: np.ndarray  # (|S|, d) the Gaussian initialisation
    E1: np.ndarray  # after the step
    null_update: EmbeddingUpdate  # the same step on labels that carry no signal (the controls' embeddings)
    p0: np.ndarray  # (d,)
    v: np.ndarray  # (d,), or (d, K) for K > 2 classes
    metrics: dict[str, float]  # alignment_metrics over the tokens that occur, and the control's


def one_step_from_initialisation(train: PackedSplit, tokens: TokenTable, d: int, seed: int, eta0: float,
                                 null_seed: tuple[int, ...] | int = 0) -> OneStep:
    """Draw E0, p0 ~ N(0, I/d) and v (K orthonormal v_k), take the step on the training split, and measure it.

    The negative control is a near miss: the same step from the same draw on the same sequences with their labels
    shuffled (PackedSplit.with_shuffled_labels, seeded by null_seed), so that E moves by as much but not along
    the alpha_s it is regressed on. Its slope and r spread around 0 with the chance agreement of the shuffle.
    """
    classes = tokens.num_classes
    if classes > d:
        raise ToksError(f"{classes} classes need {classes} orthonormal output vectors: model.d = {d} is too small")
    init = initialise(train.vocab_size, d, seed, num_classes=classes)
    E0, p0, v = init.E.numpy(), init.p.numpy(), init.v.numpy()
    E1 = one_gradient_step_on_embeddings(E0, p0, v, FusedBags.from_split(train, classes), eta0)
    null_update = embedding_update(E0, p0, v, FusedBags.from_split(train.with_shuffled_labels(null_seed), classes),
                                   eta0)
    # Two classes: the paper's alpha_s with slope eta0/2 (exact, the regression's x); K: each alpha_s^(k).
    alpha = tokens.column("alpha") if tokens.binary else tokens.per_class("alpha")
    present, slope = np.flatnonzero(tokens.occurring()), theory_slope(eta0, classes)
    metrics = alignment_metrics(E0, E1, v, alpha, slope, present)
    null = alignment_metrics(E0, null_update.applied(E0, p0, v), v, alpha, slope, present)
    metrics |= {f"control_{name}": null[name] for name in ("slope_rel_error", "pearson_r")}
    return OneStep(E0, E1, null_update, p0, v, metrics)
