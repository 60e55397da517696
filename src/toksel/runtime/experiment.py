"""The MLflow experiment the runs go to, and a client on its store: what `publish` and a fit's live curves share.

Reaching the store changes no result, so no stage depends on this module (tools/stage_deps.py, RESULT_NEUTRAL).
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from toksel.runtime.errors import ToksError
from toksel.runtime.paths import project_root
from toksel.runtime.processes import Process

EXPERIMENT = "toksel"
LIVE_TAG = "toksel.live"  # on a fit's live run and on its record: publish completes that run (runtime/live.py)
LIVE_PROCESS_TAG = "toksel.live_process"  # "<host> <pid>-<start time>" of the process that trains it
KIND = ("mlflow.experimentKind", "custom_model_development")  # MLflow 3 opens it on its runs, not GenAI


def this_process() -> str:
    """"<host> <pid>-<start time>": the process a run's maker tags it with, to be told later whether it lives."""
    return f"{socket.gethostname()} {Process.current()}"


def gone_from_this_host(tagged: str) -> bool | None:
    """Whether the process a this_process() tag names has ended; None when it ran on another host (or none)."""
    host, _, process = tagged.partition(" ")
    if host != socket.gethostname() or not process:
        return None
    return not Process.parse(process).running()


def experiment_name() -> str:
    return os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT


def open_experiment(uri: str) -> tuple[Any, str]:
    """A client on the store of `uri` and the id of the experiment, made if it is not there yet."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    with _opening(uri):
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name(experiment_name())
        if experiment is None:
            # With the embedded store, artifacts beside it in the project: a relative default would follow the working
            # directory. A server chooses its own artifact store.
            where = (project_root() / "mlartifacts").as_uri() if uri.startswith("sqlite:") else None
            try:
                return client, client.create_experiment(experiment_name(), artifact_location=where, tags=dict([KIND]))
            except MlflowException:  # made meanwhile by another client
                experiment = client.get_experiment_by_name(experiment_name())
    if experiment.tags.get(KIND[0]) != KIND[1]:
        client.set_experiment_tag(experiment.experiment_id, *KIND)
    return client, experiment.experiment_id


@contextmanager
def _opening(uri: str) -> Iterator[None]:
    """An embedded store is made (its schema migrated) by its first client: one at a time, the others wait. The
    lock lies beside the store, in the project; a link there is refused, never followed."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    lock = Path(uri.removeprefix("sqlite:///")).with_suffix(".opening")
    try:
        handle = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as error:
        raise ToksError(f"cannot open {lock} ({os.strerror(error.errno)}): remove it if it is a link") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)
