"""The ablation stage (models with positions through Lightning), its attention summaries, and the comparison of
curve shapes with the rebuttal's tables."""

import json
import os

import numpy as np
import pandas as pd
import pytest
import torch
from mlflow import MlflowClient

from pipelines import ablation, prepare
from tests.helpers import OPTIMISER, TINY, published_runs, seed_folder
from toksel.claims.rebuttal import TABLES, shape_agreement
from toksel.models.initial import initialise
from toksel.models.sequence import LAYOUTS, SequenceClassifier
from toksel.params import SEQUENCE_VARIANTS
from toksel.training.sequence_classifier import SequenceModule

SMALL = ["sequence.cpu.d=32", "sequence.batch_size=16", "train.max_epochs=4", "train.patience=4", "train.lr=0.02",
         "train.lr_grid=[0.02]", "train.heldout_min_count=1"]


def test_every_configured_variant_has_a_layout():
    assert set(SEQUENCE_VARIANTS) == set(LAYOUTS)


def test_the_focus_of_the_attention_matches_a_count_sequence_by_sequence():
    init = initialise(6, 4, seed=0)
    important = torch.tensor([True, False, False, True, False, False])
    module = SequenceModule(SequenceClassifier(init.E, init.p, init.v, layers=2), important, **OPTIMISER)
    X = torch.tensor([[0, 1, 2, 0], [1, 2, 4, 5], [3, 3, 1, 0]])
    mask = torch.tensor([[True, True, True, False], [True, True, True, True], [True, True, False, False]])
    logits, focus = module.logits_and_focus({"X": X, "mask": mask, "labels": torch.tensor([0, 1, 1])})
    _, q, scores = module.model.readout(X, mask)
    for row in range(3):
        positions = mask[row].nonzero().flatten().tolist()
        weights = q[row, positions]
        tokens = X[row, positions]
        assert focus.important_mass[row] == pytest.approx(float(weights[important[tokens]].sum().detach()))
        assert focus.entropy[row] == pytest.approx(float(-(weights * weights.log()).sum().detach()))
        top = positions[int(scores[row, positions].argmax())]
        assert bool(focus.top_is_important[row]) == bool(important[X[row, top]])
        assert bool(focus.has_important[row]) == bool(important[tokens].any())
    assert focus.has_important.tolist() == [True, False, True]
    torch.testing.assert_close(logits, module.logits({"X": X, "mask": mask}))


def test_the_ablation_stage_trains_a_two_layer_model_with_w_kq_and_records_it(project):
    assert prepare.main(TINY) == 0
    assert ablation.main([*TINY, *SMALL, "sequence.variant=two_layer_kq", "sequence.cpu.max_len=4"]) == 0
    out = seed_folder(project, "ablation", "synthetic/two_layer_kq")
    metrics = json.loads((out / "metrics.json").read_text())
    # Cut to 4 of 6 tokens, a third of the sequences lose their one relevant token: far above chance all the same.
    assert metrics["best_train_loss"] < 0.5 * np.log(2) and metrics["test_accuracy"] > 0.7
    assert metrics["d"] == 32 and metrics["train_rows"] == 72 and 0 <= metrics["padding_fraction"] < 0.05
    assert metrics["lr"] == 0.02 and metrics["control_test_accuracy"] < metrics["test_accuracy"]
    # How each fit ended: the 4-epoch budget (patience 4) can only end these ones; the epoch kept is the one whose
    # validation loss its run's curve shows lowest (here the third for the fit, the first for its control).
    every = published_runs(project, "tags.stage = 'ablation'")
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    for prefix, labels in (("", "true"), ("control_", "shuffled")):
        assert metrics[f"{prefix}stopped_epoch"] == 4 and metrics[f"{prefix}budget_bound"] == 1.0
        fit = next(run for run in every if run.data.tags.get("labels") == labels)
        curve = sorted(client.get_metric_history(fit.info.run_id, "val_loss"), key=lambda point: point.step)
        assert len(curve) == 4  # Lightning's, one point an epoch
        assert metrics[f"{prefix}best_epoch"] == 1 + int(np.argmin([point.value for point in curve]))
    assert not (out / "epochs.csv").exists()  # the per-epoch log is the train stage's
    bins = pd.read_csv(out / "bins.csv")
    assert {"centre_p", "mean_p", "std_p", "centre_v", "mean_v"} <= set(bins.columns)
    assert (out / "token_scores.png").stat().st_size > 10_000
    assert not (project / "checkpoints" / "ablation" / "synthetic" / "two_layer_kq" / "seed0").exists()
    runs = [run for run in every if "toksel.trial" not in run.data.tags]
    assert len(runs) == 1 and runs[0].data.tags["variant"] == "two_layer_kq" and runs[0].data.tags["seed"] == "0"
    assert runs[0].info.status == "FINISHED"
    trial = next(run for run in every if run.data.tags.get("labels") == "true")
    losses = [point.value for point in client.get_metric_history(trial.info.run_id, "train_loss_epoch")]
    assert len(losses) == 4 and losses[-1] < 0.5 * losses[0]


def test_the_residual_mlp_head_keeps_the_attention_output():
    init = initialise(5, 4, seed=0)
    plain = SequenceClassifier(init.E, init.p, init.v, mlp=True, seed=1)
    residual = SequenceClassifier(init.E, init.p, init.v, mlp=True, residual=True, seed=1)
    X, mask = torch.tensor([[0, 1, 2]]), torch.ones(1, 3, dtype=torch.bool)
    _, q, _ = plain.readout(X, mask)
    z = torch.einsum("nt,ntd->nd", q, plain.hidden(X, mask))
    torch.testing.assert_close(plain(X, mask), plain.mlp(z) @ plain.v)
    torch.testing.assert_close(residual(X, mask), (z + residual.mlp(z)) @ residual.v)


@pytest.mark.parametrize("table", TABLES, ids=lambda table: table.name)
def test_a_curve_of_the_tables_shape_agrees_and_its_mirror_image_does_not(table):
    centres = np.asarray(table.x)
    means = 3 * np.asarray(table.means) + 1  # other y units
    same = shape_agreement(table, centres, means)
    assert same.spearman > 0.99 and same.our_min_x == pytest.approx(same.their_min_x)
    assert shape_agreement(table, centres, -means).spearman < -0.99


def test_empty_bins_are_left_out_of_the_comparison():
    table = TABLES[0]
    means = np.asarray(table.means, dtype=float)
    means[[3, 7]] = np.nan
    agreement = shape_agreement(table, np.asarray(table.x), means)
    assert np.isfinite(agreement.spearman) and agreement.spearman > 0.9


def test_only_the_tables_bins_inside_the_range_of_ours_are_compared():
    table = TABLES[0]  # MLP: E_s^T v, rising on x > 0
    x, means = np.asarray(table.x), np.asarray(table.means)
    ours = shape_agreement(table, x[x > 0.05], means[x > 0.05])  # our curve covers x in [0.11, 0.89] only
    assert ours.bins_compared == 9 and ours.spearman == pytest.approx(1.0)
