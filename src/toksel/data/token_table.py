"""The per-token table a dataset's prepare stage writes, and what readers ask of it.

One row per token: the word, per class k its occurrences `count_class_k` and class-k signed frequency
`alpha_class_k`, the posterior difference of the last class against the first, the importance, whether it is
important (what the selection checks look for) or special (<unk>, left out of the statistics), and the same
statistics of the held-out split (`heldout_` columns). Two classes add the paper's exact alpha_s, the token types
and the held-out alpha_s. The class count is declared next to the table (tokens.json), not read from the columns.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from toksel.runtime.errors import ToksError
from toksel.runtime.io import damaged, read_json, require_output, write_csv, write_json

BINARY_COLUMNS = ("alpha", "token_type", "heldout_alpha")  # two classes only: the paper's alpha_s and its types


def class_columns(name: str, num_classes: int) -> list[str]:
    return [f"{name}_class_{k}" for k in range(num_classes)]


@dataclass(frozen=True)
class TokenTable:
    frame: pd.DataFrame
    num_classes: int

    def __post_init__(self) -> None:
        expected = {*class_columns("count", self.num_classes), *class_columns("alpha", self.num_classes),
                    *(BINARY_COLUMNS if self.binary else ())}
        per_class = {column for column in self.frame.columns if column.startswith("count_class_")}
        missing = sorted(expected - set(self.frame.columns))
        if missing or len(per_class) != self.num_classes:
            raise ToksError(f"the token table does not hold {self.num_classes} classes (missing {missing or 'none'}, "
                            f"{len(per_class)} count columns): run the prepare stage again")

    @property
    def binary(self) -> bool:
        return self.num_classes == 2

    def __len__(self) -> int:
        return len(self.frame)

    @functools.cached_property
    def _read(self) -> dict[str, np.ndarray]:
        """Columns already read out of the frame: the calibration asks a table for the same few thousands of
        times, and pandas' lookup costs more than the statistic."""
        return {}

    def column(self, name: str) -> np.ndarray:
        """The column as a read-only array (shared by every caller)."""
        if name not in self._read:
            values = self.frame[name].to_numpy()
            values.flags.writeable = False
            self._read[name] = values
        return self._read[name]

    @property
    def words(self) -> list[str]:
        return self.frame["word"].astype(str).tolist()

    def vocabulary_digest(self) -> str:
        """A short hash of the words in order: what token id i means (a kept model records the one it was
        trained with)."""
        return hashlib.sha256("\n".join(self.words).encode()).hexdigest()[:16]

    @property
    def important(self) -> np.ndarray:
        return self.frame["important"].to_numpy(dtype=bool)

    def per_class(self, name: str) -> np.ndarray:
        """(K, |S|): the columns `<name>_class_k`, e.g. count, alpha, heldout_alpha, heldout_presence."""
        return np.stack([self.column(column) for column in class_columns(name, self.num_classes)])

    def importance(self) -> np.ndarray:
        """|alpha_s| for two classes, max_k |alpha_s^(k)| for more; NaN for tokens without statistics."""
        return self.column("importance")

    def occurring(self) -> np.ndarray:
        """Tokens that occur in the training split and are not special: the ones with statistics."""
        return np.isfinite(self.importance()) & (self.per_class("count").sum(axis=0) > 0)


def top_decile(importance: np.ndarray) -> np.ndarray:
    """Important tokens of real data: the tenth of the (non-NaN) tokens with the largest importance."""
    threshold = np.nanquantile(importance, 0.9)
    return np.nan_to_num(importance, nan=-np.inf) >= threshold


def _classes_path(path: Path) -> Path:
    return path.with_suffix(".json")


def write_token_table(path: Path, table: TokenTable) -> None:
    write_csv(path, table.frame, float_format="%.17g")  # alpha exactly, so alpha == 0 survives the round trip
    write_json(_classes_path(path), {"num_classes": table.num_classes, "tokens": len(table.frame)})


def read_token_table(path: Path) -> TokenTable:
    # Only the number columns may be empty (NaN); a word such as "nan" or "null" stays a word.
    try:
        header = pd.read_csv(require_output(path, producer="prepare"), nrows=0).columns
        numbers = {column: [""] for column in header if column != "word"}
        frame = pd.read_csv(path, keep_default_na=False, na_values=numbers)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise damaged(path, error, "prepare") from None
    declared = read_json(_classes_path(path), producer="prepare")
    if not isinstance(declared, dict) or not isinstance(declared.get("num_classes"), int):
        raise damaged(_classes_path(path), KeyError("num_classes"), "prepare")
    if declared.get("tokens", len(frame)) != len(frame):  # a table cut or edited after prepare wrote it
        raise damaged(path, ValueError(), "prepare", f"{len(frame):,} tokens where {_classes_path(path).name} "
                                                     f"declares {declared['tokens']:,}")
    return TokenTable(frame, declared["num_classes"])
