"""What several test modules share: the project root and a tiny but real configuration."""

import contextlib
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# PYTHONPATH for a process that runs this checkout's code (pipelines/, tools/ and src/), not an installed copy's.
CHECKOUT_PATH = os.pathsep.join([str(ROOT), str(ROOT / "src")])

# Every stage runs end to end on this in a second or two (one seed: tests of the seeds set more).
TINY = [
    "base.seeds=[0]",
    "data.synthetic.n_positive=4", "data.synthetic.n_negative=4", "data.synthetic.n_irrelevant=24",
    "data.synthetic.seq_len=6", "data.synthetic.n_train=80", "data.synthetic.n_test=40",
    "model.d=256", "one_step.eta0=40", "gradient_flow.horizon=1e4",
]

# Metrics that measure the run, not the result: they differ between two runs of the same thing.
TIMING_METRICS = {"seconds", "control_seconds", "peak_memory_mb"}

# Training settings a tiny fit completes under in a few seconds: one learning rate, the synthetic data trained,
# the trained arm alone (ALL_ARMS: the three).
TINY_TRAIN = ["train.max_epochs=6", "train.patience=6", "train.batch_size=16", "train.lr=0.02", "train.lr_grid=[0.02]",
              "train.datasets=[synthetic]", "train.heldout_min_count=1", "train.arms=[trained]"]
ALL_ARMS = "train.arms=[trained,untrained,one_step]"
OPTIMISER = {"optimizer": "adam", "lr": 1e-3, "weight_decay": 0.0}  # a model built by hand in a test: params.yaml's


@contextlib.contextmanager
def throwaway_project(tmp_path_factory: pytest.TempPathFactory, **env: str) -> Iterator[Path]:
    """A project folder with the repository's params.yaml, its own MLflow store and pipeline id (and `env`), the
    working directory while the context lasts: for module fixtures, which cannot use monkeypatch."""
    project = tmp_path_factory.mktemp("project")
    shutil.copy(ROOT / "params.yaml", project / "params.yaml")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{project / 'mlflow.db'}")
        for name, value in env.items():
            patch.setenv(name, value)
        yield project


def published_runs(project: Path, filter_string: str = "") -> list:
    """Publish the project's run records (as the pipeline's last stage does) and return the store's runs."""
    from mlflow import MlflowClient

    from toksel import publish

    assert publish.main([]) == 0
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("toksel")
    return client.search_runs([experiment.experiment_id], filter_string=filter_string, max_results=5000)


def seed_folder(project: Path, stage: str, run: str, seed: int = 0) -> Path:
    """results/<stage>/<run>/seed<seed> of the project (run: a dataset, or <dataset>/<arm or variant>)."""
    return project / "results" / stage / run / f"seed{seed}"


def start_stage(stage: str, args: list[str], cwd: Path, own_group: bool = False, **env: str) -> subprocess.Popen:
    """`python -m pipelines.<stage> args` as DVC starts it: its own process, in the project `cwd`; with `own_group`,
    in a process group of its own, as a terminal's foreground job (which Ctrl-C reaches whole)."""
    environment = {**os.environ, "PYTHONPATH": CHECKOUT_PATH, **env}
    return subprocess.Popen([sys.executable, "-m", f"pipelines.{stage}", *args], cwd=cwd, env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            process_group=0 if own_group else None)


