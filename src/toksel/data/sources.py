"""Labelled text splits from the Hugging Face Hub, or from an offline mirror of it.

Where $TOKSEL_DATA_MIRROR names a folder laid out as <name>/<split>.parquet, with <name> the last part of
the Hub id (imdb for stanfordnlp/imdb), that file is read; otherwise `datasets.load_dataset(hub_id, split=...)`.
data.labels, when set, keeps only the rows with those source labels and renumbers them 0 .. K-1 in the order
given (Yelp's stars 1, 2, 4, 5 as four classes). Either way the split is checked before use: the columns exist,
it is not empty, and its labels are integers in 0 .. num_classes - 1 (prepare checks that every class is left
after cleaning).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from toksel.runtime.config import DataConfig
from toksel.runtime.errors import ToksError

MIRROR_ENV = "TOKSEL_DATA_MIRROR"


@dataclass(frozen=True)
class TextSplit:
    texts: list[str]
    labels: np.ndarray  # int64 in 0 .. num_classes - 1

    def subset(self, rows: np.ndarray) -> TextSplit:
        return TextSplit([self.texts[i] for i in rows], self.labels[rows])


def load_text_split(dataset: str, data: DataConfig, split: str) -> TextSplit:
    mirror = os.environ.get(MIRROR_ENV)
    frame = _read_mirror(Path(mirror), data.hub_id, split) if mirror else _read_hub(data.hub_id, split)
    name = f"{dataset}/{split}"
    if data.labels is not None:
        frame = _relabelled(frame, name, data)
    return _checked(frame, name, data)


def _read_mirror(mirror: Path, hub_id: str, split: str) -> pd.DataFrame:
    path = mirror / hub_id.rsplit("/", 1)[-1] / f"{split}.parquet"
    if not path.is_file():
        raise ToksError(f"mirror file {path} is missing: {MIRROR_ENV}={mirror} must hold <name>/<split>.parquet, "
                        f"<name> the last part of the Hub id {hub_id!r}")
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError, pa.ArrowException) as error:  # truncated, empty, not parquet, bad UTF-8
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ToksError(f"mirror file {path} is not a readable parquet file ({reason})") from None


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
