"""The per-token table a dataset's prepare stage writes: statistics, type, and which tokens are important.

`important` marks the tokens the selection checks look for in each sequence (for synthetic data, the
generator's positive and negative tokens).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from toksel.io import require_output, write_csv
from toksel.theory.frequency import TokenStatistics


def token_table(statistics: TokenStatistics, important: np.ndarray, group: np.ndarray) -> pd.DataFrame:
    table = pd.DataFrame(statistics.as_columns())
    table.insert(0, "token", np.arange(len(table)))
    table["group"] = group
    table["important"] = important.astype(bool)
    return table


def write_token_table(path: Path, table: pd.DataFrame) -> None:
    write_csv(path, table, float_format="%.17g")  # alpha exactly, so alpha == 0 survives the round trip


def read_token_table(path: Path) -> pd.DataFrame:
    return pd.read_csv(require_output(path, producer="prepare"))
