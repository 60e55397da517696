"""The MLflow experiment the runs go to, a client on its store, and the lock that lets one process of this host at a
time change the store: what `publish` and `make ui` share."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from toksel.runtime.errors import ToksError
from toksel.runtime.paths import project_root

EXPERIMENT = "toksel"
KIND = ("mlflow.experimentKind", "custom_model_development")  # MLflow 3 opens it on its runs, not GenAI
LOCK_WAIT = 600.0  # seconds: a publish of the full pipeline takes about a minute; a lock held longer is stuck


def experiment_name() -> str:
    return os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT


def quiet_mlflow() -> None:
    """No telemetry (as DVC's analytics are off) and MLflow's chatter at warnings only. Before mlflow is imported."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    logging.getLogger("mlflow").setLevel(logging.WARNING)


@contextmanager
def store_lock(uri: str, wait: float | None = None) -> Iterator[None]:
    """The store to ourselves among this host's processes (the lock beside an embedded store, or in the project);
    a lock held past `wait` is one line, not a hang."""
    from filelock import FileLock, Timeout

    wait = LOCK_WAIT if wait is None else wait
    path = (Path(uri.removeprefix("sqlite:///")).with_suffix(".lock") if uri.startswith("sqlite:///")
            else project_root() / "mlflow-server.lock")
    if path.is_symlink():
        raise ToksError(f"{path} is a link: remove it (the store's lock is a plain file)")
    try:
        with FileLock(path, timeout=wait):
            yield
    except Timeout:
        raise ToksError(f"another process has held {path} for {wait:.0f} s: if none is publishing, remove it") from None


def open_experiment(uri: str) -> tuple[Any, str]:
    """A client on the store of `uri` and the experiment's id: made if missing, restored if deleted (it is a view,
    rebuilt by publish). Under store_lock: a new embedded store is made by its first client."""
    quiet_mlflow()
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(experiment_name())
    if experiment is None:
        # Beside an embedded store (a relative default would follow the working directory); a server chooses its own.
        where = (project_root() / "mlartifacts").as_uri() if uri.startswith("sqlite:") else None
        return client, client.create_experiment(experiment_name(), artifact_location=where, tags=dict([KIND]))
    if experiment.lifecycle_stage == "deleted":
        client.restore_experiment(experiment.experiment_id)
    if experiment.tags.get(KIND[0]) != KIND[1]:
        client.set_experiment_tag(experiment.experiment_id, *KIND)
    return client, experiment.experiment_id
