"""Labelled text splits: from the Hugging Face Hub or an offline mirror of it, or from the project's own files.

Hub: where $TOKSEL_DATA_MIRROR names a folder laid out as <name>/<split>.parquet, with <name> the last part of
the Hub id (imdb for stanfordnlp/imdb), that file is read; otherwise `datasets.load_dataset(hub_id, split=...)`.
File: data.path, a CSV, JSON Lines or Parquet file (the format from its extension), is the training split and
data.test_path the test split; without a test_path, a share data.test_fraction of data.path's rows is held out as
the test split, the same rows on every run (a fixed seed), as a Hub dataset's test split is.
data.labels, when set, keeps only the rows with those source labels and renumbers them 0 .. K-1 in the order
given (Yelp's stars 1, 2, 4, 5 as four classes). Whatever the source, each table is checked before use: the
columns exist, it is not empty, and its labels are integers in 0 .. num_classes - 1 (prepare checks that every
class is left after cleaning).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from toksel.params import FILE_FORMATS, DataConfig
from toksel.runtime.errors import ToksError

MIRROR_ENV = "TOKSEL_DATA_MIRROR"
SPLITS = ("train", "test")
HOLD_OUT_SEED = 0  # which rows of a single file are the test split: fixed, whatever base.seeds and data_seed


@dataclass(frozen=True)
class TextSplit:
    texts: list[str]
    labels: np.ndarray  # int64 in 0 .. num_classes - 1

    def subset(self, rows: np.ndarray) -> TextSplit:
        return TextSplit([self.texts[i] for i in rows], self.labels[rows])


def load_text_splits(dataset: str, data: DataConfig) -> dict[str, TextSplit]:
    """The train and test splits of a text dataset (source hub or file), checked."""
    if data.source == "file":
        return _file_splits(dataset, data)
    return {split: load_text_split(dataset, data, split) for split in SPLITS}


def load_text_split(dataset: str, data: DataConfig, split: str) -> TextSplit:
    """One split of a Hub dataset, read from the mirror when $TOKSEL_DATA_MIRROR is set."""
    mirror = os.environ.get(MIRROR_ENV)
    frame = _read_mirror(Path(mirror), data.hub_id, split) if mirror else _read_hub(data.hub_id, split)
    return _checked_split(frame, f"{dataset}/{split}", data)


def _file_splits(dataset: str, data: DataConfig) -> dict[str, TextSplit]:
    if data.test_path:
        return {split: _checked_split(_read_data_file(path), f"{dataset}/{split} ({path})", data)
                for split, path in zip(SPLITS, (data.path, data.test_path), strict=True)}
    name = f"{dataset} ({data.path})"
    rows = _checked_split(_read_data_file(data.path), name, data)
    n = len(rows.labels)
    n_test = round(n * data.test_fraction)
    if not 0 < n_test < n:
        raise ToksError(f"{name}: {n} rows are too few to hold out data.test_fraction = {data.test_fraction:g} of "
                        "them for test and train on the rest: add rows, or give the test split its own file "
                        "(data.test_path)")
    test = np.zeros(n, dtype=bool)
    test[np.random.default_rng(HOLD_OUT_SEED).permutation(n)[:n_test]] = True
    return {"train": rows.subset(np.flatnonzero(~test)), "test": rows.subset(np.flatnonzero(test))}


def _read_data_file(path: str) -> pd.DataFrame:
    return _read_table(Path(path), "data file", "put it there (`dvc pull` it if DVC tracks it), or correct data.path "
                                                "/ data.test_path (relative to the project folder)")


def _read_json(path: Path) -> pd.DataFrame:
    """JSON Lines, or one array of objects; the values as written (no text read as a number or a date)."""
    with open(path, "rb") as handle:
        array = handle.read(4096).lstrip().startswith(b"[")
    return pd.read_json(path, lines=not array, dtype=False)


READERS: dict[str, Callable[[Path], pd.DataFrame]] = {
    "csv": lambda path: pd.read_csv(path, keep_default_na=False),  # a review "NA" stays text; an empty cell is ""
    "json": _read_json,
    "parquet": pd.read_parquet,
}


def _read_table(path: Path, what: str, missing: str) -> pd.DataFrame:
    """The table in `path`, in the format its extension gives (FILE_FORMATS); one line when it is missing (what
    `missing` says to do then), empty or unreadable. `what` names the file in the messages."""
    if not path.is_file():
        raise ToksError(f"{what} {path} is missing: {missing}")
    kind = FILE_FORMATS[path.suffix.lower()]
    if path.stat().st_size == 0:  # pandas reads an empty JSON Lines file as a table without columns
        raise ToksError(f"{what} {path} is not a readable {kind} file (it is empty)")
    try:
        return READERS[kind](path)
    except (OSError, ValueError, pa.ArrowException) as error:  # truncated, not that format, bad UTF-8
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ToksError(f"{what} {path} is not a readable {kind} file ({reason})") from None


def _read_mirror(mirror: Path, hub_id: str, split: str) -> pd.DataFrame:
    return _read_table(mirror / hub_id.rsplit("/", 1)[-1] / f"{split}.parquet", "mirror file",
                       f"{MIRROR_ENV}={mirror} must hold <name>/<split>.parquet, <name> the last part of the Hub id "
                       f"{hub_id!r}")


def _checked_split(frame: pd.DataFrame, name: str, data: DataConfig) -> TextSplit:
    """A table's rows as a split: relabelled by data.labels when set, then checked."""
    if data.labels is not None:
        frame = _relabelled(frame, name, data)
    return _checked(frame, name, data)


