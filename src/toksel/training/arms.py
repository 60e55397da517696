"""The one-layer model's embedding arms on one seed's draw of a dataset, at one embedding dimension.

An arm is what E does: `trained` (E, p, v jointly), `untrained` (E frozen at E0, its random initialisation) or
`one_step` (E frozen at E1, E0 after the one GD step of Lemma 4.1). E0, p0 and v are drawn from the seed as the
one_step stage draws them, the same for every arm. Every fit an arm makes (its screens, kept, matched and control
fits) reads the same rows and starts from E0 or E1: each is made once per label set here (E1 is a full pass over
the split; the splits are read from disk). Shared by the `train` and `d_sweep` stages.
"""

from __future__ import annotations

from pathlib import Path

import torch

from toksel.data.token_table import TokenTable, read_token_table
from toksel.models.fused import FusedBags
from toksel.models.initial import initialise
from toksel.params import Config
from toksel.theory.one_step import one_gradient_step_on_embeddings
from toksel.training.classifier import BagClassifier
from toksel.training.data import PackedDataModule
from toksel.training.fit import parameter_dtype
from toksel.training.protocol import ModelFactory


class Arms:
    """The models and data of every arm for one seed's draw (`folder`) at dimension `d`."""

    def __init__(self, config: Config, folder: Path, seed: int, d: int) -> None:
        self.config, self.folder, self.seed = config, folder, seed
        self.tokens: TokenTable = read_token_table(folder / "tokens.csv")
        self.init = initialise(len(self.tokens), d, seed, num_classes=self.tokens.num_classes)
        self.dtype = parameter_dtype(config.train.precision)
        self._data: dict[bool, PackedDataModule] = {}
        self._one_step: dict[bool, torch.Tensor] = {}

    def data(self, shuffled: bool) -> PackedDataModule:
        """The packed splits; `shuffled`: the control's training labels (base.data_seed and the seed)."""
        if shuffled not in self._data:
            settings = self.config.train
            self._data[shuffled] = PackedDataModule(
                self.folder, settings.batch_size, settings.val_fraction, self.seed, self.dtype,
                label_seed=(self.config.base.data_seed, self.seed) if shuffled else None)
        return self._data[shuffled]

    def one_step_embeddings(self, shuffled: bool) -> torch.Tensor:
        """E1: the one step on the train split this model trains on (the control's labels are shuffled)."""
        if shuffled not in self._one_step:
            labelled = self.data(shuffled).rows("train")[0]  # the whole split, validation rows included
            E0, p0, v = self.init.E.numpy(), self.init.p.numpy(), self.init.v.numpy()
            bags = FusedBags.from_split(labelled, self.tokens.num_classes)
            self._one_step[shuffled] = torch.from_numpy(
                one_gradient_step_on_embeddings(E0, p0, v, bags, self.config.one_step.eta0))
        return self._one_step[shuffled]

    def model(self, arm: str) -> ModelFactory:
        """(learning rate, shuffled labels) -> the arm's model."""
        settings, init = self.config.train, self.init
        important = torch.tensor(self.tokens.important)

        def build(lr: float, shuffled: bool) -> BagClassifier:
            E = self.one_step_embeddings(shuffled) if arm == "one_step" else init.E
            return BagClassifier(E.to(self.dtype), init.p.to(self.dtype), init.v.to(self.dtype), important,
                                 train_embeddings=arm == "trained", optimizer=settings.optimizer, lr=lr,
                                 weight_decay=settings.weight_decay)

        return build
