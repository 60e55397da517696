"""Models with positions: padded batches of token ids, every softmax masked.

A batch is X (n, T) token ids padded with any id where `mask` (n, T) is False. Each model maps it to logits:
(n,) for two classes, (n, K) for K. The pad positions never enter a softmax (their scores are -inf), so the
output does not depend on how much padding a batch carries.

- OneLayer: softmax(p^T E_X^T) E_X v, the paper's model written over positions (the reference of the
  bag-of-tokens form).
- TwoLayer (paper Fig. 1): layer 1 self-attention over the sequence, H = E_X + softmax(E_X W1 E_X^T) E_X with
  a residual, W1 = I/sqrt(d) by default (parameter-free) or trained (`trained_kq`); layer 2 the <cls> read-out
  softmax(p^T W2 H^T) H v, W2 = I or trained.
- MLP head: the attention output z goes through relu(W_a z + b_a), width d, before the linear head; W_a and
  b_a ~ U(-1/sqrt d, 1/sqrt d) (torch's nn.Linear default) from a generator seeded with `seed`. Without a
  residual, v reads the ReLU features and E_s^T v is not a property of the token (another initialisation of
  W_a changed its curve's sign); the residual head z + relu(W_a z + b_a) keeps z, so v reads E_s again.
"""

from __future__ import annotations

import torch
from torch import nn

# The variants by name (config.SEQUENCE_VARIANTS): SequenceClassifier's keyword arguments for each.
LAYOUTS: dict[str, dict[str, int | bool]] = {
    "one_layer": {},
    "mlp": {"mlp": True},
    "mlp_residual": {"mlp": True, "residual": True},
    "two_layer": {"layers": 2},
    "two_layer_kq": {"layers": 2, "trained_kq": True},
}


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax over the last axis, pad positions (mask False) excluded; mask broadcasts against scores."""
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


class SequenceClassifier(nn.Module):
    """One or two attention layers over positions, an optional MLP, then the linear head v (or V)."""

    def __init__(self, E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, layers: int = 1,
                 trained_kq: bool = False, mlp: bool = False, residual: bool = False, seed: int = 0) -> None:
        super().__init__()
        if layers not in (1, 2):
            raise ValueError(f"layers must be 1 or 2, got {layers}")
        d = E.shape[1]
        self.layers, self.residual = layers, residual
        self.E, self.p, self.v = nn.Parameter(E.clone()), nn.Parameter(p.clone()), nn.Parameter(v.clone())
        eye = torch.eye(d, dtype=E.dtype)
        # Key-query matrices: fixed (parameter-free attention) unless trained_kq.
        self.W1 = nn.Parameter(eye / d**0.5, requires_grad=trained_kq)
        self.W2 = nn.Parameter(eye.clone(), requires_grad=trained_kq)
        self.mlp = nn.Sequential(nn.Linear(d, d, dtype=E.dtype), nn.ReLU()) if mlp else None
        if self.mlp is not None:  # seeded, so that a run is repeatable whatever the global RNG holds
            generator = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                for parameter in self.mlp[0].parameters():
                    parameter.uniform_(-(d**-0.5), d**-0.5, generator=generator)

    def hidden(self, X: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """H (n, T, d): the embeddings, and for two layers after the residual self-attention layer."""
        E_X = self.E[X]
        if self.layers == 1:
            return E_X
        attention = masked_softmax(E_X @ self.W1 @ E_X.transpose(1, 2), mask[:, None, :])
        return E_X + attention @ E_X

    def cls_direction(self) -> torch.Tensor:
        """W2^T p: the <cls> read-out scores token s by p^T W2 h_s (one layer: W2 = I, the paper's p^T E_s)."""
        return self.W2.T @ self.p if self.layers == 2 else self.p

    def readout(self, X: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The logits, the <cls> attention q (n, T) over positions and the scores it is the softmax of."""
        H = self.hidden(X, mask)
        scores = H @ self.cls_direction()
        q = masked_softmax(scores, mask)
        z = torch.einsum("nt,ntd->nd", q, H)
        if self.mlp is not None:
            z = z + self.mlp(z) if self.residual else self.mlp(z)
        return z @ self.v, q, scores

    def forward(self, X: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.readout(X, mask)[0]
