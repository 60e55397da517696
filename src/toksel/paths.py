"""Where each stage reads and writes, relative to the project root (DVC runs every stage there)."""

from __future__ import annotations

from pathlib import Path


def project_root() -> Path:
    """The working directory, or the real project when DVC runs an experiment in .dvc/tmp/exps/<name>."""
    cwd = Path.cwd().resolve()
    parts = cwd.parts
    for i in range(len(parts) - 2):
        if parts[i : i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    return cwd


def processed_dir(dataset: str) -> Path:
    return Path("data") / "processed" / dataset


def results_dir(stage: str, dataset: str) -> Path:
    return Path("results") / stage / dataset


def seed_dir(folder: Path, seed: int) -> Path:
    """A seed's own outputs inside a stage's folder: <folder>/seed<k>."""
    return folder / f"seed{seed}"


def phase_cell_dir(d: int, eta0: float) -> Path:
    """The phase-diagram cell of embedding dimension d and one-step size eta0 (dvc.yaml names it alike)."""
    return Path("results") / "phase" / f"d{d}-eta{eta0:g}"
