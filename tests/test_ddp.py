"""Lightning DDP on two CPU processes (gloo): the same fit as one process, and one MLflow run."""

import json
import math

import pytest
from mlflow import MlflowClient

from pipelines import train
from tests.helpers import TIMING_METRICS, TINY, TINY_TRAIN, published_runs, run_stage_process, seed_folder
from toksel.runtime.config import load_config
from toksel.runtime.errors import ToksError

# batch 16 and 72 training rows: every batch splits evenly between two processes, the last (8 rows) too
SETTINGS = [*TINY, *TINY_TRAIN, "train.accelerator=cpu"]


def _metrics(project) -> dict[str, float | None]:
    return json.loads((seed_folder(project, "train", "synthetic/trained") / "metrics.json").read_text())


@pytest.mark.slow  # 30 to 80 s: `make test-slow`
def test_two_processes_fit_as_one_does_and_log_a_single_run(prepared):
    assert train.main(SETTINGS) == 0
    single = _metrics(prepared)
    published_runs(prepared)  # its records, before the second training replaces them
    # Lightning's ddp starts the other process by running the stage's command again: a process of its own here.
    done = run_stage_process("train", [*SETTINGS, "train.strategy=ddp", "train.devices=2"], prepared)
    assert done.returncode == 0, done.stderr[-3000:]
    distributed = _metrics(prepared)
    assert single.keys() == distributed.keys()
    assert distributed["epochs"] == single["epochs"] == 6
    for name in single.keys() - TIMING_METRICS:  # float32 sums in another order: equal to rounding
        if single[name] is None:
            assert distributed[name] is None, name
        else:
            assert math.isclose(distributed[name], single[name], rel_tol=1e-4, abs_tol=1e-9), name
    assert distributed["test_accuracy"] == single["test_accuracy"]

    every = published_runs(prepared, "tags.stage = 'train'")
    client = MlflowClient(f"sqlite:///{prepared / 'mlflow.db'}")
    runs = [run for run in every if "toksel.trial" not in run.data.tags]  # the stages, not their arms and trials
    parents = {run.data.tags["mlflow.parentRunId"]: run for run in runs}
    # The view is the records': the two-process training replaced the first one's records, and so its runs.
    assert len(runs) == 1 and len(parents) == 1
    assert len(every) == 4  # with its arm, the arm's trial at the one learning rate and its control, logged once
    ddp_stage = runs[0]
    assert ddp_stage.info.status == "FINISHED" and ddp_stage.data.params["train.devices"] == "2"
    ddp_run = next(run for run in every if run.data.tags.get("mlflow.parentRunId") == ddp_stage.info.run_id
                   and "labels" not in run.data.tags)  # the arm
    assert ddp_run.data.metrics["test_accuracy"] == pytest.approx(distributed["test_accuracy"])
    # The arm's trial hangs beside the arm (three levels at the most), named after it.
    trial = next(run for run in every if run.data.tags.get("mlflow.parentRunId") == ddp_stage.info.run_id
                 and run.data.tags.get("labels") == "true"
                 and run.info.run_name.startswith(ddp_run.info.run_name.rsplit(" [", 1)[0] + ", "))
    assert len(client.get_metric_history(trial.info.run_id, "train_loss_epoch")) == 6  # rank 0 logged, once


def test_more_than_one_process_needs_the_ddp_strategy(project):
    with pytest.raises(ToksError, match="need train.strategy=ddp"):
        load_config(["train.devices=2"])
    assert load_config(["train.devices=2", "train.strategy=ddp"]).train.devices == 2
