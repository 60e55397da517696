"""Shared fixtures: a throw-away project directory with its own MLflow store, offline, no progress bars."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# Under pytest-xdist each worker gets one thread: two workers with a thread per core each would fight over the
# two cores (small torch and numba operations slowed several times). Set before torch or numba is imported, and
# inherited by the stages the tests start as processes.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(variable, "1")

import pytest  # noqa: E402

from tests.helpers import ROOT, TINY  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ["TOKSEL_PROGRESS"] = "0"


# The files that take longest, apart from the slow ones (`make test-slow`): handed out first.
LONG_FILES = ("test_faults.py", "test_text_data.py", "test_training.py", "test_models_kept.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first: `make test` hands files to its two workers in collection order
    (--no-loadscope-reorder), so the long ones start at once on different workers instead of ending the run on one."""
    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("slow") is not None:
            return 0
        return 1 if item.path.name in LONG_FILES else 2

    items.sort(key=rank)  # stable: files keep their order within a rank


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory holding the real params.yaml; the stages write into it."""
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    return tmp_path


@pytest.fixture
def prepared(project: Path) -> Path:
    """The project after the tiny synthetic data's prepare and one_step stages."""
    from pipelines import one_step, prepare  # here, not at the top: most test modules need neither

    for stage in (prepare, one_step):
        assert stage.main(TINY) == 0
    return project


@pytest.fixture
def dvc_project(tmp_path: Path) -> Path:
    """A copy of the project with a tiny params.yaml in a fresh git repository with DVC initialised."""
    from tests.helpers import tiny_dvc_project

    return tiny_dvc_project(tmp_path)
