"""Atomic file output: write to a temporary sibling, then rename, so a killed stage leaves no half file.

Inside `outputs_together()` (a stage's whole run) the renames wait for the end of the block: every file the
stage wrote replaces its old version together, or none does. The renames are listed in a journal first, so a
kill in the middle of them is finished by the next stage that starts (`recover_outputs`), which also removes
the temporary files of processes that are gone.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from toksel.errors import ToksError

TEMPORARY = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)$")  # .<name>.tmp-<pid>, next to <name>
JOURNALS = Path(".toksel")  # in the working directory: the renames of a commit in progress
SEARCHED = ("data", "results")  # where stages write, and so where temporary files can be left


class _Transaction:
    def __init__(self) -> None:
        self.renames: dict[Path, Path] = {}  # final path -> its temporary file, in the order written
        self.after: list[Callable[[], None]] = []  # what waits for the files (logging them as artifacts)


_open: list[_Transaction] = []


@contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """Yield a temporary path next to `path`; rename it onto `path` only if the block succeeds (inside
    outputs_together: at its end)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        if _open:
            _open[-1].renames[path] = tmp
            return
        os.replace(tmp, path)
    finally:
        if tmp.exists() and not (_open and _open[-1].renames.get(path) == tmp):
            tmp.unlink()


def pending(path: Path | str) -> bool:
    """Whether `path` was written in the open outputs_together block and waits for its end."""
    return bool(_open) and Path(path) in _open[-1].renames


def after_outputs(action: Callable[[], None]) -> None:
    """Run `action` once the open outputs_together block has put its files in place (now, if none is open)."""
    if _open:
        _open[-1].after.append(action)
    else:
        action()


@contextmanager
def outputs_together() -> Iterator[None]:
    """Every file written inside replaces its old version at the end, all together; on an error none does."""
    transaction = _Transaction()
    _open.append(transaction)
    try:
        yield
    except BaseException:
        for tmp in transaction.renames.values():
            tmp.unlink(missing_ok=True)
        raise
    finally:
        _open.remove(transaction)
    _commit(transaction.renames)
    for action in transaction.after:
        action()


def _commit(renames: dict[Path, Path]) -> None:
    if not renames:
        return
    JOURNALS.mkdir(exist_ok=True)
    journal = JOURNALS / f"commit-{os.getpid()}.json"
    with open(journal.with_suffix(".tmp"), "w") as handle:  # complete before it counts
        json.dump([[str(tmp), str(path)] for path, tmp in renames.items()], handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(journal.with_suffix(".tmp"), journal)
    _finish(journal)


def _finish(journal: Path) -> None:
    for tmp, path in json.loads(journal.read_text()):
        if Path(tmp).exists():
            os.replace(tmp, path)
    journal.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def recover_outputs() -> list[str]:
    """Finish the commits a killed stage left half done, then remove the temporary files of processes that are
    gone; returns what it did, a line each."""
    done = []
    for journal in sorted(JOURNALS.glob("commit-*.json")) if JOURNALS.is_dir() else []:
        pid = int(journal.stem.removeprefix("commit-"))
        if not _alive(pid):
            _finish(journal)
            done.append(f"finished replacing the outputs of process {pid}, which was stopped while doing so")
    for folder in map(Path, SEARCHED):
        for tmp in folder.rglob(".*.tmp-*") if folder.is_dir() else []:
            match = TEMPORARY.match(tmp.name)
            if match and tmp.is_file() and not _alive(int(match["pid"])):
                tmp.unlink(missing_ok=True)
                done.append(f"removed {tmp}, left by process {match['pid']}")
    return done


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
    if pending(path):  # written by this stage a moment ago, not yet in place
        return _open[-1].renames[Path(path)]
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
