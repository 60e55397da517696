"""Atomic file output: write to a temporary sibling, then rename, so a killed stage leaves no half file."""

from __future__ import annotations

import hashlib
import json
import math
import os
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from toksel.errors import ToksError


@contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """Yield a temporary path next to `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _json_safe(value: Any) -> Any:
    """NaN and inf are not JSON: write them as null."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: Path | str, data: dict[str, Any] | list[Any]) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(_json_safe(data), indent=2, sort_keys=False) + "\n")


def damaged(path: Path | str, error: Exception, producer: str | None = None) -> ToksError:
    """The one-line error for a file a stage wrote that cannot be read back (truncated, overwritten, ...)."""
    again = f"run the {producer} stage again" if producer else "run the stage that writes it again"
    return ToksError(f"{path} is damaged ({type(error).__name__}): {again}")


def read_json(path: Path | str, producer: str | None = None) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError is a ValueError
        raise damaged(path, error, producer) from None


def write_text(path: Path | str, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_npz(path: Path | str, **arrays: Any) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)


def require_output(path: Path | str, producer: str) -> Path:
    """`path`, which the stage `producer` writes; a clear error if that stage has not run."""
    if not Path(path).exists():
        raise ToksError(f"{path} is missing: run the {producer} stage first (dvc repro {producer})")
    return Path(path)


def read_npz(path: Path | str, producer: str) -> dict[str, np.ndarray]:
    """All arrays of `path`, an output of the stage `producer`."""
    try:
        with np.load(require_output(path, producer)) as z:
            return {name: z[name] for name in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:  # truncated, not an npz, a bad member
        raise damaged(path, error, producer) from None


def write_csv(path: Path | str, frame: Any, float_format: str = "%.10g") -> None:
    """A pandas DataFrame as CSV, atomically."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, float_format=float_format)


def file_digest(*paths: Path | str) -> str:
    """A short content hash of files, in order (to tell whether inputs changed)."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]
