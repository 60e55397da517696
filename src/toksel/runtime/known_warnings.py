"""The stack's known, harmless warnings and notices, silenced in one place so that a stage's output holds only
what is worth reading. Each pattern says why it is harmless here."""

from __future__ import annotations

import logging
import warnings

HARMLESS = {
    ".*noload.*": "a deprecation notice inside the stack, not about our code",
    ".*LeafSpec.*": "a deprecation inside Lightning on torch 2.13",
    ".*log_every_n_steps.*": "a tiny split gives fewer batches than Lightning's logging interval",
    ".*does not have many workers.*": "the loaders run in the main process on purpose: the batches are cut from "
                                      "arrays already in memory",
    ".*exists and is not empty.*": "a resumed fit writes into the folder that holds its own checkpoints",
    ".*epoch level in distributed setting.*": "under DDP every process validates and tests on every row: its "
                                              "numbers need no syncing",
    ".*A worker stopped while some jobs were given to the executor.*": "loky replaces a worker process whose memory "
        "grew 300 MB past what it held after its first unit, as calibrate's do, which keep each dataset's draws read "
        "(IMDB's five: 700 MB): its units go on in the new one, none is lost",
}


class _WithoutAdvert(logging.Filter):
    """Lightning's notice advertising another package."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in record.getMessage()


def silence_known_warnings() -> None:
    """Ignore the HARMLESS warnings (in the current warnings context) and Lightning's advert."""
    for pattern in HARMLESS:
        warnings.filterwarnings("ignore", message=pattern)
    lightning = logging.getLogger("pytorch_lightning.utilities.rank_zero")
    if not any(isinstance(existing, _WithoutAdvert) for existing in lightning.filters):
        lightning.addFilter(_WithoutAdvert())