def run_stage_process(stage: str, args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    process = start_stage(stage, args, cwd, **env)
    stdout, stderr = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


# (method, path with its query, body) -> (HTTP status, answer: JSON, or plain text if a string)
Answer = Callable[[str, str, bytes], tuple[int, dict | str]]
REFUSED = (401, "You are not authenticated.")  # as MLflow's basic-auth server answers a request without a login


@contextlib.contextmanager
def http_stub(answer: Answer) -> Iterator[tuple[str, list[str]]]:
    """A server on loopback that answers every request by `answer`, in a thread of its own: its address, and the
    "METHOD path" of each request it has had."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            asked.append(f"{self.command} {self.path}")
            status, content = answer(self.command, self.path, body)
            text = isinstance(content, str)
            data = (content if text else json.dumps(content)).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if text else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_DELETE = _answer

        def log_message(self, *args: object) -> None:  # the test reads what was asked, not a log on stderr
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    """A port nothing listens on once the probe that took it closes it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_dvc(project: Path, *args: str) -> subprocess.CompletedProcess:
    """`dvc args` in `project`, with this environment's dvc and python, the project's own MLflow store, and the
    pipeline key left to the dvc process (as a user's run has it)."""
    return subprocess.run(["dvc", *args], cwd=project, env=dvc_environment(), capture_output=True, text=True)


def dvc_environment() -> dict[str, str]:
    """This environment's dvc and python, the project's own MLflow store, the pipeline key left to DVC."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "DVC_NO_ANALYTICS": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)  # the default: sqlite:///<project>/mlflow.db
    return env


def dvc(project: Path, *args: str) -> str:
    done = run_dvc(project, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def short_stage(name: str) -> str:
    """A stage name without the dataset, the seed or the grid cell: prepare, ..., train, phase, ..."""
    name = re.sub(r"@[\d.-]+$", "", re.sub(r"@synthetic(_pair(_first_order)?)?-?", "-", name))  # the dataset; a
    # phase row's d
    return re.sub(r"-\d+$", "", name).rstrip("-")  # the seed


def stages_run(output: str) -> list[str]:
    """The stages a `dvc repro` ran, in order."""
    return [short_stage(name) for name in re.findall(r"Running stage '([\w@.-]+)'", output)]


def stages_stale(project: Path) -> list[str]:
    """The stages `dvc repro` would start with: those whose own dependencies changed."""
    return sorted(short_stage(name) for name in json.loads(dvc(project, "status", "--json")))


def dataset_entry(like: str = "synthetic", **sections: dict) -> dict:
    """An entry of `datasets`: the repository's entry `like`, with `sections`' values merged in (each key of a
    section replaced, the others kept), as a test's own dataset needs every value of its own."""
    from omegaconf import OmegaConf

    entry = OmegaConf.load(ROOT / "params.yaml").datasets[like]
    return OmegaConf.to_container(OmegaConf.merge(entry, sections))


def with_values(params, assignments: list[str]):
    """params.yaml's tree with `key=value` assignments made where the values live: a dataset's own key (one_step.eta0,
    data.synthetic.n_train) in every entry of `datasets` that has it, any other at the top level."""
    from omegaconf import OmegaConf

    for assignment in assignments:
        key, value = assignment.split("=", 1)
        parsed = OmegaConf.from_dotlist([f"v={value}"]).v
        entries = [entry for entry in params.datasets.values()
                   if OmegaConf.select(entry, key, default="<absent>") != "<absent>"]
        for entry in entries or [params]:
            OmegaConf.update(entry, key, parsed, merge=False)
    return params


PAIR_DATASETS = ("synthetic_pair", "synthetic_pair_first_order")  # pair.dataset and pair.control: dvc.yaml runs both


def tiny_dvc_project(folder: Path) -> Path:
    """A copy of the project (code, dvc.yaml, a tiny params.yaml with the synthetic datasets alone) in `folder`, a
    fresh git repository with DVC initialised, for `dvc repro` through the real DAG."""
    from omegaconf import OmegaConf

    for name in ("dvc.yaml", ".dvcignore", ".gitignore"):
        shutil.copy(ROOT / name, folder / name)
    for part in ("src", "pipelines", "data/own"):  # data/own: the file datasets' folder, which check_params follows
        shutil.copytree(ROOT / part, folder / part, ignore=shutil.ignore_patterns("__pycache__"))
    tiny_training = ["train.max_epochs=2", "train.batch_size=16", "train.datasets=[synthetic]", "train.lr_grid=[0.001]",
                     "train.heldout_min_count=1", "sequence.cpu.d=16", "ablation.datasets=[synthetic]",
                     "ablation.variants=[two_layer_kq]", "ablation.multiclass=synthetic",
                     "phase.eta0=[40]", "phase.d=[256]",  # one phase cell: the gradient_flow stage's own (d, eta0)
                     "d_sweep.datasets=[synthetic]", "d_sweep.d=[8]", "calibration.max_replicates=4",
                     "calibration.max_costly_replicates=2", "negation.dataset=synthetic",
                     "negation.models=[train/synthetic/trained,ablation/synthetic/two_layer_kq]",
                     "margins.horizon=1e8", "margins.discrete_steps=50", "margins.potentials=[1.5]"]
    params = OmegaConf.load(ROOT / "params.yaml")
    # The real datasets have tests of their own; the pair experiment's two synthetic datasets are part of the DAG.
    params.datasets = {name: params.datasets[name] for name in ("synthetic", *PAIR_DATASETS)}
    for name in PAIR_DATASETS:
        params.datasets[name].train = {}  # the tiny training below, not their own rate and seeds
    params = with_values(params, [*TINY, *tiny_training])
    OmegaConf.save(params, folder / "params.yaml")
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    dvc(folder, "init", "-q")
    shutil.copytree(ROOT / ".dvc" / "plots", folder / ".dvc" / "plots")  # the project's own plot templates
    return folder
