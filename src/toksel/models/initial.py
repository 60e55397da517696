"""The initialisation every model starts from: E, p and v drawn from one seed, the same draws in every stage (the
theory's one step, the training arms, the ablations).

torch is imported when a draw is made, not with this module: a stage that only reads what others drew (or does
nothing) does not pay its second of importing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from toksel.runtime.memory import require_memory

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Initialisation:
    E: torch.Tensor  # (|S|, d), rows ~ N(0, I/d)
    p: torch.Tensor  # (d,) ~ N(0, I/d)
    v: torch.Tensor  # (d,) a fixed unit vector, a Gaussian draw normalised; (d, K) orthonormal columns for K > 2


def initialise(vocab_size: int, d: int, seed: int, dtype: torch.dtype | None = None,
               num_classes: int = 2) -> Initialisation:
    """E and p ~ N(0, I/d); v a random unit vector, or for K > 2 classes K random orthonormal vectors (the
    rebuttal's one-step formula holds for (nearly) orthonormal v_k). dtype: float64 unless given."""
    import torch

    dtype = torch.float64 if dtype is None else dtype
    if num_classes > 2 and num_classes > d:
        raise ValueError(f"{num_classes} orthonormal output vectors need d >= {num_classes}, got d = {d}")
    # A stage keeps E0, E1 and a gradient of E at once, at least: three arrays of |S| x d.
    require_memory(3 * vocab_size * d * torch.finfo(dtype).bits // 8, f"model.d = {d} with {vocab_size:,} tokens",
                   "lower model.d")
    generator = torch.Generator().manual_seed(seed)
    E = torch.randn(vocab_size, d, generator=generator, dtype=dtype) / d**0.5
    p = torch.randn(d, generator=generator, dtype=dtype) / d**0.5
    if num_classes == 2:
        v = torch.randn(d, generator=generator, dtype=dtype)
        return Initialisation(E=E, p=p, v=v / v.norm())
    V, _ = torch.linalg.qr(torch.randn(d, num_classes, generator=generator, dtype=dtype))
    return Initialisation(E=E, p=p, v=V)
