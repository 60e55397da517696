"""The models as LightningModules. ClassifierModule holds what they share; BagClassifier is the one-layer
model f(X) = softmax(p^T E_X^T) E_X v in its bag-of-tokens form, with E, p and v trained jointly, or E frozen
(the embedding ablations). K > 2 classes: V holds K output vectors.

Every split logs its loss and accuracy; validation and test also log where the <cls> attention goes: the mass
on each sequence's important tokens, the entropy over positions, and how often the top-scoring token is
important.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pytorch_lightning as pl
import torch
from torch import nn

from toksel.models.one_layer import (
    Bags,
    attention_output,
    attention_weights,
    classification_loss,
    predicted_labels,
    token_products,
)

Batch = Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class Focus:
    """Per sequence, where the <cls> read-out attends."""

    important_mass: torch.Tensor  # (n,) attention on positions that hold an important token
    entropy: torch.Tensor  # (n,) of the attention over positions
    top_is_important: torch.Tensor  # (n,) bool: a top-scoring position holds an important token
    has_important: torch.Tensor  # (n,) bool: the sequence holds an important token


class ClassifierModule(pl.LightningModule):
    """Loss, accuracy and attention logging per split, and the optimiser of the trained parameters.

    A subclass gives `logits(batch)`, `logits_and_focus(batch)`, `token_scores()` and `embeddings()`.
    """

    def __init__(self, important: torch.Tensor, optimizer: str, lr: float, weight_decay: float) -> None:
        super().__init__()
        self.register_buffer("important", important.to(torch.bool))
        self.optimizer_name, self.lr, self.weight_decay = optimizer, lr, weight_decay

    def logits(self, batch: Batch) -> torch.Tensor:
        raise NotImplementedError

    def logits_and_focus(self, batch: Batch) -> tuple[torch.Tensor, Focus]:
        raise NotImplementedError

    def token_scores(self) -> tuple[np.ndarray, np.ndarray]:
        """(the <cls> score of each token, E_s^T v or E_s^T V), float64 on the CPU: what the figures plot."""
        raise NotImplementedError

    @contextmanager
    def evaluating(self) -> Iterator[None]:
        """A pass in which the parameters do not change (validation, test, a whole split without gradients): a
        subclass may compute what depends on the parameters alone once for all its batches."""
        yield

    def on_validation_epoch_start(self) -> None:
        self._evaluation = self.evaluating()
        self._evaluation.__enter__()

    def on_validation_epoch_end(self) -> None:
        self._evaluation.__exit__(None, None, None)

    on_test_epoch_start, on_test_epoch_end = on_validation_epoch_start, on_validation_epoch_end

    def embeddings(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """E, p and v (or V): the parameters the paper's statements are about."""
        raise NotImplementedError

    def norms(self) -> dict[str, float]:
        """|p|, |v| (Frobenius for V) and the mean |E_s|: the scales the raw per-bin stds move with."""
        with torch.no_grad():
            E, p, v = self.embeddings()
            return {"norm_p": float(p.norm()), "norm_v": float(v.norm()), "mean_norm_E": float(E.norm(dim=1).mean())}

    def loss_and_accuracy(self, batch: Batch, logits: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.logits(batch) if logits is None else logits
        labels = batch["labels"]
        return classification_loss(f, labels), (predicted_labels(f) == labels).float().mean()

    def _step(self, batch: Batch, split: str) -> torch.Tensor:
        n = len(batch["labels"])
        if split == "train":
            loss, accuracy = self.loss_and_accuracy(batch)
        else:
            logits, focus = self.logits_and_focus(batch)
            loss, accuracy = self.loss_and_accuracy(batch, logits)
            self._log_focus(focus, split)
        on_step = split == "train"
        # Under DDP a training batch is shared out: average the processes' numbers (validation and test see
        # every row in every process).
        self.log(f"{split}_loss", loss, on_step=on_step, on_epoch=True, batch_size=n, prog_bar=on_step,
                 sync_dist=on_step)
        self.log(f"{split}_accuracy", accuracy, on_step=False, on_epoch=True, batch_size=n, sync_dist=on_step)
        return loss

    def _log_focus(self, focus: Focus, split: str) -> None:
        with_important = int(focus.has_important.sum())
        if with_important:
            self.log(f"{split}_attention_important_mass", focus.important_mass[focus.has_important].mean(),
                     on_epoch=True, batch_size=with_important)
            self.log(f"{split}_argmax_important_fraction",
                     focus.top_is_important[focus.has_important].float().mean(), on_epoch=True,
                     batch_size=with_important)
        self.log(f"{split}_attention_entropy", focus.entropy.mean(), on_epoch=True,
                 batch_size=len(focus.entropy))

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._step(batch, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        trained = [parameter for parameter in self.parameters() if parameter.requires_grad]
        # Fused: one pass over each parameter per step instead of about ten (E is 60 MB on IMDB).
        if self.optimizer_name == "sgd":
            return torch.optim.SGD(trained, lr=self.lr, weight_decay=self.weight_decay, fused=True)
        return torch.optim.AdamW(trained, lr=self.lr, weight_decay=self.weight_decay, fused=True)


def as_numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().cpu().double().numpy()


class BagClassifier(ClassifierModule):
    """The one-layer model on batches of bags (training/data.py)."""

    def __init__(self, E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, important: torch.Tensor,
                 train_embeddings: bool, optimizer: str, lr: float, weight_decay: float) -> None:
        super().__init__(important, optimizer, lr, weight_decay)
        if train_embeddings:
            self.E = nn.Parameter(E.clone())
        else:  # frozen: a buffer left out of the checkpoints (60 MB on IMDB, written twice an epoch for nothing);
            self.register_buffer("E", E.clone(), persistent=False)  # a resumed fit rebuilds it from the seed
        self.p = nn.Parameter(p.clone())
        self.v = nn.Parameter(v.clone())

    @contextmanager
    def evaluating(self) -> Iterator[None]:
        # E p and E v once per pass, not per batch: each is a pass over E (60 MB on IMDB), most of a batch's cost.
        with torch.no_grad():
            self._fixed_products = token_products(self.E, self.p, self.v)
        try:
            yield
        finally:
            self._fixed_products = None

    def token_products(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(E p, E v): the token scores and values, the only way the parameters enter the output. With gradients
        (a training step) always computed afresh."""
        fixed = getattr(self, "_fixed_products", None)
        if fixed is not None and not torch.is_grad_enabled():
            return fixed
        return token_products(self.E, self.p, self.v)

    def logits(self, batch: Batch) -> torch.Tensor:
        return attention_output(*self.token_products(), Bags.from_batch(batch))

    def logits_and_focus(self, batch: Batch) -> tuple[torch.Tensor, Focus]:
        bags, (scores, values) = Bags.from_batch(batch), self.token_products()
        logits = attention_output(scores, values, bags)
        with torch.no_grad():
            q = attention_weights(scores, bags)
            important = self.important[bags.tokens].to(q.dtype)
            entry_scores = scores[bags.tokens]
            top = (entry_scores == bags.row_max(entry_scores)[bags.rows]).to(q.dtype)
            focus = Focus(
                important_mass=bags.row_sum(q * important),
                # Each of the c_s positions of token s carries q_s / c_s.
                entropy=-bags.row_sum(torch.special.xlogy(q, q / bags.counts)),
                top_is_important=bags.row_sum(top * important) > 0,
                has_important=bags.row_sum(important) > 0,
            )
        return logits, focus

    def token_scores(self) -> tuple[np.ndarray, np.ndarray]:
        with torch.no_grad():
            return tuple(map(as_numpy, token_products(self.E, self.p, self.v)))

    def embeddings(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.E, self.p, self.v
