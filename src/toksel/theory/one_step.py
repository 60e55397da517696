"""Lemma 4.1: one full-batch GD step on E from the Gaussian initialisation moves E_s by about (eta0/2) alpha_s v.

The check regresses the update along v, (E1 - E0)_s^T v, on alpha_s: slope eta0/2, Pearson r near 1, and the
part of the update orthogonal to v small next to the part along v.
"""

from __future__ import annotations

import numpy as np

from toksel.models.fused import FusedBags, loss_and_token_gradients


def one_gradient_step_on_embeddings(
    E0: np.ndarray, p0: np.ndarray, v: np.ndarray, bags: FusedBags, eta0: float
) -> np.ndarray:
    """E1 = E0 - eta0 grad_E L(p0, E0), with grad_E L = (dL/da) p0^T + (dL/db) v^T; p0 and v do not move."""
    _, grad_scores, grad_values = loss_and_token_gradients(E0 @ p0, E0 @ v, bags)
    return E0 - eta0 * (np.outer(grad_scores, p0) + np.outer(grad_values, v))


def alignment_metrics(
    E0: np.ndarray, E1: np.ndarray, v: np.ndarray, alpha: np.ndarray, eta0: float, tokens: np.ndarray
) -> dict[str, float]:
    """Regression of the update along v on alpha_s over `tokens` (those that occur in the data)."""
    update = (E1 - E0)[tokens]
    along_v = update @ v / (v @ v)
    x = alpha[tokens]
    slope, intercept = np.polyfit(x, along_v, deg=1)
    orthogonal = update - np.outer(along_v, v)
    slope_theory = eta0 / 2
    return {
        "slope": float(slope),
        "slope_theory": float(slope_theory),
        "slope_rel_error": float(abs(slope - slope_theory) / slope_theory),
        "intercept": float(intercept),
        "pearson_r": float(np.corrcoef(x, along_v)[0, 1]),
        "orthogonal_ratio": float(np.linalg.norm(orthogonal) / np.linalg.norm(np.outer(along_v, v))),
    }
