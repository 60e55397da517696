"""Independent units of work through one interface, on Dask: the phase grid's cells, the calibration's replicates.

`map_units(work, units, settings, kind)` runs `work(unit)` for every unit and returns the results in the units'
order.
- Embedded, the default: Dask's local scheduler in this process, no server and no set-up, `compute.workers` units
  at a time (0: the machine's cores). `kind` says how: "threads" for units whose compiled passes release the GIL
  (a phase cell), "processes" for units that are mostly Python (a calibration replicate: a process each, started
  from a fresh server process, not a fork: the OpenMP runtime kills a fork of a process whose threads have run).
- A cluster: `compute.address`, or $TOKSEL_COMPUTE_ADDRESS, names a Dask scheduler (tcp://host:8786); the units
  go to its workers, whatever started them (dask-jobqueue on SLURM, dask-kubernetes, `dask scheduler` and
  `dask worker` by hand, a LocalCluster in a test). The workers need the project installed (docs/scale.md).
Each unit carries its seed and inputs, fixed before it is submitted, runs with one BLAS thread (a Dask worker
has one, and a BLAS that splits a sum over more threads rounds it otherwise: the max-margin QP's last digits),
and the results come back in the units' order: the numbers are the same whichever backend ran them. Which
backend runs them is not a result, so `compute` is in no stage's settings (pipelines/sections.py): pointing a
run at a cluster reruns nothing.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from threadpoolctl import threadpool_limits

from toksel.runtime.config import ComputeConfig
from toksel.runtime.errors import ToksError

ADDRESS_ENV = "TOKSEL_COMPUTE_ADDRESS"
CONNECT_SECONDS = 10  # a scheduler that does not answer within this is an error, not a wait
KINDS = ("threads", "processes")

Unit = TypeVar("Unit")
Result = TypeVar("Result")


def address(settings: ComputeConfig) -> str:
    """The Dask scheduler the units go to; "" for the embedded default."""
    return os.environ.get(ADDRESS_ENV) or settings.address


def map_units(work: Callable[[Unit], Result], units: Sequence[Unit], settings: ComputeConfig,
              kind: str = "threads", progress: Callable[[], Any] = lambda: None) -> list[Result]:
    """`work(unit)` for every unit, in the units' order; `progress()` after each one ends."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    if not units:
        return []
    one_thread = functools.partial(_in_one_thread, work)
    scheduler = address(settings)
    if scheduler:
        return _on_cluster(scheduler, one_thread, units, progress)
    return _embedded(one_thread, units, kind, settings.workers or os.cpu_count() or 1, progress)


def _in_one_thread(work: Callable[[Unit], Result], unit: Unit) -> Result:
    """`work(unit)` on one BLAS thread, in whichever process runs it."""
    with threadpool_limits(limits=1):
        return work(unit)


def _embedded(work: Callable[[Unit], Result], units: Sequence[Unit], kind: str, workers: int,
              progress: Callable[[], Any]) -> list[Result]:
    import dask
    from dask.diagnostics import Callback

    tasks = [dask.delayed(work, pure=False)(unit) for unit in units]
    # The BLAS thread count is the process's: set for the whole map, so that a thread's unit, ending, cannot lift it
    # under another's that is still running.
    with (dask.config.set({"multiprocessing.context": "forkserver"}), Callback(posttask=lambda *_: progress()),
          threadpool_limits(limits=1)):
        return list(dask.compute(*tasks, scheduler=kind, num_workers=min(workers, len(units))))


def _on_cluster(scheduler: str, work: Callable[[Unit], Result], units: Sequence[Unit],
                progress: Callable[[], Any]) -> list[Result]:
    from distributed import Client

    try:
        client = Client(scheduler, timeout=f"{CONNECT_SECONDS}s", set_as_default=False)
    except (OSError, TimeoutError) as error:
        raise ToksError(f"compute.address {scheduler}: no Dask scheduler answers there within {CONNECT_SECONDS} s "
                        f"({type(error).__name__}); start one, or set compute.address to \"\" to run here") from None
    with client:
        futures = client.map(work, units, pure=False)
        results = []
        try:
            for future in futures:  # in the units' order
                results.append(future.result())
                progress()
            return results
        except BaseException:  # a stopped stage stops its units too
            client.cancel(futures)
            raise
