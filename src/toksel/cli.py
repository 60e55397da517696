"""The shared entry point of every stage: `python -m pipelines.<stage> [key=value ...]`.

Loads and validates the config (before anything is opened or written), runs the stage inside its MLflow
run, and turns bad input into one line on stderr and exit code 2.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from toksel.config import Config, describe, load_config, read_config
from toksel.distributed import WorkerFinished, is_worker
from toksel.errors import Terminated, ToksError
from toksel.io import outputs_together, recover_outputs, write_json
from toksel.known_warnings import silence_known_warnings
from toksel.tracking import StageRun, gathered_metrics, stage_run
from toksel.workspace import check_experiment_alone, check_params_unchanged, keep_lock_copy

# A full disk, a quota, a read-only or forbidden folder, a file-size limit (ulimit -f): the machine's fault, told in
# one line, not a traceback.
OUTPUT_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EFBIG}

StageBody = Callable[[Config, StageRun], None]
SeedsFolder = Callable[[Config], Path]  # where a stage that runs every seed keeps them: <folder>/seed<k>/...
Seeds = Callable[[Config], list[int]]  # the seeds a stage runs, if not all of base.seeds
Variant = Callable[[Config], str]  # what tells a stage's runs on one dataset apart, for their names


def show_progress() -> bool:
    """Progress bars on a terminal, off in CI (CI set) or when TOKSEL_PROGRESS=0."""
    if os.environ.get("TOKSEL_PROGRESS") is not None:
        return os.environ["TOKSEL_PROGRESS"] not in ("0", "false", "")
    return not os.environ.get("CI") and sys.stderr.isatty()


def run_stage(stage: str, sections: tuple[str, ...], body: StageBody, argv: Sequence[str] | None = None,
              seeded: bool = False, every_seed: SeedsFolder | None = None, seeds: Seeds | None = None,
              per_dataset: bool = True, variant: Variant | None = None) -> int:
    """Run `body` as the stage `stage` (its config sections `sections`).

    seeded: the run is of one seed (`seed=`, tagged). every_seed: the body runs once for every seed of base.seeds,
    one after the other in this one process (its imports and data loaded once), each seed its own MLflow stage run
    tagged `seed`, as a stage per seed would be; the metrics the seeds record under every_seed(config) are then
    gathered into <that folder>.json, keyed by their folders (seed0.<name>, or <arm>.seed0.<name>), for `dvc metrics`.
    seeds: which seeds every_seed runs, where a stage runs fewer than base.seeds (its section says how many).
    per_dataset: the stage works on one dataset (False: on all of them, as the report). variant: what tells its
    runs from the same stage's on the same dataset, for their names (an ablation's variant).
    """
    from_command_line = argv is None  # a process of its own (DVC's, a user's), not a call from Python
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(arg in ("-h", "--help") for arg in argv):
        print(f"usage: python -m pipelines.{stage} [key=value ...]\n\nkeys, with their values in params.yaml:")
        try:
            overrides = [arg for arg in argv if arg not in ("-h", "--help")]
            print("\n".join(describe(load_config(overrides), sections)))
            if seeded:
                print(f"  {'seed=0':<44} the model seed of this run")
        except ToksError as error:
            print(f"  ({error})")
        return 0
    silence_known_warnings()
    with _signals_raise():
        return _run(stage, sections, body, argv, seeded, every_seed, seeds, from_command_line,
                    RunNaming(per_dataset, variant))


STOPPING = (signal.SIGTERM, signal.SIGINT)  # a `kill`, DVC or CI stopping a stage; Ctrl-C
PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when the one that started it ends


@contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM and SIGINT raise Terminated, so the stage closes its runs as KILLED and keeps its old outputs."""
    def stop(signum: int, frame: object) -> None:
        raise Terminated(signum)

    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    previous = {signum: signal.signal(signum, stop) for signum in STOPPING}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _stop_with_parent() -> None:
    """SIGTERM when the process that started the stage (DVC) ends, so that the stage never writes after DVC has
    gone (Linux; elsewhere nothing); a parent already gone is an immediate stop."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # it ended before the request
        raise Terminated(signal.SIGTERM)


@dataclasses.dataclass(frozen=True)
class RunNaming:
    per_dataset: bool
    variant: Variant | None

    def of(self, config: Config) -> dict:
        """stage_run's keyword arguments that name a run of `config`."""
        return {"per_dataset": self.per_dataset, "variant": self.variant(config) if self.variant else None}


def _run(stage: str, sections: tuple[str, ...], body: StageBody, argv: list[str], seeded: bool,
         every_seed: SeedsFolder | None, seeds: Seeds | None, from_command_line: bool, naming: RunNaming) -> int:
    try:
        if from_command_line:
            _stop_with_parent()
            if not is_worker():
                keep_lock_copy()
        read = read_config(argv)
        config = read.config
        check_experiment_alone()

        def check_workspace() -> None:  # at the end, before the outputs replace the old ones
            check_params_unchanged(read.params_path, read.params_digest)
            check_experiment_alone()

        if every_seed is not None and any(arg.split("=", 1)[0].lstrip("+") == "seed" for arg in argv):
            raise ToksError(f"config error: {stage} runs every seed of base.seeds in one process: for one seed, "
                            "set base.seeds=[<seed>] instead of seed=")
        if not is_worker():
            for line in recover_outputs():
                print(f"{stage}: {line}", file=sys.stderr)
        # Every output of the stage (all its seeds) replaces the old ones together, and only then is logged.
        if every_seed is None:
            with stage_run(stage, config, sections, seeded, dataset_input=told_dataset(argv),
                           **naming.of(config)) as run, outputs_together():
                body(config, run)
                check_workspace()
        else:
            with outputs_together():
                _every_seed(stage, sections, config, body, every_seed(config), told_dataset(argv),
                            seeds(config) if seeds is not None else config.base.seeds, naming)
                check_workspace()
    except WorkerFinished:  # a DDP worker's share is done; rank 0 writes the outputs
        return 0
    except ToksError as error:
        print(f"{stage}: {error}", file=sys.stderr)
        return 2
    except Terminated as stopped:
        print(f"{stage}: stopped by {signal.Signals(stopped.signum).name}: its MLflow runs are marked KILLED and its "
              "old outputs kept", file=sys.stderr)
        return 128 + stopped.signum
    except OSError as error:
        if error.errno not in OUTPUT_ERRORS:
            raise
        where = f" ({error.filename})" if error.filename else ""
        print(f"{stage}: cannot write its outputs{where}: {os.strerror(error.errno)}; the old outputs are kept",
              file=sys.stderr)
        return 2
    return 0


def told_dataset(argv: Sequence[str]) -> bool:
    """Whether the stage was given its dataset (dvc.yaml's per-dataset stages are): then it is the run's input."""
    return any(arg.split("=", 1)[0] == "dataset" for arg in argv)


def _every_seed(stage: str, sections: tuple[str, ...], config: Config, body: StageBody, folder: Path,
                dataset_input: bool, seeds: list[int], naming: RunNaming) -> None:
    recorded: list[tuple[Path, dict]] = []
    for seed in seeds:
        seeded = dataclasses.replace(config, seed=seed)
        with stage_run(stage, seeded, sections, seeded=True, recorded=recorded, dataset_input=dataset_input,
                       **naming.of(seeded)) as run:
            body(seeded, run)
    if not is_worker():
        write_json(folder.with_suffix(".json"), gathered_metrics(recorded, folder))
