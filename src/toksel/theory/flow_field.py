"""The field of the gradient flow on p with E frozen: -grad (L + penalty/2 |p|^2) and the loss at p, in one fused pass
over the corpus and two products with E. What every integrator of the flow (theory/gradient_flow.py,
theory/stiff_flow.py) evaluates."""

from __future__ import annotations

import numpy as np

from toksel.models.fused import FusedBags, loss_and_token_gradients
from toksel.models.products import scores, transposed_product
from toksel.runtime.errors import ToksError


class FlowField:
    """-grad (L + penalty/2 |p|^2) and the loss at p, for E frozen; counts its evaluations."""

    def __init__(self, E: np.ndarray, v: np.ndarray, bags: FusedBags, penalty: float) -> None:
        self.E, self.values, self.bags, self.penalty = np.ascontiguousarray(E), E @ v, bags, penalty
        self.evaluations = 0

    def __call__(self, p: np.ndarray) -> tuple[float, np.ndarray]:
        self.evaluations += 1
        loss, grad_scores, _ = loss_and_token_gradients(scores(self.E, p), self.values, self.bags, with_values=False)
        if not np.isfinite(loss):
            raise ToksError(f"gradient flow: the loss is {loss} at |p| = {np.linalg.norm(p):.3g}")
        gradient = transposed_product(self.E, grad_scores)
        if self.penalty:
            gradient += self.penalty * p
            loss += self.penalty / 2 * float(p @ p)
        return loss, gradient
