"""Which process of a distributed (DDP) run this is.

Lightning's `ddp` strategy starts one process per device by running the stage's command again, with
LOCAL_RANK and NODE_RANK set (torchrun and SLURM set RANK). Rank 0 owns the stage's MLflow run and writes its
outputs; the others, the workers, go through the same fits, train their share of each batch and write nothing.
"""

from __future__ import annotations

import os

RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID")


def is_worker() -> bool:
    """True in a DDP process other than global rank 0."""
    return any(os.environ.get(name, "0") != "0" for name in RANK_VARIABLES)

