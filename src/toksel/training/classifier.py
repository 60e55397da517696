"""The one-layer model as a LightningModule: f(X) = softmax(p^T E_X^T) E_X v in its bag-of-tokens form, with
E, p and v trained jointly, or E frozen (the embedding ablations). K > 2 classes: V holds K output vectors.

Every split logs its loss and accuracy; validation and test also log where the attention goes: the mass on
each sequence's important tokens, the entropy over positions, and how often the top-scoring token is
important.
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from torch import nn

from toksel.models.one_layer import Bags, attention_output, attention_weights, classification_loss


class AttentionClassifier(pl.LightningModule):
    def __init__(self, E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, important: torch.Tensor,
                 train_embeddings: bool, optimizer: str = "adam", lr: float = 1e-3, weight_decay: float = 0.0) -> None:
        super().__init__()
        self.E = nn.Parameter(E.clone(), requires_grad=train_embeddings)
        self.p = nn.Parameter(p.clone())
        self.v = nn.Parameter(v.clone())
        self.register_buffer("important", important.to(torch.bool))
        self.optimizer_name, self.lr, self.weight_decay = optimizer, lr, weight_decay

    def forward(self, bags: Bags, scores: torch.Tensor | None = None) -> torch.Tensor:
        """f(X) per sequence; `scores` = E p when the caller already has it."""
        return attention_output(self.E @ self.p if scores is None else scores, self.E @ self.v, bags)

    def loss_and_accuracy(self, bags: Bags, scores: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        f = self(bags, scores)
        predicted = (f > 0).long() if f.dim() == 1 else f.argmax(dim=1)
        return classification_loss(f, bags), (predicted == bags.labels).float().mean()

    def _step(self, batch: dict[str, torch.Tensor], split: str) -> torch.Tensor:
        bags = Bags.from_batch(batch)
        scores = self.E @ self.p
        loss, accuracy = self.loss_and_accuracy(bags, scores)
        on_step = split == "train"
        self.log(f"{split}_loss", loss, on_step=on_step, on_epoch=True, batch_size=bags.n, prog_bar=on_step)
        self.log(f"{split}_accuracy", accuracy, on_step=False, on_epoch=True, batch_size=bags.n)
        if split != "train":
            with torch.no_grad():
                self._log_attention(scores.detach(), bags, split)
        return loss

    def _log_attention(self, scores: torch.Tensor, bags: Bags, split: str) -> None:
        q = attention_weights(scores, bags)
        important = self.important[bags.tokens].to(q.dtype)
        has_important = bags.row_sum(important) > 0
        mass = bags.row_sum(q * important)
        # Entropy over positions: each of the c_s positions of token s carries q_s / c_s.
        entropy = -bags.row_sum(torch.special.xlogy(q, q / bags.counts))
        entry_scores = scores[bags.tokens]
        top = (entry_scores == bags.row_max(entry_scores)[bags.rows]).to(q.dtype)
        top_is_important = bags.row_sum(top * important) > 0
        with_important = int(has_important.sum())
        if with_important:
            self.log(f"{split}_attention_important_mass", mass[has_important].mean(), on_epoch=True,
                     batch_size=with_important)
            self.log(f"{split}_argmax_important_fraction", top_is_important[has_important].float().mean(),
                     on_epoch=True, batch_size=with_important)
        self.log(f"{split}_attention_entropy", entropy.mean(), on_epoch=True, batch_size=bags.n)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._step(batch, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        trained = [parameter for parameter in self.parameters() if parameter.requires_grad]
        if self.optimizer_name == "sgd":
            return torch.optim.SGD(trained, lr=self.lr, weight_decay=self.weight_decay)
        return torch.optim.AdamW(trained, lr=self.lr, weight_decay=self.weight_decay)
