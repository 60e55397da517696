"""Independent units through joblib and Dask (runtime/fanout.py): embedded by default, a cluster one setting away,
the same numbers either way."""

import json
import math
import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import psutil
import pytest
from threadpoolctl import threadpool_limits

from pipelines import one_step
from tests.helpers import CHECKOUT_PATH, TIMING_METRICS, TINY, TINY_TRAIN, run_stage_process, start_stage
from toksel.params import ComputeConfig
from toksel.runtime import fanout
from toksel.runtime.errors import ToksError
from toksel.runtime.known_warnings import silence_known_warnings

HERE = ComputeConfig(address="", workers=2)


def draw(seed: int) -> float:
    """A unit: a seeded sum through BLAS."""
    values = np.random.default_rng(seed).normal(size=(64, 64))
    return float((values @ values.T).sum())


def test_units_come_back_in_their_order_and_alike_on_threads_and_processes():
    progressed = []
    threads = fanout.map_units(draw, range(6), HERE, "threads", lambda: progressed.append(1))
    processes = fanout.map_units(draw, range(6), HERE, "processes")
    assert threads == processes == [draw(seed) for seed in range(6)] and len(progressed) == 6
    assert fanout.map_units(draw, [], HERE) == []
    with pytest.raises(ValueError, match="kind 'gpu' is not one of threads, processes"):
        fanout.map_units(draw, range(2), HERE, "gpu")


def test_a_scheduler_that_does_not_answer_is_one_line(monkeypatch):
    monkeypatch.setattr(fanout, "CONNECT_SECONDS", 1)
    monkeypatch.setenv(fanout.ADDRESS_ENV, "tcp://127.0.0.1:9")  # the discard port: nothing listens
    with pytest.raises(ToksError, match=r"compute.address tcp://127.0.0.1:9: no Dask scheduler answers there"):
        fanout.map_units(draw, range(2), HERE)


def _numbers(path) -> dict[str, float]:
    def walk(node, prefix=""):
        for key, value in node.items() if isinstance(node, dict) else enumerate(node):
            if isinstance(value, dict | list):
                yield from walk(value, f"{prefix}{key}.")
            elif key not in TIMING_METRICS:
                yield f"{prefix}{key}", value
    return dict(walk(json.loads(path.read_text())))


def _same(first: dict, second: dict) -> bool:
    """Equal bit for bit (NaN, a cell not computed, equals NaN)."""
    return first.keys() == second.keys() and all(
        a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
        for a, b in ((first[key], second[key]) for key in first))


@pytest.mark.slow  # 30 to 80 s: `make test-slow`
def test_a_local_cluster_of_two_worker_processes_gives_the_embedded_numbers(prepared, monkeypatch):
    """The phase grid's cells (threads here), the calibration's replicates and the seeds of two seeded stages
    (processes here), embedded and then on a real Dask cluster on loopback, two worker processes with one thread
    each."""
    from distributed import LocalCluster

    from pipelines import calibrate, one_step, phase, prepare, train

    grid = [*TINY, "model.d=256", "phase.eta0=[20,40,80]", "calibration.max_replicates=2",
            "calibration.max_costly_replicates=2", "train.datasets=[synthetic]", "ablation.datasets=[synthetic]",
            "ablation.multiclass=synthetic", "d_sweep.datasets=[synthetic]"]
    seeded = [*TINY, *TINY_TRAIN, "base.seeds=[0,1]"]
    assert prepare.main(seeded) == 0
    results = prepared / "results"
    outputs = {"phase": results / "phase" / "d256" / "metrics.json",
               "calibrate": results / "calibration" / "calibration.json",
               "one_step": results / "one_step" / "synthetic.json", "train": results / "train" / "synthetic.json"}

    def run() -> dict[str, dict]:
        assert phase.main(grid) == 0 and calibrate.main(grid) == 0
        assert one_step.main(seeded) == 0 and train.main(seeded) == 0
        return {name: _numbers(path) for name, path in outputs.items()}

    # This machine's BLAS on two threads, as outside the tests: the units still run on one, as the workers do.
    with threadpool_limits(limits=2):
        embedded = run()
    # A stage in a process of its own, as DVC runs it: the same numbers.
    assert run_stage_process("one_step", seeded, prepared).returncode == 0
    assert _same(_numbers(outputs["one_step"]), embedded["one_step"])
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster:
        monkeypatch.setenv(fanout.ADDRESS_ENV, cluster.scheduler_address)
        on_cluster = run()
    assert all(embedded[name] for name in outputs)
    assert {"seed0", "seed1"} <= {key.split(".")[1] for key in embedded["train"]}  # both seeds, each arm's
    assert all(_same(embedded[name], on_cluster[name]) for name in outputs)


