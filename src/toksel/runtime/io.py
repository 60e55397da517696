"""Files written whole, and read back checked.

A file is written to a temporary sibling, then renamed, so a killed stage leaves no half file; inside
`outputs_together()` (a stage's whole run) the renames wait for the block's end, so a failed stage replaces none of
its old outputs. Whether an output is the one its stage wrote is DVC's to know. The readers check what they can see,
in one line: a missing file names the stage to run first; one that is not JSON or npz, or lacks a key asked for,
names the stage to run again.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import re
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from toksel.runtime.errors import ToksError

TEMPORARY = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)$")  # .<name>.tmp-<pid>, next to <name>
SEARCHED = ("data", "results", "runs")  # where stages write, and so where temporary files can be left


@dataclass
class _Block:
    """An open outputs_together or captured_outputs: what it wrote, and the folders it made for that."""
    renames: dict[Path, Path] = field(default_factory=dict)  # final path -> its temporary file, in the order written
    folders: list[Path] = field(default_factory=list)  # outermost first

    def remove_empty_folders(self) -> None:
        """The folders it made that hold nothing: a block that leaves no file leaves no folder either."""
        for folder in reversed(self.folders):
            with contextlib.suppress(OSError):  # not empty: another writer's file is in it
                folder.rmdir()


_waiting: list[_Block] = []  # the open blocks, innermost last


@contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """A temporary path next to `path`, renamed onto it if the block succeeds (inside outputs_together: at its end)."""
    path = Path(path)
    _make_folder(path.parent)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        if _waiting:
            _waiting[-1].renames[path] = tmp
        else:
            os.replace(tmp, path)
    finally:
        if tmp.exists() and not (_waiting and _waiting[-1].renames.get(path) == tmp):
            tmp.unlink()


def _make_folder(folder: Path) -> None:
    """mkdir -p; inside a block, the folders it made are the block's, to remove if they stay empty."""
    missing = list(itertools.takewhile(lambda parent: not parent.exists(), (folder, *folder.parents)))
    folder.mkdir(parents=True, exist_ok=True)
    if _waiting:
        _waiting[-1].folders.extend(reversed(missing))


def pending(path: Path | str) -> bool:
    """Whether `path` was written in the open outputs_together block and waits for its end."""
    return bool(_waiting) and Path(path) in _waiting[-1].renames


def _current(path: Path | str) -> Path:
    """Where `path`'s content is now: its temporary file while it waits."""
    return _waiting[-1].renames[Path(path)] if pending(path) else Path(path)


def file_sha256(path: Path | str) -> str:
    """The SHA-256 of `path` as this stage wrote it."""
    with open(_current(path), "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def file_digests(paths: Iterable[Path]) -> dict[str, str | None]:
    """Each path -> the SHA-256 of its file, None where there is none (the reader of the file says so)."""
    return {str(path): file_sha256(path) if path.is_file() else None for path in paths}


@contextmanager
def _block() -> Iterator[_Block]:
    block = _Block()
    _waiting.append(block)
    try:
        yield block
    except BaseException:  # an error or a stop: nothing of the block's stays, no file, no folder made for one
        for tmp in block.renames.values():
            tmp.unlink(missing_ok=True)
        block.remove_empty_folders()
        raise
    finally:
        _waiting.remove(block)


@contextmanager
def outputs_together() -> Iterator[None]:
    """Every file written inside replaces its old version at the end, all together; on an error none does."""
    with _block() as block:
        yield
    for path, tmp in block.renames.items():
        os.replace(tmp, path)


@contextmanager
def captured_outputs() -> Iterator[dict[Path, bytes]]:
    """Like outputs_together, but the files are handed back as {path: bytes}: a unit of work's outputs, perhaps
    from another machine, which the stage writes among its own (write_files)."""
    files: dict[Path, bytes] = {}
    with _block() as block:
        yield files
    files.update((path, tmp.read_bytes()) for path, tmp in block.renames.items())
    for tmp in block.renames.values():
        tmp.unlink(missing_ok=True)
    block.remove_empty_folders()  # the stage makes them again as it writes the files


def write_files(files: dict[Path, bytes]) -> None:
    """Files that captured_outputs handed back, written here as any output is."""
    for path, content in files.items():
        with atomic_path(path) as tmp:
            tmp.write_bytes(content)


def remove_leftovers() -> list[str]:
    """Remove the temporary files that processes now gone left in the stages' output folders; a line for each."""
    done = []
    for folder in map(Path, SEARCHED):
        for tmp in folder.rglob(".*.tmp-*") if folder.is_dir() else []:
            match = TEMPORARY.match(tmp.name)
            if match and tmp.is_file() and not psutil.pid_exists(int(match["pid"])):
                tmp.unlink(missing_ok=True)
                done.append(f"removed {tmp}, left by process {match['pid']}")
    return done


def _json_safe(value: Any) -> Any:
    """NaN and inf are not JSON: written as null."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def write_json(path: Path | str, data: dict[str, Any] | list[Any]) -> None:
    write_text(path, json.dumps(_json_safe(data), indent=2) + "\n")


def write_text(path: Path | str, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_npz(path: Path | str, **arrays: Any) -> None:
    """Arrays into `path`; an infinite value is an overflow, an error (NaN stays: it marks what was not computed)."""
    for name, array in arrays.items():
        array = np.asarray(array)
        if array.dtype.kind in "fc" and np.isinf(array).any():
            raise ToksError(f"{Path(path).name} would hold infinite values in {name}: the computation overflowed "
                            "(a step size or learning rate too large for it?); nothing was written")
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)


def write_csv(path: Path | str, frame: Any, float_format: str = "%.10g") -> None:
    """A pandas DataFrame as CSV."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, float_format=float_format)


def damaged(path: Path | str, error: Exception, producer: str | None = None, why: str | None = None) -> ToksError:
    """The one-line error for a stage's output that cannot be read back."""
    again = f"run the {producer} stage again" if producer else "run the stage that writes it again"
    return ToksError(f"{path} is damaged ({why or type(error).__name__}): {again}")


class Record(dict):
    """A JSON object read from a stage's output: a key it lacks is that file's fault, told in one line."""

    def __init__(self, items: dict, path: Path | str, producer: str | None) -> None:
        super().__init__(items)
        self.path, self.producer = path, producer

    def __missing__(self, key: object) -> Any:
        raise damaged(self.path, KeyError(key), self.producer, f"it has no {key!r}")


def require_output(path: Path | str, producer: str) -> Path:
    """`path`, which the stage `producer` writes; a clear error if that stage has not run."""
    if not pending(path) and not Path(path).exists():
        raise ToksError(f"{path} is missing: run the {producer} stage first (dvc repro {producer})")
    return _current(path)


def read_json(path: Path | str, producer: str | None = None) -> Any:
    """A JSON file the stage `producer` wrote (a missing file names it)."""
    where = require_output(path, producer) if producer is not None else Path(path)
    try:
        return json.loads(where.read_text(), object_hook=lambda items: Record(items, path, producer))
    except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError is a ValueError
        raise damaged(path, error, producer) from None


def read_npz(path: Path | str, producer: str) -> dict[str, np.ndarray]:
    """All arrays of `path`, an output of the stage `producer`."""
    try:
        with np.load(require_output(path, producer)) as z:
            return Record({name: z[name] for name in z.files}, path, producer)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:  # truncated, not an npz, a bad member
        raise damaged(path, error, producer) from None
