"""One full-batch loss and gradient (in E, p and v) of the one-layer model, two ways.

(a) The dense autograd reference: E_X gathered position by position as a (B, T, d) array, padded and masked,
    in minibatches of similar length that fit in memory; torch autograd accumulates the gradients.
(b) The project's bag-of-tokens path: a = E p and b = E v, the fused pass over the CSR entries for dL/da and
    dL/db, then the chain rule: dL/dp = E^T dL/da, dL/dv = E^T dL/db, dL/dE = dL/da p^T + dL/db v^T.
Both in float64, on the same E, p, v and data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from toksel.data.corpus import PackedSplit
from toksel.models.fused import FusedBags, loss_and_token_gradients
from toksel.models.products import scores, transposed_product

POSITIONS_PER_BATCH = 32_768  # B x T of one gathered minibatch: 512 MiB of E_X at d = 2048 in float64


@dataclass(frozen=True)
class Gradients:
    loss: float
    E: np.ndarray
    p: np.ndarray
    v: np.ndarray

    def relative_difference(self, other: Gradients) -> float:
        """The largest |x - y| / |y| (Frobenius) over the loss and the three gradients."""
        pairs = [(np.array(self.loss), np.array(other.loss)), (self.E, other.E), (self.p, other.p), (self.v, other.v)]
        return max(float(np.linalg.norm(x - y) / np.linalg.norm(y)) for x, y in pairs)


def length_batches(lengths: np.ndarray, positions: int = POSITIONS_PER_BATCH) -> list[np.ndarray]:
    """Rows sorted by length, cut so that each batch's rows x its longest row stays within `positions`."""
    order = np.argsort(lengths, kind="stable")
    batches, start = [], 0
    while start < len(order):
        stop = start + 1
        while stop < len(order) and (stop + 1 - start) * lengths[order[stop]] <= positions:
            stop += 1
        batches.append(order[start:stop])
        start = stop
    return batches


def dense_gradients(E: np.ndarray, p: np.ndarray, v: np.ndarray, split: PackedSplit) -> Gradients:
    """(a): softmax(p^T E_X^T) E_X v with E_X gathered, the logistic loss, autograd; two classes."""
    E_t, p_t, v_t = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (E, p, v))
    lengths = split.lengths
    total = 0.0
    for rows in length_batches(lengths):
        longest = int(lengths[rows].max())
        offsets = np.arange(longest)
        mask = offsets[None, :] < lengths[rows][:, None]
        positions = np.where(mask, split.seq_indptr[rows][:, None] + offsets[None, :], 0)
        X = torch.from_numpy(split.seq_tokens[positions])
        E_X = E_t[X]  # (B, T, d): the array the bag-of-tokens path never builds
        logits = (E_X @ p_t).masked_fill(~torch.from_numpy(mask), -torch.inf)
        f = (torch.softmax(logits, dim=1) * (E_X @ v_t)).sum(dim=1)
        y = torch.from_numpy(2.0 * split.labels[rows] - 1.0)
        batch_loss = torch.nn.functional.softplus(-y * f).sum() / split.n
        batch_loss.backward()
        total += float(batch_loss.detach())
    return Gradients(total, E_t.grad.numpy(), p_t.grad.numpy(), v_t.grad.numpy())


def bag_gradients(E: np.ndarray, p: np.ndarray, v: np.ndarray, bags: FusedBags) -> Gradients:
    """(b): the fused pass and two products with E per output vector; two classes."""
    loss, grad_scores, grad_values = loss_and_token_gradients(scores(E, p), scores(E, v), bags)
    grad_E = np.outer(grad_scores, p)
    grad_E += np.outer(grad_values, v)
    return Gradients(loss, grad_E, transposed_product(E, grad_scores), transposed_product(E, grad_values))
