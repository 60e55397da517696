"""Independent units of work (a stage's seeds, the d sweep's points, the phase grid's cells, the calibration's
replicates) through one call, `map_units(work, units, settings, kind)`; the results in the units' order.

Here, joblib runs `compute.workers` units at a time (0: one per core, or all of a few process units at once): kind
"threads" for compiled passes that release the GIL, "processes" (loky's, fresh, kept for the next map) for mostly
Python units or units with global state. `compute.address` or $TOKSEL_COMPUTE_ADDRESS names a Dask scheduler
instead (docs/scale.md; its workers need the project at the same path): an address no scheduler can have is refused
before any connection, and the handshake is bounded too. A unit's own units run one after another.

Every unit runs on one thread of BLAS, numba and torch (a sum split over threads rounds otherwise), so the numbers
are the same on any backend and `compute` is in no stage's settings. A unit carries the working directory and the
environment variables that steer the computation (Place.CARRIED), no password or token.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import os
import signal
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from threadpoolctl import threadpool_limits

from toksel.params import ComputeConfig
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
    scheduler = address(settings)
    workers = min(settings.workers or _workers_here(len(units), kind), len(units))
    # A unit's thread counts: all of them where it has its process to itself (a process unit, a cluster's worker,
    # a unit run here on its own); numba's alone, which is per thread, where it shares the process with other
    # threads' units (the map sets the rest for all of them).
    shared = kind == "threads" and not scheduler and workers > 1 and not _inside_unit.get()
    single = functools.partial(run_unit, work, Place.here(), not shared)
    # A unit's own units, or one worker here: one after another (a pool would cost its start-up for nothing).
    if _inside_unit.get() or (workers == 1 and not scheduler):
        return _collect((single(unit) for unit in units), progress)
    if scheduler:
        return _on_cluster(scheduler, single, units, progress)
    return _embedded(single, units, kind, workers, progress)


_inside_unit: ContextVar[bool] = ContextVar("inside_unit", default=False)


def _workers_here(units: int, kind: str) -> int:
    """One unit per core; but a few process units (3 seeds on 2 cores) all at once, or a last round of one would
    leave the other cores idle (train@imdb: 510 s as 2 + 1, 446 s as 3 at once)."""
    cores = os.cpu_count() or 1
    return units if kind == "processes" and units <= 2 * cores else cores


def _loaded(name: str) -> Any:
    """The module `name` if it is imported (import_module waits while another thread is still importing it)."""
    return importlib.import_module(name) if name in sys.modules else None


@contextmanager
def one_thread(whole_process: bool = True) -> Iterator[None]:
    """numba on one thread in this thread; with `whole_process`, BLAS and torch too (their counts are the
    process's). Each where loaded: unpickling a unit has imported its modules."""
    numba, torch = _loaded("numba"), _loaded("torch") if whole_process else None
    numba_before = numba.get_num_threads() if numba else None
    torch_before = torch.get_num_threads() if torch else None
    with threadpool_limits(limits=1) if whole_process else contextlib.nullcontext():
        try:
            if numba:
                numba.set_num_threads(1)
            if torch:
                torch.set_num_threads(1)
            yield
        finally:
            if numba:
                numba.set_num_threads(numba_before)
            if torch:
                torch.set_num_threads(torch_before)


@dataclass(frozen=True)
class Place:
    """Where a unit runs as if here: the working directory (the project, or a DVC experiment's copy) and the
    environment settings the stages read."""
    folder: str
    environment: tuple[tuple[str, str], ...]

    # Nothing else travels: no login (MLFLOW_TRACKING_PASSWORD, HF_TOKEN) is pickled into a unit.
    CARRIED = ("TOKSEL_DATA_MIRROR", "TOKSEL_PROGRESS", "HF_HUB_OFFLINE",
               "HF_DATASETS_OFFLINE", "DVC_EXP_NAME", "DVC_ROOT")

    @classmethod
    def here(cls) -> Place:
        return cls(os.getcwd(), tuple((name, os.environ[name]) for name in cls.CARRIED if name in os.environ))

    def enter(self) -> None:
        """In a worker: into the folder, with the settings (a no-op where the units were submitted)."""
        if not os.path.isdir(self.folder):
            raise ToksError(f"the project folder {self.folder} is not on this compute worker ({os.uname().nodename}):"
                            " the workers need the project at the same path (shared storage; docs/scale.md)")
        if os.getcwd() != self.folder:
            os.chdir(self.folder)
        os.environ.update((name, value) for name, value in self.environment if os.environ.get(name) != value)


def run_unit(work: Callable[[Unit], Result], place: Place, whole_process: bool, unit: Unit) -> Result:
    """`work(unit)` on one thread (one_thread), in whichever process runs it, as if where it was submitted."""
    place.enter()
    marked = _inside_unit.set(True)
    try:
        with one_thread(whole_process):
            return work(unit)
    finally:
        _inside_unit.reset(marked)


def _collect(results: Iterable[Result], progress: Callable[[], Any]) -> list[Result]:
    """The results as they come, `progress()` after each."""
    done = []
    for result in results:
        done.append(result)
        progress()
    return done


# loky's resource tracker, a process of its own, reports at its end the semaphores of workers a signal stopped, which
# it then removes itself: a notice the user can do nothing with. It reads its warning filters from the environment.
TRACKER_NOTICE = "ignore:resource_tracker:UserWarning"


def quiet_resource_tracker() -> None:
    """Have loky's resource tracker, started with this environment, keep its shutdown notice to itself."""
    filters = os.environ.get("PYTHONWARNINGS", "")
    if TRACKER_NOTICE not in filters.split(","):
        os.environ["PYTHONWARNINGS"] = ",".join(part for part in (filters, TRACKER_NOTICE) if part)


def _embedded(work: Callable[[Unit], Result], units: Sequence[Unit], kind: str, workers: int,
              progress: Callable[[], Any]) -> list[Result]:
    """joblib's threads, or its loky processes: reused by the stage's next map, ended on an error or a signal."""
    from joblib import Parallel, delayed

    if kind != "threads":
        quiet_resource_tracker()
    # max_nbytes None: the units' arrays are pickled as they are, never swapped for read-only memory maps.
    parallel = Parallel(n_jobs=workers, backend="threading" if kind == "threads" else "loky", batch_size=1,
                        max_nbytes=None, return_as="generator")
    # The thread counts are the process's: set for the whole map of threads, so that a thread's unit, ending,
    # cannot lift them under another's that is still running.
    with one_thread() if kind == "threads" else contextlib.nullcontext():
        with ctrl_c_kept_from_workers() if kind != "threads" else contextlib.nullcontext():
            results = parallel(delayed(work)(unit) for unit in units)  # starts the workers, submits the first units
        return _collect(results, progress)


@contextmanager
def ctrl_c_kept_from_workers() -> Iterator[None]:
    """SIGINT blocked in this thread while it starts worker processes: they, and the executor's thread started here,
    which starts any later ones, inherit the block for good. Ctrl-C goes to every process of the terminal's group;
    the stage stops its workers itself, in one line, and a worker that got it would print a KeyboardInterrupt
    traceback, also while it starts, before any code of ours runs there. The stage's own Ctrl-C, if it comes now,
    waits for the block's end (another thread's, if any, takes it at once)."""
    if not hasattr(signal, "pthread_sigmask"):  # not POSIX
        yield
        return
    from multiprocessing import resource_tracker

    # The standard library's resource tracker, which loky starts before its first worker, unblocks SIGINT in the
    # thread that starts it: started first, it is left running.
    resource_tracker.ensure_running()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _on_cluster(scheduler: str, work: Callable[[Unit], Result], units: Sequence[Unit],
                progress: Callable[[], Any]) -> list[Result]:
    from distributed import Client

    security = _security(scheduler)
    _answering(scheduler, security)
    try:
        client = Client(scheduler, timeout=f"{CONNECT_SECONDS}s", set_as_default=False, security=security)
    except (OSError, TimeoutError, ValueError) as error:
        raise _not_answering(scheduler, error) from None
    with client:
        futures = client.map(work, units, pure=False)
        try:
            return _collect((future.result() for future in futures), progress)
        except BaseException:  # a stopped stage stops its units too
            client.cancel(futures)
            raise


SCHEMES = ("tcp", "tls", "ws", "wss")  # Dask's ways between machines (inproc is within one process)
ENCRYPTED = ("tls", "wss")


def _security(scheduler: str) -> Any:
    """Dask's security settings for `scheduler` (its TLS certificates, from Dask's configuration); a ToksError,
    before any connection, for an address no Dask scheduler can have."""
    from distributed.comm import get_address_host_port, parse_address
    from distributed.security import Security

    scheme, _ = parse_address(scheduler)  # no scheme: Dask's default, tcp
    if scheme not in SCHEMES:
        raise ToksError(f"compute.address {scheduler}: {scheme}:// is not a Dask scheduler's; give "
                        "tcp://<host>:<port> (tls:// with certificates), or \"\" to run here")
    try:
        host, port = get_address_host_port(scheduler)
    except ValueError:
        host, port = "", 0
    if not host or not 0 < port < 2**16:
        raise ToksError(f"compute.address {scheduler}: not a host and a port; give {scheme}://<host>:<port>, or \"\" "
                        "to run here")
    security = Security()
    try:
        context = security.get_connection_args("client")["ssl_context"]
    except (OSError, ValueError) as error:  # a certificate file missing or not one (ssl.SSLError is an OSError)
        raise ToksError(f"compute.address {scheduler}: Dask's TLS settings (distributed.comm.tls) cannot be used: "
                        f"{error}") from None
    if scheme in ENCRYPTED and context is None:
        raise ToksError(f"compute.address {scheduler}: {scheme}:// needs TLS certificates, and Dask's configuration "
                        "names none (distributed.comm.tls; docs/scale.md)")
    return security


def _answering(scheduler: str, security: Any) -> None:
    """Connect and shake hands as Dask does, within CONNECT_SECONDS in all. Client's own timeout bounds the
    connection, not the handshake: a listener that is not Dask (a web server, a silent port) would hold it for
    minutes, and a thread left waiting on it would hold the process at its exit."""
    from distributed.comm import connect

    async def shake_hands() -> None:
        comm = await connect(scheduler, timeout=CONNECT_SECONDS, **security.get_connection_args("client"))
        await comm.close()

    try:
        asyncio.run(asyncio.wait_for(shake_hands(), CONNECT_SECONDS))
    except (OSError, TimeoutError, ValueError) as error:
        raise _not_answering(scheduler, error) from None


def _not_answering(scheduler: str, error: Exception) -> ToksError:
    return ToksError(f"compute.address {scheduler}: no Dask scheduler answers there within {CONNECT_SECONDS} s "
                     f"({type(error).__name__}); start one, or set compute.address to \"\" to run here")
