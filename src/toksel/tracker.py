"""The MLflow store, opened once for a whole pipeline: a companion process holds it and the stages call it.

Importing mlflow and opening a store (the sqlite schema check parses every migration script) costs about 2 s,
more than the work of most stages. The first stage that needs a store starts a companion,
`python -m toksel.tracker serve <uri>`, which opens it once and answers calls over a Unix socket named after
the store; it exits after $TOKSEL_TRACKER_IDLE seconds (default 600) without a call, or on
`python -m toksel.tracker stop [<uri>]`. A stage that cannot reach a companion (TOKSEL_TRACKER=0, no Unix
sockets, one that does not start within 30 s or goes away mid-stage) opens the store itself: the same calls
on the same store, only slower.

`Store` is every call a stage makes, in plain types (str, numbers, lists, dicts), so that a call is one JSON
line each way.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from toksel.paths import tracking_uri

PROTOCOL = 2  # part of the socket's name: a changed protocol gets a new companion
START_TIMEOUT = 30.0  # seconds a stage waits for a companion it started


class Store:
    """The calls a stage makes on an MLflow store, opened in this process."""

    CALLS = ("experiment_id", "search_runs", "run_info", "create_run", "log_batch", "log_artifact", "set_tag",
             "set_status", "set_terminated", "log_input")
    # MLflow 3 opens an experiment of this kind on its runs (model training), not on its GenAI overview.
    KIND = ("mlflow.experimentKind", "custom_model_development")

    def __init__(self, uri: str) -> None:
        from mlflow import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.WARNING)  # keep the store's INFO chatter out of stage output
        self.client = MlflowClient(uri)

    def experiment_id(self, name: str, artifact_location: str | None) -> str:
        from mlflow.exceptions import MlflowException

        experiment = self.client.get_experiment_by_name(name)
        if experiment is None:
            try:
                return self.client.create_experiment(name, artifact_location=artifact_location,
                                                     tags=dict([self.KIND]))
            except MlflowException:  # created meanwhile by a concurrent stage
                experiment = self.client.get_experiment_by_name(name)
        if experiment.tags.get(self.KIND[0]) != self.KIND[1]:  # made before the stages tagged it
            self.client.set_experiment_tag(experiment.experiment_id, *self.KIND)
        return experiment.experiment_id

    def search_runs(self, experiment_id: str, filter_string: str, max_results: int) -> list[dict[str, Any]]:
        """run_id, status and tags of each run found."""
        return [{"run_id": run.info.run_id, "status": run.info.status, "tags": dict(run.data.tags)}
                for run in self.client.search_runs([experiment_id], filter_string=filter_string,
                                                   max_results=max_results)]

    def run_info(self, run_id: str) -> dict[str, Any]:
        """status, experiment_id and tags of a run."""
        run = self.client.get_run(run_id)
        return {"status": run.info.status, "experiment_id": run.info.experiment_id, "tags": dict(run.data.tags)}

    def create_run(self, experiment_id: str, run_name: str, tags: dict[str, str]) -> str:
        return self.client.create_run(experiment_id, run_name=run_name, tags=tags).info.run_id

    def log_batch(self, run_id: str, metrics: list[list[Any]] = (), params: list[list[str]] = ()) -> None:
        """metrics: [name, value, timestamp in ms, step]; params: [key, value]."""
        from mlflow.entities import Metric, Param

        self.client.log_batch(run_id, metrics=[Metric(name, float(value), int(stamp), int(step))
                                               for name, value, stamp, step in metrics],
                              params=[Param(key, value) for key, value in params])

    def log_artifact(self, run_id: str, path: str, artifact_path: str | None = None) -> None:
        self.client.log_artifact(run_id, path, artifact_path)

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self.client.set_tag(run_id, key, value)

    def set_status(self, run_id: str, status: str) -> None:
        self.client.update_run(run_id, status=status)

    def set_terminated(self, run_id: str, status: str) -> None:
        self.client.set_terminated(run_id, status)

    def log_input(self, run_id: str, name: str, digest: str, source: str, context: str) -> None:
        """A dataset the run reads: the UI's Dataset column and the run's inputs."""
        from mlflow.entities import Dataset, DatasetInput, InputTag

        dataset = Dataset(name=name, digest=digest, source_type="toksel", source=source)
        self.client.log_inputs(run_id, datasets=[DatasetInput(dataset, tags=[InputTag("mlflow.data.context",
                                                                                      context)])])


class TrackerError(RuntimeError):
    """A call the companion's store refused (the message is the store's)."""


class StoreCalls:
    """Store's calls, each passed to `_call(name, args)`: how a stand-in for a Store answers them its own way."""

    def __getattr__(self, name: str) -> Any:
        if name not in Store.CALLS:
            raise AttributeError(name)
        return lambda *args: self._call(name, list(args))

    def _call(self, name: str, args: list[Any]) -> Any:
        raise NotImplementedError