def _workers(pid: int) -> list[psutil.Process]:
    """The stage's loky worker processes."""
    return [child for child in psutil.Process(pid).children(recursive=True) if "--process-name" in child.cmdline()]


@pytest.mark.parametrize("ctrl_c", [pytest.param(False, marks=pytest.mark.slow), True],  # 14 s: make test-slow
                         ids=["sigterm once its seeds train", "ctrl-c as its workers start"])
def test_a_stopped_stage_stops_the_seeds_it_fanned_out(prepared, ctrl_c):
    """SIGTERM to a stage whose two seeds train in worker processes, or Ctrl-C, which the terminal sends to every
    process of its group, the workers too, here while they import the stage's modules: it ends in one line, and so
    do they, without a traceback of theirs."""
    from pipelines import prepare

    seeded = [*TINY, *TINY_TRAIN, "base.seeds=[0,1]", "train.max_epochs=200", "train.patience=200"]
    assert prepare.main(seeded) == 0
    process = start_stage("train", seeded, prepared, own_group=True)

    def ready() -> bool:
        if ctrl_c:  # both into their imports: past Python's start (a signal before it ends a process unseen)
            return sum(sum(worker.cpu_times()[:2]) > 0.1 for worker in _workers(process.pid)) == 2
        return len(list((prepared / "checkpoints").rglob("last.ckpt"))) == 2  # both seeds into their fits

    deadline = time.monotonic() + 120
    while not ready():
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        time.sleep(0.01)
    workers = _workers(process.pid)
    if ctrl_c:
        os.killpg(process.pid, signal.SIGINT)
    else:
        process.send_signal(signal.SIGTERM)
    signum = signal.SIGINT if ctrl_c else signal.SIGTERM
    assert process.wait(timeout=30) == 128 + signum
    assert process.stderr.read().strip().splitlines() == [f"train: stopped by {signum.name}: it wrote nothing"]
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive
    assert not (prepared / "results" / "train").exists()


def test_a_unit_carries_no_login(monkeypatch):
    """What a unit pickles: its function, its unit, the folder and the settings that steer the computation; a
    password or a token in the submitting environment stays there."""
    import functools
    import pickle

    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "hunter2-password")
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    monkeypatch.setenv("TOKSEL_DATA_MIRROR", "/mirror")
    place = fanout.Place.here()
    carried = dict(place.environment)
    assert carried.get("TOKSEL_DATA_MIRROR") == "/mirror"
    unit = pickle.dumps(functools.partial(fanout.run_unit, draw, place, True))
    assert b"hunter2-password" not in unit and b"hf_secret_token" not in unit


def test_a_listener_that_is_not_dask_is_one_line_in_seconds(monkeypatch):
    """A web server at compute.address: it accepts the connection and never shakes hands as Dask does."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(fanout, "CONNECT_SECONDS", 1)
    monkeypatch.setenv(fanout.ADDRESS_ENV, f"tcp://127.0.0.1:{server.server_address[1]}")
    started = time.monotonic()
    try:
        with pytest.raises(ToksError, match="no Dask scheduler answers there"):
            fanout.map_units(draw, range(2), HERE)
    finally:
        server.shutdown()
    assert time.monotonic() - started < 15


@pytest.fixture
def silent_port():
    """A port that accepts connections and never says a word."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield listener.getsockname()[1]


