"""The MLflow UI on the project's store: `python -m toksel.ui [--port 5000]` (make ui).

It serves $MLFLOW_TRACKING_URI, else the embedded mlflow.db, and prints the address of the toksel experiment's runs
table (MLflow 3's model-training view; the plain experiment page opens on the GenAI overview). A tracking server
serves its own UI: its address is printed (without the password the address may hold) and nothing is started. A
missing store, one that fails (a login refused, a damaged file) or a busy port: one line, exit 2.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

from toksel.runtime.errors import ToksError
from toksel.runtime.paths import tracking_uri
from toksel.tracking.experiment import (
    bounded_waits,
    experiment_name,
    masked_uri,
    quiet_mlflow,
    sqlite_file,
    store_failure,
    without_login,
)
from toksel.tracking.saved_views import PIPELINES_VIEW, TAG_PREFIX


def runs_address(uri: str, base: str) -> str:
    """The address of the toksel experiment's runs table, opened on the pipelines' view where publish saved one."""
    quiet_mlflow()
    bounded_waits()
    from mlflow import MlflowClient

    # Opening a missing sqlite file would create an empty one wherever the command runs.
    store = sqlite_file(uri)
    if store is not None and not store.exists():
        raise ToksError(f"no MLflow store at {store}: run from the project's folder, after the pipeline (dvc repro), "
                        "or set MLFLOW_TRACKING_URI")
    try:
        experiment = MlflowClient(uri).get_experiment_by_name(experiment_name())
    except Exception as error:  # noqa: BLE001 (whatever the store raises: one line)
        raise ToksError(store_failure(uri, error)) from None
    if experiment is None:
        raise ToksError(f"the store {masked_uri(uri)} holds no run of the experiment {experiment_name()!r}: run the "
                        "pipeline first (dvc repro)")
    address = f"{base.rstrip('/')}/#/experiments/{experiment.experiment_id}"
    if TAG_PREFIX + PIPELINES_VIEW in experiment.tags:  # the parents compared (tracking/saved_views.py)
        return f"{address}/runs?viewStateShareKey={PIPELINES_VIEW}"
    return f"{address}?workflowType=machine_learning"


def require_free(port: int) -> None:
    """A port, and nothing listens on it already: its answers would pass for our server's."""
    if not 0 < port < 65536:
        raise ToksError(f"--port {port} is not a port (1 to 65535)")
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            raise ToksError(f"port {port} is in use by another program: choose another with --port")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toksel.ui", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=5000, help="the UI's port (default 5000)")
    args = parser.parse_args(argv)
    uri = tracking_uri()
    try:
        if uri.startswith(("http://", "https://")):
            print(f"ui: the tracking server serves the UI: {runs_address(uri, without_login(uri))}")
            return 0
        address = runs_address(uri, f"http://127.0.0.1:{args.port}")
        require_free(args.port)
    except ToksError as error:
        print(f"ui: {error}", file=sys.stderr)
        return 2
    print(f"ui: the runs of {experiment_name()}: {address} (Ctrl-C stops the server)", flush=True)
    os.environ["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    # The store's address by the server's own variable, not its command line, which any user's `ps` shows.
    os.environ["MLFLOW_BACKEND_STORE_URI"] = uri
    # This process becomes the server: a Ctrl-C or a kill reaches it directly.
    os.execv(sys.executable, [sys.executable, "-m", "mlflow", "server", "--workers", "1", "--host", "127.0.0.1",
                              "--port", str(args.port)])


if __name__ == "__main__":
    sys.exit(main())
