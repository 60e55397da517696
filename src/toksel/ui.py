"""The MLflow UI on the project's store: `python -m toksel.ui [--port 5000]` (make ui).

`mlflow server` on $MLFLOW_TRACKING_URI, else the embedded mlflow.db, after two checks: the store exists (opening a
missing sqlite file would create an empty one wherever the command runs) and nothing else listens on the port
(its answers would pass for the UI's). It prints the address of the toksel experiment's runs table in MLflow 3's
model-training view (`workflowType=machine_learning`; the plain experiment page opens on the GenAI overview). A
tracking server serves its own UI: for one, the address is printed and nothing is started. Bad input: one line,
exit 2.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from toksel.runtime.errors import ToksError
from toksel.runtime.experiment import experiment_name, quiet_mlflow
from toksel.runtime.paths import tracking_uri

RUNS_VIEW = "#/experiments/{experiment}?workflowType=machine_learning"


def runs_address(uri: str, base: str) -> str:
    """The address of the toksel experiment's runs table, once the store holds a pipeline's run."""
    quiet_mlflow()
    from mlflow import MlflowClient

    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        raise ToksError(f"no MLflow store at {uri.removeprefix('sqlite:///')}: run from the project's folder, after "
                        "the pipeline (dvc repro), or set MLFLOW_TRACKING_URI")
    experiment = MlflowClient(uri).get_experiment_by_name(experiment_name())
    if experiment is None:
        raise ToksError(f"the store {uri} holds no run of the experiment {experiment_name()!r}: run the pipeline "
                        "first (dvc repro)")
    return f"{base.rstrip('/')}/{RUNS_VIEW.format(experiment=experiment.experiment_id)}"


def require_free(port: int) -> None:
    """Nothing may listen on `port` already: its answers would pass for our server's."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            raise ToksError(f"port {port} is in use by another program: choose another with --port") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toksel.ui", description=__doc__.strip().splitlines()[0])
    parser.add_argument("--port", type=int, default=5000, help="the UI's port (default 5000)")
    args = parser.parse_args(argv)
    uri = tracking_uri()
    try:
        if uri.startswith(("http://", "https://")):
            print(f"ui: the tracking server serves the UI: {runs_address(uri, uri)}")
            return 0
        address = runs_address(uri, f"http://127.0.0.1:{args.port}")
        require_free(args.port)
    except ToksError as error:
        print(f"ui: {error}", file=sys.stderr)
        return 2
    print(f"ui: the runs of {experiment_name()}: {address} (Ctrl-C stops the server)", flush=True)
    environment = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--workers", "1", "--backend-store-uri", uri,
                               "--host", "127.0.0.1", "--port", str(args.port)], env=environment)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))  # a kill stops the server too
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
