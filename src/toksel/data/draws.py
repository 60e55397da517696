"""Which draw of a dataset each seed reads.

A seed varies the initialisation and, where the data can vary, the data too: the synthetic generator's
sequences, a text dataset's label-balanced subsample of its splits (data.max_train, data.max_test), or, for a
training split used whole (IMDB's 25,000 reviews), a bootstrap resample of its rows (data.bootstrap). Each such seed
has its own draw, data/processed/<dataset>/seed<k>/, from a generator seeded with (base.data_seed, k), so that a
claim's interval over the seeds holds the spread of the data as well as of the initialisation. Without bootstrap,
a dataset used whole has a single draw, data/processed/<dataset>/all/, which every seed reads: its seeds vary the
initialisation only, and the report says so. `prepare` writes draws.json beside them (seed -> folder); the other
stages find a seed's data there.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from toksel.params import DataConfig
from toksel.runtime.errors import ToksError
from toksel.runtime.io import read_json, write_json
from toksel.runtime.paths import processed_dir

SHARED = "all"  # the folder of a dataset used whole
MANIFEST = "draws.json"


def drawn(data: DataConfig) -> bool:
    """Whether the data change with the seed: generated, a subsample of a split, or a bootstrap resample."""
    return data.source == "synthetic" or data.max_train > 0 or data.max_test > 0 or data.bootstrap


def what_varies(data: DataConfig) -> str:
    """What a seed's draw varies, in a few words (the report's dataset table)."""
    if data.source == "synthetic":
        return "data (a fresh draw of the generator) and initialisation"
    if data.max_train > 0 or data.max_test > 0:
        resample = " (a bootstrap resample where it takes every row)" if data.bootstrap else ""
        return f"data (a label-balanced subsample{resample}) and initialisation"
    return "data (a bootstrap resample of the training rows) and initialisation" if data.bootstrap else \
        "initialisation only"


def draws(data: DataConfig, seeds: Sequence[int]) -> dict[str, int | None]:
    """folder name -> the seed it is drawn for (None: the one draw every seed reads)."""
    return {f"seed{seed}": seed for seed in seeds} if drawn(data) else {SHARED: None}


def draw_seed(data_seed: int, seed: int | None) -> int | tuple[int, int]:
    """The generator's seed of a draw: base.data_seed with the seed it is drawn for, or alone for the one draw."""
    return data_seed if seed is None else (data_seed, seed)


def write_manifest(dataset: str, folders: dict[str, int | None], seeds: Sequence[int]) -> None:
    """draws.json: each seed's folder."""
    write_json(processed_dir(dataset) / MANIFEST,
               {str(seed): (SHARED if SHARED in folders else f"seed{seed}") for seed in seeds})


def data_dir(dataset: str, seed: int) -> Path:
    """The folder of the draw `seed` reads: its splits (train.npz, test.npz) and token table (tokens.csv)."""
    manifest = read_json(processed_dir(dataset) / MANIFEST, producer=f"prepare@{dataset}")
    if not isinstance(manifest, dict) or str(seed) not in manifest:
        raise ToksError(f"{processed_dir(dataset)} holds no data for seed {seed}: run prepare again with this seed "
                        f"in base.seeds (dvc repro prepare@{dataset})")
    return processed_dir(dataset) / str(manifest[str(seed)])