def test_a_stage_at_a_silent_listener_ends_in_one_line_and_exits(project, silent_port):
    """The stage's own process, at a port that never shakes hands: one line, exit 2, and the process ends (a
    connection left waiting in a thread held it at its exit for good)."""
    script = ("import sys; from toksel.runtime import fanout; from pipelines import one_step; "
              "fanout.CONNECT_SECONDS = 1; sys.exit(one_step.main(sys.argv[1:]))")
    ended = subprocess.run([sys.executable, "-c", script, *TINY, "dataset=synthetic", "base.seeds=[0,1]"],
                           cwd=project, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": CHECKOUT_PATH, fanout.ADDRESS_ENV: f"tcp://127.0.0.1:{silent_port}"})
    assert ended.returncode == 2
    assert ended.stderr.strip().splitlines() == [
        f'one_step: compute.address tcp://127.0.0.1:{silent_port}: no Dask scheduler answers there within 1 s '
        '(TimeoutError); start one, or set compute.address to "" to run here']


NO_SCHEDULERS_ADDRESS = [
    ("a web address", "http://127.0.0.1:8000", "http:// is not a Dask scheduler's; give tcp://<host>:<port>"),
    ("no port", "tcp://127.0.0.1", "not a host and a port; give tcp://<host>:<port>"),
    ("words", "somewhere else", "not a host and a port"),
    ("a port out of range", "tcp://127.0.0.1:99999", "not a host and a port"),
    ("tls without certificates", "tls://127.0.0.1:8786", "tls:// needs TLS certificates, and Dask's configuration "
                                                         "names none"),
]


@pytest.mark.parametrize(("address", "message"), [case[1:] for case in NO_SCHEDULERS_ADDRESS],
                         ids=[case[0] for case in NO_SCHEDULERS_ADDRESS])
def test_an_address_no_scheduler_can_have_is_one_line_before_any_connection(project, capsys, monkeypatch, address,
                                                                             message):
    import distributed.comm

    def connect(*args, **kwargs):
        raise AssertionError("connected")

    monkeypatch.setattr(distributed.comm, "connect", connect)
    assert one_step.main([*TINY, "dataset=synthetic", f"compute.address={address}"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(f"one_step: compute.address {address}: {message}")


def test_a_silent_tls_listener_is_one_line_in_seconds(monkeypatch, silent_port):
    """With certificates in Dask's configuration, a tls:// address is tried, and a port that never answers is one
    line."""
    import dask
    from distributed.security import Security

    made = Security.temporary()
    monkeypatch.setattr(fanout, "CONNECT_SECONDS", 1)
    monkeypatch.setenv(fanout.ADDRESS_ENV, f"tls://127.0.0.1:{silent_port}")
    with dask.config.set({"distributed.comm.tls.ca-file": made.tls_ca_file,
                          "distributed.comm.tls.client.cert": made.tls_client_cert,
                          "distributed.comm.tls.client.key": made.tls_client_key}), \
            pytest.raises(ToksError, match="no Dask scheduler answers there within 1 s"):
        fanout.map_units(draw, range(2), HERE)


def test_tls_settings_that_name_no_certificate_file_are_one_line(tmp_path):
    import dask

    missing = {"distributed.comm.tls.ca-file": str(tmp_path / "ca.pem"),
               "distributed.comm.tls.client.cert": str(tmp_path / "client.pem")}
    with dask.config.set(missing), pytest.raises(ToksError, match=r"TLS settings \(distributed.comm.tls\) cannot be "
                                                                  r"used: .*No such file"):
        fanout.map_units(draw, range(2), ComputeConfig(address="tls://127.0.0.1:8786", workers=2))


KEPT = []  # what a worker process keeps of its units


def swell(unit: int) -> int:
    """A unit of a second or more (loky looks at a worker's memory once a second at most); from the third on, each
    keeps 320 MB in its worker, as calibrate's keep a dataset's draws read."""
    time.sleep(1.05)
    if unit >= 2:
        KEPT.append(np.ones(40_000_000))
    return unit


def test_a_worker_replaced_for_the_memory_it_keeps_is_no_warning():
    """loky replaces a worker whose memory grew 300 MB past its first unit's while units still wait, with a warning
    that blames a timeout or a leak: the units go on in the new worker, and the stage says nothing of it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        silence_known_warnings()
        assert fanout.map_units(swell, range(5), HERE, "processes") == list(range(5))
    assert [str(warning.message) for warning in caught] == []


def test_lokys_resource_tracker_keeps_its_shutdown_notice_to_itself(monkeypatch):
    """Its notice of the semaphores of workers a signal stopped (which it then removes) is no line for the user:
    the tracker, a process of its own, is started with the warning filter in its environment, the user's kept."""
    from toksel.runtime.fanout import TRACKER_NOTICE, quiet_resource_tracker

    monkeypatch.setenv("PYTHONWARNINGS", "default::DeprecationWarning")
    quiet_resource_tracker()
    quiet_resource_tracker()
    assert os.environ["PYTHONWARNINGS"] == f"default::DeprecationWarning,{TRACKER_NOTICE}"
    notice = subprocess.run([sys.executable, "-c", "import warnings; warnings.warn('resource_tracker: There appear "
                             "to be 1 leaked semlock objects to clean up at shutdown', UserWarning)"],
                            capture_output=True, text=True)
    assert notice.returncode == 0 and notice.stderr == ""