class RemoteStore(StoreCalls):
    """The same calls as Store, answered by the companion; on its loss, by a Store opened here."""

    def __init__(self, uri: str, connection: socket.socket) -> None:
        self.uri, self.connection, self.stream = uri, connection, connection.makefile("rwb")
        self.local: Store | None = None

    def _call(self, name: str, args: list[Any]) -> Any:
        if name == "log_artifact":  # the companion's working directory is not ours
            args[1] = str(Path(args[1]).resolve())
        if self.local is None:
            try:
                self.stream.write(json.dumps({"call": name, "args": args}).encode() + b"\n")
                self.stream.flush()
                answer = self.stream.readline()
            except OSError:
                answer = b""
            if answer:
                reply = json.loads(answer)
                if "error" in reply:
                    raise TrackerError(reply["error"])
                return reply["result"]
            print(f"tracker: the MLflow companion of {self.uri} went away: this stage opens the store itself",
                  file=sys.stderr)
            self.local = Store(self.uri)
        return getattr(self.local, name)(*args)


def socket_path(uri: str) -> Path:
    """Where the companion of `uri` listens: short (a Unix socket's path is limited to about 100 bytes). The login
    it was started with is part of the name: a stage never logs as someone else."""
    login = f"{os.environ.get('MLFLOW_TRACKING_USERNAME')} {os.environ.get('MLFLOW_TRACKING_PASSWORD')}"
    digest = hashlib.sha256(f"{PROTOCOL} {uri} {login}".encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"toksel-{os.getuid()}" / f"tracker-{digest}.sock"


def _connect(path: Path) -> socket.socket | None:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(path))
        return connection
    except OSError:
        connection.close()
        return None


def open_store(uri: str) -> Store | RemoteStore:
    """The store at `uri`, through its companion (started if there is none) unless TOKSEL_TRACKER=0."""
    if os.environ.get("TOKSEL_TRACKER", "1") in ("0", "false", "") or not hasattr(socket, "AF_UNIX"):
        return Store(uri)
    path = socket_path(uri)
    connection = _connect(path)
    if connection is None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with (path.with_suffix(".log")).open("ab") as log:  # the companion's own output, for when it fails
            companion = subprocess.Popen([sys.executable, "-m", "toksel.tracker", "serve", uri],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        # Wait for its socket, unless it has died (a damaged store): then another one may be serving already.
        while connection is None and time.monotonic() < deadline and companion.poll() is None:
            time.sleep(0.05)
            connection = _connect(path)
        connection = connection or _connect(path)
    if connection is None:
        print(f"tracker: no MLflow companion answered at {path} (its log: {path.with_suffix('.log')}): this stage "
              "opens the store itself", file=sys.stderr)
        return Store(uri)
    return RemoteStore(uri, connection)


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        server: _Companion = self.server  # type: ignore[assignment]
        for line in self.rfile:
            request = json.loads(line)
            if request["call"] == "stop":
                self.wfile.write(b'{"result": null}\n')
                self.wfile.flush()
                threading.Thread(target=server.shutdown, daemon=True).start()
                return
            with server.lock:
                server.last_call = time.monotonic()
                try:
                    if request["call"] not in Store.CALLS:
                        raise TrackerError(f"unknown call {request['call']!r}")
                    reply = {"result": getattr(server.store, request["call"])(*request["args"])}
                except Exception as error:  # noqa: BLE001 (the stage raises it: a refused call is the stage's error)
                    reply = {"error": f"{type(error).__name__}: {error}"}
                server.last_call = time.monotonic()
            self.wfile.write(json.dumps(reply).encode() + b"\n")
            self.wfile.flush()


class _Companion(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: Path, store: Store) -> None:
        super().__init__(str(path), _Handler)
        self.store, self.lock, self.last_call = store, threading.Lock(), time.monotonic()


def serve(uri: str, idle: float) -> int:
    """Open the store, listen on its socket until `idle` seconds pass without a call; 0 when another companion
    already listens there."""
    path = socket_path(uri)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with path.with_suffix(".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one companion per store: check and bind under the lock
        connection = _connect(path)
        if connection is not None:
            connection.close()
            return 0
        path.unlink(missing_ok=True)  # a socket left by a companion that was killed
        store = Store(uri)  # opened before the socket exists: a stage that connects finds the store ready
        server = _Companion(path, store)
    watcher = threading.Thread(target=_stop_when_idle, args=(server, idle), daemon=True)
    watcher.start()
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        path.unlink(missing_ok=True)
    return 0


def _stop_when_idle(server: _Companion, idle: float) -> None:
    while True:
        time.sleep(min(idle, 1.0))
        with server.lock:
            if time.monotonic() - server.last_call > idle:
                break
    server.shutdown()


def stop(uri: str) -> bool:
    """Ask the companion of `uri` to stop at once; False when none listens."""
    path = socket_path(uri)
    connection = _connect(path)
    if connection is None:
        return False
    with connection, connection.makefile("rwb") as stream:
        stream.write(json.dumps({"call": "stop", "args": []}).encode() + b"\n")
        stream.flush()
        stream.readline()
    return True


def main(argv: list[str] | None = None) -> int:

    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["serve"] and len(args) == 2:
        return serve(args[1], float(os.environ.get("TOKSEL_TRACKER_IDLE", "600")))
    if args[:1] == ["stop"] and len(args) <= 2:
        uri = args[1] if len(args) == 2 else tracking_uri()
        print(f"tracker: {'stopped the companion of' if stop(uri) else 'no companion for'} {uri}")
        return 0
    print("usage: python -m toksel.tracker serve <uri> | stop [<uri>]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
