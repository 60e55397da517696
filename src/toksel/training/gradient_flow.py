"""Gradient flow on p with E frozen (Lemmas 4.2 and 4.4, Theorem 4.3), simulated by full-batch GD.

Plain GD: p <- p - lr * grad. Normalised GD: p <- p - lr * grad / |grad|, the same path as gradient flow up
to a change of time, which reaches the late, slowly turning part of the path in far fewer steps.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from toksel.errors import ToksError
from toksel.models.one_layer import Bags, attention_output, logistic_loss


@dataclass(frozen=True)
class Trajectory:
    steps: np.ndarray  # (k,) the logged steps
    loss: np.ndarray  # (k,)
    p: np.ndarray  # (k, d) p_t at the logged steps

    @property
    def p_norm(self) -> np.ndarray:
        return np.linalg.norm(self.p, axis=1)


def run_gradient_flow(
    E: torch.Tensor,
    p0: torch.Tensor,
    v: torch.Tensor,
    bags: Bags,
    steps: int,
    lr: float,
    normalized: bool = False,
    log_every: int = 100,
    progress: bool = False,
) -> Trajectory:
    """GD on p for `steps` steps; logs step 0, every `log_every` steps, and the last step."""
    values = E @ v  # b = E v is fixed while only p moves
    p = p0.detach().clone().requires_grad_(True)
    logged_steps, losses, snapshots = [], [], []
    for step in tqdm(range(steps + 1), desc="gradient flow", disable=not progress, mininterval=1.0):
        loss = logistic_loss(attention_output(E @ p, values, bags), bags.y)
        if step % log_every == 0 or step == steps:
            if not torch.isfinite(loss):
                raise ToksError(f"gradient flow diverged at step {step} (loss {loss.item()}): lower gradient_flow.lr")
            logged_steps.append(step)
            losses.append(loss.item())
            snapshots.append(p.detach().numpy().copy())
        if step == steps:
            break
        (gradient,) = torch.autograd.grad(loss, p)
        largest = gradient.abs().max()
        if largest == 0:  # every non-selected exp(score) underflowed: float64 can follow the flow no further
            warnings.warn(f"gradient flow: the gradient underflowed to 0 at step {step}; stopping there", stacklevel=2)
            logged_steps.append(step)
            losses.append(loss.item())
            snapshots.append(p.detach().numpy().copy())
            break
        with torch.no_grad():
            # Rescale before the norm: the squares of a 1e-160 gradient would underflow.
            p -= lr * (gradient / largest / (gradient / largest).norm() if normalized else gradient)
    return Trajectory(np.array(logged_steps), np.array(losses), np.stack(snapshots))
