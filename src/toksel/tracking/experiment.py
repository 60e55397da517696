"""The MLflow experiment the runs go to, a client on its store, the lock that lets one process of this host at a
time change the store, the store's address as it may be shown (no password) and its failures in one line: what
`publish` and `make ui` share."""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from toksel.runtime.errors import ToksError
from toksel.runtime.paths import project_root

EXPERIMENT = "toksel"
KIND = ("mlflow.experimentKind", "custom_model_development")  # MLflow 3 opens it on its runs, not GenAI
LOCK_WAIT = 600.0  # seconds: a publish of the full pipeline takes about a minute; a lock held longer is stuck
SECRET_WORDS = ("password", "secret", "token")  # a query parameter that holds a login (libpq's password=...)
HIDDEN = "***"
LOGIN_VARIABLES = "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"


def experiment_name() -> str:
    return os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT


def quiet_mlflow() -> None:
    """No telemetry (as DVC's analytics are off) and MLflow's chatter at warnings only. Before mlflow is imported."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # read as mlflow is imported (a new store's notices)
    # A server's client prints two lines per run it ends ("View run ... at: <address>"), the address with any
    # login in it, and asks the server for the run again to print them: publish says what it did itself.
    os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    logging.getLogger("mlflow").setLevel(logging.WARNING)


def bounded_waits() -> None:
    """A server that does not answer is a failure within a minute or two, not MLflow's seven retries with growing
    backoff: MLflow's own settings, where the user set none."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")


def _userinfo(uri: str) -> str:
    """The userinfo of `uri` with its `@`, else "": everything between `//` and the authority's last `@`. A password
    may hold an unescaped `/`, `@` or `:`: urlsplit would take such a `/` for the start of the path and leave the
    rest of the password in view."""
    _, slashes, rest = uri.partition("://")
    userinfo, at, _ = rest.rpartition("@")
    return userinfo + at if slashes and at and not rest.startswith("/") else ""  # sqlite:////a@b has no authority


def _login_parts(uri: str) -> list[tuple[str, str]]:
    """The parts of `uri` that hold a login, each with what is shown instead: its userinfo (a user's name before
    `:` kept; a lone one may be a token, all hidden) and its query's parameters named like a password."""
    userinfo = _userinfo(uri)
    parts = []
    if userinfo:
        user, colon, _ = userinfo.partition(":")
        parts.append((userinfo, f"{user}:{HIDDEN}@" if colon and user else f"{HIDDEN}@"))
    address = uri.partition(userinfo)[2] if userinfo else uri
    for field in address.partition("?")[2].partition("#")[0].split("&"):
        key, equals, value = field.partition("=")
        if equals and value and any(word in unquote(key).lower() for word in SECRET_WORDS):
            parts.append((field, f"{key}={HIDDEN}"))
    return parts


def masked(text: str, uri: str) -> str:
    """`text` (the address `uri` itself, a message that quotes it) with the login in `uri` hidden: what may be
    shown on a screen or in a log."""
    for secret, shown in _login_parts(uri):
        text = text.replace(secret, shown)
    return text


def masked_uri(uri: str) -> str:
    """The address `uri` as it may be shown: its login hidden."""
    return masked(uri, uri)


def without_login(uri: str) -> str:
    """The address `uri` for a browser, which asks for the login itself: no userinfo, other secrets hidden."""
    userinfo = _userinfo(uri)
    return masked(uri.replace(userinfo, "", 1) if userinfo else uri, uri)


def sqlite_file(uri: str) -> Path | None:
    """The file of an embedded store's `sqlite:///<path>` (relative to the working directory, as SQLAlchemy reads
    it); None for any other store."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri.removeprefix("sqlite:///").partition("?")[0])


def _causes(error: BaseException) -> Iterator[BaseException]:
    """The error and those it was raised from or during."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def store_failure(uri: str, error: Exception) -> str:
    """What went wrong with the store of `uri`, in one line without its password, with the fix where it is known
    (a login the server refused, an address no client can use, an embedded store's file that is no database)."""
    from mlflow.exceptions import InvalidUrlException, MlflowException

    reason = masked((str(error).strip().splitlines() or [type(error).__name__])[0][:200], uri)
    line = f"the MLflow store {masked_uri(uri)} failed ({type(error).__name__}: {reason})"
    if isinstance(error, MlflowException) and error.get_http_status_code() in (401, 403):  # a login refused
        return f"{line} - the server asks who you are: set {LOGIN_VARIABLES}"
    if isinstance(error, InvalidUrlException):
        return (f"{line} - the address is no URL a client can use: give the login in {LOGIN_VARIABLES}, not in "
                "the address (or percent-encode its / @ : characters)")
    if any(type(cause) is sqlite3.DatabaseError for cause in _causes(error)):  # SQLite's damaged or foreign file
        return (f"{line} - {sqlite_file(uri)} is no SQLite database (damaged, or another file): move it aside; "
                "`python -m toksel.publish` rebuilds the view from the run records under runs/")
    return line


@contextmanager
def store_lock(uri: str, wait: float | None = None) -> Iterator[None]:
    """The store to ourselves among this host's processes (the lock beside an embedded store, or in the project);
    a lock held past `wait` is one line, not a hang."""
    from filelock import FileLock, Timeout

    wait = LOCK_WAIT if wait is None else wait
    store = sqlite_file(uri)
    path = store.with_suffix(".lock") if store is not None else project_root() / "mlflow-server.lock"
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
        # Beside an embedded store, the project's or another (a relative default would follow the working
        # directory); a server chooses its own.
        store = sqlite_file(uri)
        where = (store.resolve().parent / "mlartifacts").as_uri() if store is not None else None
        return client, client.create_experiment(experiment_name(), artifact_location=where, tags=dict([KIND]))
    if experiment.lifecycle_stage == "deleted":
        client.restore_experiment(experiment.experiment_id)
    if experiment.tags.get(KIND[0]) != KIND[1]:
        client.set_experiment_tag(experiment.experiment_id, *KIND)
    return client, experiment.experiment_id