def _relabelled(frame: pd.DataFrame, name: str, data: DataConfig) -> pd.DataFrame:
    """The rows whose source label is in data.labels, labelled by its position there."""
    if data.label_column not in frame.columns:
        return frame  # _checked names the missing column
    source = frame[data.label_column]
    absent = [label for label in data.labels if not (source == label).any()]
    if absent:
        raise ToksError(f"{name}: data.labels names {absent}, but the source has no row with "
                        f"{'that label' if len(absent) == 1 else 'those labels'} (it has {sorted(source.unique())})")
    kept = frame[source.isin(data.labels)].copy()
    kept[data.label_column] = kept[data.label_column].map({label: k for k, label in enumerate(data.labels)})
    return kept.reset_index(drop=True)


def _read_hub(hub_id: str, split: str) -> pd.DataFrame:
    import datasets

    try:
        return datasets.load_dataset(hub_id, split=split).to_pandas()
    except Exception as error:  # noqa: BLE001  (the Hub raises many kinds; all mean the same to the user)
        raise ToksError(f"could not load {hub_id!r} split {split!r} from the Hugging Face Hub "
                        f"({type(error).__name__}); offline, set {MIRROR_ENV} to a folder of "
                        "<dataset>/<split>.parquet files") from None


def _checked(frame: pd.DataFrame, name: str, data: DataConfig) -> TextSplit:
    missing = [column for column in (data.text_column, data.label_column) if column not in frame.columns]
    if missing:
        raise ToksError(f"{name} has no column {', '.join(missing)} (it has {', '.join(map(str, frame.columns))}): "
                        "set data.text_column / data.label_column")
    if len(frame) == 0:
        raise ToksError(f"{name} is empty: check the source")
    labels = frame[data.label_column]
    if not pd.api.types.is_integer_dtype(labels):
        raise ToksError(f"{name}: labels in column {data.label_column!r} are {labels.dtype}, not integers")
    labels = labels.to_numpy(dtype=np.int64)
    outside = np.setdiff1d(np.unique(labels), np.arange(data.num_classes))
    if len(outside):
        raise ToksError(f"{name}: labels {outside.tolist()} lie outside 0 .. {data.num_classes - 1}: "
                        "check data.num_classes")
    texts = frame[data.text_column]
    if texts.isna().any():
        raise ToksError(f"{name}: {int(texts.isna().sum())} rows have no text in column {data.text_column!r}")
    return TextSplit([_text(value, name, row) for row, value in enumerate(texts)], labels)


def _text(value: object, name: str, row: int) -> str:
    """A review's text; bytes (a binary column) must be UTF-8."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise ToksError(f"{name}: the text of row {row} is not UTF-8") from None
    return str(value)


def short_classes(labels: np.ndarray, size: int) -> list[tuple[int, int, int]]:
    """(class, its rows, its share size // K) of each class with fewer rows than its share of a subsample of `size`:
    every draw then holds all of that class's rows, so a seed cannot vary them."""
    if size == 0 or size >= len(labels):
        return []
    classes, counts = np.unique(labels, return_counts=True)
    share = size // len(classes)
    return [(int(label), int(count), share) for label, count in zip(classes, counts, strict=True) if count <= share]


def balanced_subsample(labels: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted row indices: up to size // K rows of each of the K classes present, drawn without replacement.

    A class with fewer rows than its share gives all of them. size 0 keeps everything.
    """
    if size == 0 or size >= len(labels):
        return np.arange(len(labels))
    classes = np.unique(labels)
    share = size // len(classes)
    chosen = [rng.permutation(np.flatnonzero(labels == c))[:share] for c in classes]
    return np.sort(np.concatenate(chosen))
