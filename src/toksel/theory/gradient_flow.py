"""Gradient flow on p with E frozen (Lemmas 4.2 and 4.4, Theorem 4.3), simulated by full-batch GD.

Plain GD: p <- p - lr * grad. Normalised GD: p <- p - lr * grad / |grad|, the same path as gradient flow up
to a change of time, which reaches the late, slowly turning part of the path in far fewer steps.
Each step costs two products with E (a = E p, grad = E^T dL/da) and one fused pass over the corpus, all on
numba's threads. Two classes: v is one output vector; K > 2: V holds one per class, as columns.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from toksel.errors import ToksError
from toksel.models.fused import FusedBags, loss_and_token_gradients
from toksel.models.products import scores, transposed_product
from toksel.models.threads import pass_threads


@dataclass(frozen=True)
class Trajectory:
    steps: np.ndarray  # (k,) the logged steps
    loss: np.ndarray  # (k,)
    p: np.ndarray  # (k, d) p_t at the logged steps

    @property
    def p_norm(self) -> np.ndarray:
        return np.linalg.norm(self.p, axis=1)


def run_gradient_flow(
    E: np.ndarray,
    p0: np.ndarray,
    v: np.ndarray,
    bags: FusedBags,
    steps: int,
    lr: float,
    normalized: bool = False,
    log_every: int = 100,
    progress: bool = False,
    penalty: float = 0.0,
) -> Trajectory:
    """GD on p for `steps` steps; logs step 0, every `log_every` steps, and the last step.

    penalty: GD on the loss plus penalty/2 |p|^2 instead (a loss with a finite minimiser: Lemma 4.2's control).
    """
    values = E @ v  # b = E v (B = E V) is fixed while only p moves
    with pass_threads(len(bags.tokens), E.size):
        return _descend(np.ascontiguousarray(E), p0.astype(np.float64, copy=True), values, bags, steps, lr,
                        normalized, log_every, progress, penalty)


def _descend(E: np.ndarray, p: np.ndarray, values: np.ndarray, bags: FusedBags, steps: int, lr: float,
             normalized: bool, log_every: int, progress: bool, penalty: float) -> Trajectory:
    logged_steps, losses, snapshots = [], [], []

    def log(step: int, loss: float) -> None:
        logged_steps.append(step)
        losses.append(loss)
        snapshots.append(p.copy())

    for step in tqdm(range(steps + 1), desc="gradient flow", disable=not progress, mininterval=1.0):
        loss, grad_scores, _ = loss_and_token_gradients(scores(E, p), values, bags, with_values=False)
        if not np.isfinite(loss):
            raise ToksError(f"gradient flow diverged at step {step} (loss {loss}): lower gradient_flow.lr")
        if step % log_every == 0 or step == steps:
            log(step, loss)
        if step == steps:
            break
        gradient = transposed_product(E, grad_scores)
        if penalty:
            gradient += penalty * p
        largest = np.abs(gradient).max()
        if largest == 0:  # every non-selected exp(score) underflowed: float64 can follow the flow no further
            warnings.warn(f"gradient flow: the gradient underflowed to 0 at step {step}; stopping there",
                          stacklevel=2)
            if logged_steps[-1] != step:
                log(step, loss)
            break
        # Rescale before the norm: the squares of a 1e-160 gradient would underflow.
        p -= lr * (gradient / largest / np.linalg.norm(gradient / largest) if normalized else gradient)
    return Trajectory(np.array(logged_steps), np.array(losses), np.stack(snapshots))
