"""Live curves: a fit's metrics sent to MLflow as it trains (`tracking.live`), for long GPU trainings.

Lightning's own MLFlowLogger, in an experiment of their own (<experiment>-live): the pipeline's view, which publish
rebuilds from the records, holds the same curves once the stage has ended. Sending them is a convenience: a store
that fails is a warning and the fit trains on without it. Changing no result, no compute stage depends on this.
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Any

from toksel.runtime.experiment import experiment_name, quiet_mlflow, store_lock
from toksel.runtime.paths import tracking_uri

if TYPE_CHECKING:
    from pytorch_lightning.loggers import Logger


def live_logger(run_name: str) -> Logger | None:
    """Lightning's MLflow logger for the fit `run_name`, or None (with a warning) where the store does not answer."""
    quiet_mlflow()
    # A dead server: a few seconds, not MLflow's minutes of retries.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    from pytorch_lightning.loggers import MLFlowLogger
    from pytorch_lightning.utilities import rank_zero_only

    class Forgiving(MLFlowLogger):
        """Stops sending, with one warning, at the store's first failure: the results matter, the live view not."""

        failed = False

        @rank_zero_only
        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            if not self.failed:
                self._guard(super().log_metrics, metrics, step)

        @rank_zero_only
        def log_hyperparams(self, params: Any) -> None:
            if not self.failed:
                self._guard(super().log_hyperparams, params)

        @rank_zero_only
        def finalize(self, status: str = "success") -> None:
            if not self.failed:
                self._guard(super().finalize, status)

        def _guard(self, call: Any, *args: Any) -> None:
            try:
                call(*args)
            except Exception as error:  # noqa: BLE001 (whatever the store raises)
                self.failed = True
                warnings.warn(f"live curves: the MLflow store failed ({type(error).__name__}); the fit goes on, its "
                              "curves are in its record", stacklevel=2)

    uri = tracking_uri()
    try:
        with store_lock(uri, wait=30):
            logger = Forgiving(experiment_name=f"{experiment_name()}-live", tracking_uri=uri, run_name=run_name)
            logger.experiment  # noqa: B018 (the run is made now, under the lock: a new store's schema by one process)
    except Exception as error:  # noqa: BLE001 (whatever the store raises)
        warnings.warn(f"live curves: the MLflow store {uri.split('@')[-1]} failed ({type(error).__name__}); the fit "
                      "trains without them", stacklevel=2)
        return None
    return logger
