"""Shared fixtures: a throw-away project directory with its own MLflow store, offline, no progress bars."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A tiny but real configuration: every stage runs end to end in a second or two.
TINY = [
    "data.synthetic.n_positive=4", "data.synthetic.n_negative=4", "data.synthetic.n_irrelevant=24",
    "data.synthetic.seq_len=6", "data.synthetic.n_train=80", "data.synthetic.n_test=40",
    "model.d=256", "one_step.eta0=40", "gradient_flow.steps=300", "gradient_flow.log_every=50",
]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ["TOKSEL_PROGRESS"] = "0"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory holding the real params.yaml; the stages write into it."""
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("TOKSEL_PIPELINE_ID", f"test-{uuid.uuid4().hex[:8]}")
    return tmp_path
