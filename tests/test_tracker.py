"""The MLflow store's companion process: calls answered over its socket, its errors relayed, a stage that loses it
finishing on a store of its own, and a stop that ends it."""

import time

import pytest
from mlflow import MlflowClient

from toksel import tracker


@pytest.fixture
def companion(tmp_path, monkeypatch):
    """A store reached through a companion started for it; stopped at the end."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("TOKSEL_TRACKER", "1")
    monkeypatch.setenv("TOKSEL_TRACKER_IDLE", "60")
    store = tracker.open_store(uri)
    yield uri, store
    tracker.stop(uri)


def _gone(path, seconds=10.0):
    deadline = time.monotonic() + seconds
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not path.exists()


def test_the_companion_answers_the_calls_on_the_same_store(companion):
    uri, store = companion
    assert isinstance(store, tracker.RemoteStore)
    experiment = store.experiment_id("toksel-test", None)
    run_id = store.create_run(experiment, "a stage", {"stage": "a stage"})
    store.log_batch(run_id, [["loss", 0.5, 1000, 0], ["loss", 0.25, 2000, 1]], [["lr", "0.1"]])
    store.set_terminated(run_id, "FINISHED")
    run = MlflowClient(uri).get_run(run_id)  # what another process sees in the store
    assert run.info.status == "FINISHED" and run.data.params == {"lr": "0.1"} and run.data.metrics == {"loss": 0.25}
    assert store.run_info(run_id)["tags"]["stage"] == "a stage"
    assert [found["run_id"] for found in store.search_runs(experiment, "tags.stage = 'a stage'", 10)] == [run_id]


def test_a_refused_call_is_an_error_of_the_stage(companion):
    _, store = companion
    with pytest.raises(tracker.TrackerError, match="not found|No Run"):
        store.run_info("0" * 32)


def test_a_stage_that_loses_its_companion_opens_the_store_itself(companion, capsys):
    uri, store = companion
    experiment = store.experiment_id("toksel-test", None)
    assert tracker.stop(uri) and _gone(tracker.socket_path(uri))
    run_id = store.create_run(experiment, "after the companion", {})
    assert MlflowClient(uri).get_run(run_id).info.run_name == "after the companion"
    assert "went away" in capsys.readouterr().err


def test_without_the_companion_a_stage_opens_the_store_itself(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKSEL_TRACKER", "0")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert isinstance(tracker.open_store(uri), tracker.Store) and not tracker.socket_path(uri).exists()
    assert tracker.stop(uri) is False and tracker.main(["stop", uri]) == 0 and tracker.main(["nonsense"]) == 2


def test_the_companion_ends_when_idle(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("TOKSEL_TRACKER", "1")
    monkeypatch.setenv("TOKSEL_TRACKER_IDLE", "1")
    store = tracker.open_store(uri)
    assert isinstance(store, tracker.RemoteStore) and store.experiment_id("toksel-test", None)
    assert _gone(tracker.socket_path(uri), seconds=15.0)
