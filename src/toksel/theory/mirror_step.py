"""Mirror descent on p with the l_q potential psi(p) = |p|_q^q / q (q > 1), followed in flow time.

The mirror flow d/dt grad psi(p) = -grad L(p): the dual point theta = grad psi(p) = sign(p) |p|^(q-1) (entrywise)
follows the gradient, and p = sign(theta) |theta|^(1/(q-1)). q = 2 is gradient flow. Julistiono, Tarzanagh and
Azizan (2024, arXiv 2410.14581) prove that on p of an attention layer this flow converges in direction to the
l_q-norm hard-margin solution, as gradient descent does to the l_2 one (the paper's Theorem 4.3).

A step of length h: theta <- theta - h grad L(p), mapped back to p; its local error is the distance in p between
that point and the trapezoidal (Heun) step's, theta - (h/2)(grad L(p) + grad L(p_new)) mapped back: the same
controller as the gradient flow's (theory/gradient_flow.py) keeps it within the tolerance.
"""

from __future__ import annotations

import numpy as np

from toksel.theory.flow_field import FlowField


def to_dual(p: np.ndarray, q: float) -> np.ndarray:
    """grad psi(p) = sign(p) |p|^(q-1)."""
    return np.sign(p) * np.abs(p) ** (q - 1)


def to_primal(theta: np.ndarray, q: float) -> np.ndarray:
    """The inverse map: sign(theta) |theta|^(1/(q-1))."""
    return np.sign(theta) * np.abs(theta) ** (1 / (q - 1))


class MirrorStep:
    """theta <- theta - h grad L(p) with theta = grad psi_q(p); the error against the trapezoidal step, in p."""

    def __init__(self, field: FlowField, q: float) -> None:
        self.field, self.q = field, q

    def __call__(self, p: np.ndarray, gradient: np.ndarray, h: float) -> tuple[np.ndarray, float, np.ndarray,
                                                                                float, float]:
        theta = to_dual(p, self.q)
        candidate = to_primal(theta - h * gradient, self.q)
        loss, new_gradient = self.field(candidate)
        trapezoidal = to_primal(theta - h / 2 * (gradient + new_gradient), self.q)
        return (candidate, loss, new_gradient, float(np.linalg.norm(trapezoidal - candidate)),
                float(np.linalg.norm(candidate - p)))
