"""The MLflow UI on the project's store, opened on the toksel experiment's runs.

    python -m toksel.ui [--port 5000]                     (make ui)
    python -m toksel.ui --check [--screenshot ui.png]     (make check-ui)

MLflow 3 shows an experiment on its GenAI overview (traces, an assistant) unless the page asks for the model
training view: the stages tag the experiment as one of model training (mlflow.experimentKind), and this
command prints the address of its runs table in that view (`workflowType=machine_learning`). It serves the
store of $MLFLOW_TRACKING_URI, else the embedded mlflow.db; a tracking server serves its own UI, so for one its
address is printed and nothing is started. --check starts the server on a free port, opens the address in
headless Chromium and passes when the runs table shows the experiment's runs (exit 0; 1 when it does not; 2
when there is no run to show or no Chromium).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from toksel.report.render_check import find_chromium, headless
from toksel.runtime.errors import ToksError
from toksel.runtime.paths import tracking_uri
from toksel.tracking.view import experiment_name

RUNS_VIEW = "#/experiments/{experiment}?workflowType=machine_learning"
START_SECONDS = 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def experiment_and_run(uri: str) -> tuple[str, str]:
    """The toksel experiment's id and the name of one of its pipeline runs."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(experiment_name())
    # A pipeline's run: the table lists those, the stages' runs folded under them.
    runs = [] if experiment is None else client.search_runs([experiment.experiment_id], "tags.stage = 'pipeline'",
                                                            max_results=1)
    if not runs:
        raise ToksError(f"the store {uri} holds no run of the experiment {experiment_name()!r}: run the pipeline "
                        "first (dvc repro)")
    return experiment.experiment_id, runs[0].info.run_name


def require_store(uri: str) -> None:
    """An embedded store must exist: opening a missing sqlite file would create an empty store wherever the
    command runs."""
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        raise ToksError(f"no MLflow store at {uri.removeprefix('sqlite:///')}: run from the project's folder, after "
                        "the pipeline (dvc repro), or set MLFLOW_TRACKING_URI")


def require_free(port: int) -> None:
    """Nothing may listen on `port` already: its answers would pass for our server's."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            raise ToksError(f"port {port} is in use by another program: choose another with --port") from None


def start_server(uri: str, port: int) -> subprocess.Popen:
    """`mlflow server` on the store, one worker, jobs off; returns once it answers /health."""
    require_free(port)
    environment = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--workers", "1", "--backend-store-uri", uri,
                               "--host", "127.0.0.1", "--port", str(port)], env=environment,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            last = (server.stderr.read().strip().splitlines() or [""])[-1]
            raise ToksError(f"the MLflow server did not start: {last}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                if server.poll() is None:  # the answer came from our server, still running
                    return server
        except OSError:
            time.sleep(0.5)
    server.terminate()
    raise ToksError(f"the MLflow server did not answer within {START_SECONDS} s")


def check(uri: str, screenshot: Path | None) -> bool:
    """Whether the runs view of the toksel experiment, in headless Chromium, shows the runs table and a run."""
    experiment, run_name = experiment_and_run(uri)
    browser = find_chromium()
    port = free_port()
    server = start_server(uri, port)
    try:
        address = f"http://127.0.0.1:{port}/" + RUNS_VIEW.format(experiment=experiment)
        page = headless(browser, "--dump-dom", address).stdout
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            headless(browser, f"--screenshot={screenshot.resolve()}", "--window-size=1400,900", address)
    finally:
        server.terminate()
        server.wait(timeout=30)
    shown = "Run Name" in page and run_name in page and "Detect Issues" not in page
    print(f"ui: {address}: {'the runs table, with' if shown else 'no runs table, or without'} the run {run_name!r}")
    return shown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toksel.ui", description=__doc__.strip().splitlines()[0])
    parser.add_argument("--port", type=int, default=5000, help="the UI's port (default 5000)")
    parser.add_argument("--check", action="store_true", help="open the runs view in headless Chromium, then stop")
    parser.add_argument("--screenshot", type=Path, help="with --check: save a screenshot of the page (PNG)")
    args = parser.parse_args(argv)
    uri = tracking_uri()
    try:
        require_store(uri)
        if args.check:
            return 0 if check(uri, args.screenshot) else 1
        experiment, _ = experiment_and_run(uri)
        if uri.startswith(("http://", "https://")):
            print(f"ui: the tracking server serves the UI: {uri.rstrip('/')}/{RUNS_VIEW.format(experiment=experiment)}")
            return 0
        server = start_server(uri, args.port)
        print(f"ui: the runs of {experiment_name()}: http://127.0.0.1:{args.port}/"
              f"{RUNS_VIEW.format(experiment=experiment)} (Ctrl-C stops the server)", flush=True)
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))  # a kill stops the server too
        try:
            server.wait()
        except KeyboardInterrupt:
            pass
        finally:
            server.terminate()
            server.wait(timeout=30)
    except ToksError as error:
        print(f"ui: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
