"""The MLflow UI on the project's store, opened on the toksel experiment's runs.

    python -m toksel.ui [--port 5000]                     (make ui)
    python -m toksel.ui --check [--screenshot ui.png]     (make check-ui)

MLflow 3 shows an experiment on its GenAI overview (traces, an assistant) unless the page asks for the model
training view: the stages tag the experiment as one of model training (mlflow.experimentKind), and this
command prints the address of its runs table in that view (`workflowType=machine_learning`). It serves the
store of $MLFLOW_TRACKING_URI, else the embedded mlflow.db; a tracking server serves its own UI, so for one its
address is printed and nothing is started. --check starts the server on a free port, opens the address in
headless Chromium and passes when the runs table shows the experiment's runs and a gradient-flow run's metric
chart draws its curve (exit 0; 1 when either does not; 2 when there is no run to show or no Chromium).
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
from toksel.runtime.experiment import experiment_name
from toksel.runtime.paths import tracking_uri

RUNS_VIEW = "#/experiments/{experiment}?workflowType=machine_learning"
# MLflow's page of one metric's chart (its route in the UI's code: getMetricPageRoute)
CHART_VIEW = ('#/metric?runs=["{run}"]&metric="{metric}"&experiments=["{experiment}"]&plot_metric_keys=["{metric}"]'
              "&plot_layout={{}}&x_axis=step&y_axis_scale=linear&line_smoothness=1&show_point=false")
CHARTED = ("gradient_flow", "p_norm")  # a stage whose runs have a per-step curve (every dataset), and the curve
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


def charted_run(uri: str, experiment: str) -> str | None:
    """A run of the CHARTED stage whose curve has more than one step, if the store holds one."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    for run in client.search_runs([experiment], f"tags.stage = '{CHARTED[0]}'", max_results=5):
        if len(client.get_metric_history(run.info.run_id, CHARTED[1])) > 1:
            return run.info.run_id
    return None


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


def _look(browser: str, address: str, screenshot: Path | None) -> str:
    """The page's DOM once loaded, and its screenshot if asked."""
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        headless(browser, f"--screenshot={screenshot.resolve()}", "--window-size=1400,900", address)
    return headless(browser, "--dump-dom", address).stdout


def check(uri: str, screenshot: Path | None) -> bool:
    """Whether, in headless Chromium, the runs view of the toksel experiment shows the runs table with a run, and
    the metric page of a gradient-flow run draws its curve (plotly's line in the chart's SVG)."""
    experiment, run_name = experiment_and_run(uri)
    charted = charted_run(uri, experiment)
    browser = find_chromium()
    port = free_port()
    server = start_server(uri, port)
    base = f"http://127.0.0.1:{port}/"
    try:
        page = _look(browser, base + RUNS_VIEW.format(experiment=experiment), screenshot)
        chart = "" if charted is None else _look(
            browser, base + CHART_VIEW.format(run=charted, metric=CHARTED[1], experiment=experiment),
            None if screenshot is None else screenshot.with_name(f"{screenshot.stem}-chart{screenshot.suffix}"))
    finally:
        server.terminate()
        server.wait(timeout=30)
    shown = "Run Name" in page and run_name in page and "Detect Issues" not in page
    drawn = "js-line" in chart and CHARTED[1] in chart
    print(f"ui: {base}{RUNS_VIEW.format(experiment=experiment)}: "
          f"{'the runs table, with' if shown else 'no runs table, or without'} the run {run_name!r}; "
          + (f"{CHARTED[1]} of a {CHARTED[0]} run: {'drawn' if drawn else 'not drawn'}" if charted else
             f"no {CHARTED[0]} run with a curve to chart"))
    return shown and (drawn or charted is None)


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
