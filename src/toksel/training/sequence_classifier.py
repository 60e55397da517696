"""The models with positions (models/sequence.py) as a LightningModule, on padded batches
(training/sequence_data.py): E, p, v, the MLP and trained W_KQ all train together, as in the paper's Fig. 1
and the rebuttal's ablations.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from toksel.data.corpus import PackedSplit
from toksel.models.sequence import LAYOUTS, SequenceClassifier
from toksel.params import TrainConfig
from toksel.training.classifier import Batch, ClassifierModule, Focus, as_numpy, predicted_labels
from toksel.training.device import require_on
from toksel.training.sequence_data import padded_batch


class SequenceModule(ClassifierModule):
    def __init__(self, model: SequenceClassifier, important: torch.Tensor, optimizer: str, lr: float,
                 weight_decay: float) -> None:
        super().__init__(important, optimizer, lr, weight_decay)
        self.model = model

    def logits(self, batch: Batch) -> torch.Tensor:
        return self.model(batch["X"], batch["mask"])

    def logits_and_focus(self, batch: Batch) -> tuple[torch.Tensor, Focus]:
        X, mask = batch["X"], batch["mask"]
        logits, q, scores = self.model.readout(X, mask)
        with torch.no_grad():
            important = self.important[X] & mask
            scores = scores.masked_fill(~mask, float("-inf"))
            top = scores == scores.max(dim=1, keepdim=True).values
            focus = Focus(important_mass=(q * important).sum(dim=1),
                          entropy=-torch.special.xlogy(q, q).sum(dim=1),  # pads have q = 0 and add 0
                          top_is_important=(top & important).any(dim=1), has_important=important.any(dim=1))
        return logits, focus

    def token_scores(self) -> tuple[np.ndarray, np.ndarray]:
        """p^T W2 E_s (p^T E_s unless W_KQ is trained: the rebuttal's plotted score) and E_s^T v."""
        E = self.model.E
        return as_numpy(E @ self.model.cls_direction()), as_numpy(E @ self.model.v)

    def embeddings(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.model.E, self.model.p, self.model.v


def correct_on(module: SequenceModule, split: PackedSplit, rows: np.ndarray, max_len: int | None = None,
               batch_size: int = 512) -> torch.Tensor:
    """Bool (len(rows),) on the CPU: whether the module predicts the label of each of some rows of a split (each cut
    to max_len, as it was trained), read where the module is, `batch_size` rows at a time in their order (the test
    loader's batches, when they are its rows and size: the same padding, the same numbers)."""
    device = module.device  # Lightning's record of where the module is
    require_on(module, device)
    verdicts = []
    with torch.inference_mode():
        for start in range(0, len(rows), batch_size):
            batch = {name: tensor.to(device) for name, tensor in
                     padded_batch(split, rows[start:start + batch_size], max_len).items()}
            verdicts.append(predicted_labels(module.logits(batch)) == batch["labels"])
    return torch.cat(verdicts).cpu()


def accuracy_on(module: SequenceModule, split: PackedSplit, rows: np.ndarray, max_len: int | None = None,
                batch_size: int = 512) -> float:
    """The module's accuracy on some rows of a split (each cut to max_len, as it was trained)."""
    return float(correct_on(module, split, rows, max_len, batch_size).float().mean())


KEPT_PREFIX = "model/"  # a kept SequenceModule's parameters are its model's: model/E, model/mlp/0/weight


def kept_module(parameters: Mapping[str, np.ndarray], variant: str, settings: TrainConfig) -> SequenceModule:
    """A model a training stage kept (model.npz: training/record.py), rebuilt to be read: every parameter of the
    variant restored, W_KQ and the MLP included (load_state_dict refuses one missing or left over)."""
    own = {name.removeprefix(KEPT_PREFIX).replace("/", "."): torch.from_numpy(np.asarray(array))
           for name, array in parameters.items() if name.startswith(KEPT_PREFIX)}
    model = SequenceClassifier(own["E"], own["p"], own["v"], **LAYOUTS[variant])
    model.load_state_dict(own)
    return SequenceModule(model, torch.zeros(len(own["E"]), dtype=torch.bool), settings.optimizer, settings.lr,
                          settings.weight_decay)
