"""The per-token table a dataset's prepare stage writes: the token as text, its statistics and type, and
which tokens are important (what the selection checks look for) or special (<unk>, left out of statistics).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from toksel.data.frequency import TokenStatistics
from toksel.io import require_output, write_csv


def token_table(statistics: TokenStatistics, words: list[str], important: np.ndarray,
                special: np.ndarray) -> pd.DataFrame:
    table = pd.DataFrame({"token": np.arange(len(words)), "word": words, **statistics.as_columns()})
    table["important"] = important.astype(bool)
    table["special"] = special.astype(bool)
    return table


def top_decile(importance: np.ndarray) -> np.ndarray:
    """Important tokens of real data: the tenth of the (non-NaN) tokens with the largest importance
    (|alpha_s|, or max_k |alpha_s^(k)| for more than two classes)."""
    threshold = np.nanquantile(importance, 0.9)
    return np.nan_to_num(importance, nan=-np.inf) >= threshold


def num_classes(table: pd.DataFrame) -> int:
    """K: the number of class-k columns a multi-class table holds; 2 for a binary table (which has none)."""
    return sum(column.startswith("alpha_class_") for column in table.columns) or 2


def class_alphas(table: pd.DataFrame) -> np.ndarray:
    """(K, |S|): the class-k signed frequencies alpha_s^(k) of a multi-class table."""
    return np.stack([table[f"alpha_class_{k}"].to_numpy() for k in range(num_classes(table))])


def importance(table: pd.DataFrame) -> np.ndarray:
    """|alpha_s| for two classes, max_k |alpha_s^(k)| for more; NaN for tokens without statistics."""
    if num_classes(table) == 2:
        return np.abs(table["alpha"].to_numpy())
    return np.abs(class_alphas(table)).max(axis=0)


def occurring(table: pd.DataFrame) -> np.ndarray:
    """Tokens that occur in the training split and are not special: the ones with statistics."""
    if num_classes(table) == 2:
        count = table["count_positive"] + table["count_negative"]
    else:
        count = table.filter(like="count_class_").sum(axis=1)
    return np.isfinite(importance(table)) & (count > 0).to_numpy()


def write_token_table(path: Path, table: pd.DataFrame) -> None:
    write_csv(path, table, float_format="%.17g")  # alpha exactly, so alpha == 0 survives the round trip


def read_token_table(path: Path) -> pd.DataFrame:
    # Only the number columns may be empty (NaN); a word such as "nan" or "null" stays a word.
    header = pd.read_csv(require_output(path, producer="prepare"), nrows=0).columns
    numbers = {column: [""] for column in header if column != "word"}
    return pd.read_csv(path, keep_default_na=False, na_values=numbers)
