"""Every step of a stage on the fit's device, checked on a machine without a GPU: a fit leaves its module where it
trained (not where Lightning's teardown puts it), the readings refuse a module that is elsewhere, a pass over a
split copies its numbers to the host once (not once per batch), a training step never waits for the device, and
the batches built on the device are the batches cut one at a time."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from tests.helpers import OPTIMISER, TINY, TINY_TRAIN
from toksel.data.corpus import PackedSplit
from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.models.sequence import SequenceClassifier
from toksel.runtime.config import load_config
from toksel.runtime.records import RunRecord
from toksel.training.classifier import BagClassifier
from toksel.training.data import PackedDataModule, batch_of_rows
from toksel.training.device import OffDevice, require_on
from toksel.training.fit import FitPlan, StopOnNonFiniteLoss, TrainingDiverged, fit, full_pass
from toksel.training.sequence_classifier import SequenceModule, correct_on

# What brings a tensor's value to the host, and so waits for the device on a GPU.
HOST_TRIPS = {"item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__"}


class HostTrips(TorchFunctionMode):
    """Counts the calls that copy a tensor's value to the host."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.count += getattr(func, "__name__", "") in HOST_TRIPS
        return func(*args, **(kwargs or {}))


def _bag_model(lr: float = 0.02) -> BagClassifier:
    tokens = read_token_table(data_dir("synthetic", 0) / "tokens.csv")
    generator = torch.Generator().manual_seed(0)
    E, p, v = (torch.randn(*shape, generator=generator) for shape in ((len(tokens), 8), (8,), (8,)))
    return BagClassifier(E, p, v, torch.tensor(tokens.important), train_embeddings=True, **{**OPTIMISER, "lr": lr})


class MovesRecorded(BagClassifier):
    """The one-layer model that records where it is moved: Lightning's teardown calls .cpu(), a fit .to()."""

    moves: list[str]

    def cpu(self):  # noqa: ANN201
        self.moves.append("cpu")
        return super().cpu()

    def to(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
        self.moves.append(f"to {torch.device(args[0]) if args else kwargs}")
        return super().to(*args, **kwargs)


def test_a_fit_leaves_its_module_on_the_device_it_trained_on_not_where_the_teardown_put_it(prepared):
    config = load_config([*TINY, *TINY_TRAIN, "train.max_epochs=2"])
    base = _bag_model()
    module = MovesRecorded(base.E.detach(), base.p.detach(), base.v.detach(), base.important, train_embeddings=True,
                           **{**OPTIMISER, "lr": 0.02})
    module.moves = []
    data = PackedDataModule(data_dir("synthetic", 0), 16, 0.1, seed=0)
    record = RunRecord("device", {"stage": "train"})
    with record.run():
        result = fit(module, data, FitPlan(config.train, prepared / "checkpoints" / "device", "key", record, seed=0))
    assert "cpu" in module.moves  # Lightning's teardown, after the fit and after the test
    assert module.moves[-1] == f"to {result.device}"  # and then back where it trained, before any reading
    assert result.device == "cpu"  # no GPU here: Lightning's auto accelerator took the CPU


def test_a_reading_refuses_a_module_away_from_the_stage_device(prepared):
    module = _bag_model()
    data = PackedDataModule(data_dir("synthetic", 0), 16, 0.1, seed=0)
    require_on(module, torch.device("cpu"))  # where it is: no complaint
    with pytest.raises(OffDevice, match="not on meta"):
        full_pass(module, data, "val", torch.device("meta"))
    split = PackedSplit.load(data_dir("synthetic", 0) / "test.npz")
    sequence = SequenceModule(SequenceClassifier(module.E.detach(), module.p.detach(), module.v.detach()),
                              module.important, **OPTIMISER)
    sequence.model.W1 = torch.nn.Parameter(sequence.model.W1.detach().to("meta"), requires_grad=False)
    with pytest.raises(OffDevice, match="W1"):
        correct_on(sequence, split, np.arange(4))


def test_a_pass_over_a_split_copies_to_the_host_once_whatever_its_batches(prepared):
    module = _bag_model()
    trips = {}
    for batch_size in (2, 10_000):
        data = PackedDataModule(data_dir("synthetic", 0), batch_size, 0.1, seed=0)
        with HostTrips() as counted:
            result = full_pass(module, data, "train", torch.device("cpu"))
        trips[batch_size] = (counted.count, result)
    batches = -(-len(data.rows("train")[1]) // 2)
    assert batches > 10
    (small, by_small), (whole, by_whole) = trips[2], trips[10_000]
    assert small == whole  # not one per batch (a per-batch float() would add two a batch)
    assert by_small == pytest.approx(by_whole, rel=1e-6)


def test_a_training_step_does_not_wait_for_the_device_and_a_diverged_loss_still_stops_the_fit():
    check = StopOnNonFiniteLoss()
    trainer = SimpleNamespace(global_step=0, num_training_batches=5, current_epoch=3,
                              strategy=SimpleNamespace(reduce_boolean_decision=lambda decision, all: decision))
    module = SimpleNamespace(lr=0.5)
    check.on_train_epoch_start(trainer, module)
    losses = [0.7, 0.6, float("nan"), float("inf"), float("nan")]
    with HostTrips() as counted:
        for batch_idx, loss in enumerate(losses[:-1]):
            trainer.global_step = batch_idx + 1
            check.on_train_batch_end(trainer, module, {"loss": torch.tensor(loss)}, None, batch_idx)
    assert counted.count == 0  # the non-finite losses are noted on the device, not read
    trainer.global_step = 5
    with pytest.raises(TrainingDiverged, match=r"became nan at epoch 3, step 3 \(lr 0.5\)"):
        check.on_train_batch_end(trainer, module, {"loss": torch.tensor(losses[-1])}, None, 4)
    check.on_train_epoch_start(trainer, module)  # a finite epoch ends quietly
    for batch_idx in range(5):
        check.on_train_batch_end(trainer, module, {"loss": torch.tensor(0.5)}, None, batch_idx)


def test_an_epochs_batches_are_the_batches_cut_one_at_a_time(prepared):
    data = PackedDataModule(data_dir("synthetic", 0), 7, 0.1, seed=0)
    split = data.rows("train")[0]
    built = list(data.loader("train", shuffle=True))
    cut = [batch_of_rows(split, rows) for rows in data.batches("train", shuffle=True)]
    assert len(built) == len(cut) == len(data.loader("train", shuffle=True)) > 1
    for one, other in zip(built, cut, strict=True):
        assert one.keys() == other.keys()
        assert all(torch.equal(one[name], other[name]) for name in one)
