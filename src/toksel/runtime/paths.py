"""Where each stage reads and writes, relative to the project root (DVC runs every stage there)."""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The working directory, or the real project when DVC runs an experiment in .dvc/tmp/exps/<name>."""
    cwd = Path.cwd().resolve()
    parts = cwd.parts
    for i in range(len(parts) - 2):
        if parts[i : i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    return cwd


def tracking_uri() -> str:
    """The MLflow store: $MLFLOW_TRACKING_URI, else the embedded sqlite file in the project root."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{project_root() / 'mlflow.db'}"


def processed_dir(dataset: str) -> Path:
    return Path("data") / "processed" / dataset


def results_dir(stage: str, dataset: str) -> Path:
    return Path("results") / stage / dataset


def seed_dir(folder: Path, seed: int) -> Path:
    """A seed's own outputs inside a stage's folder: <folder>/seed<k>."""
    return folder / f"seed{seed}"


def phase_row_dir(d: int) -> Path:
    """The phase diagram's row of embedding dimension d (dvc.yaml names it alike): its cells' metrics.json."""
    return Path("results") / "phase" / f"d{d}"


def phase_cell_key(eta0: float) -> str:
    """A cell's key in its row's metrics.json: eta<eta0>, dots as underscores (DVC reads dots as nesting)."""
    return f"eta{eta0:g}".replace(".", "_")
