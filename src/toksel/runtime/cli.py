"""The shared entry point of every stage: `python -m pipelines.<stage> [key=value ...]`.

Loads and validates the config (before anything is opened or written), runs the stage with its run records
(runtime/records.py: what MLflow will show of it), and turns bad input into one line on stderr and exit code 2.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from toksel.params import Config
from toksel.runtime.config import describe, load_config, params_hash, read_config
from toksel.runtime.distributed import is_worker
from toksel.runtime.errors import Terminated, ToksError, forget_stops, raise_if_stopped, stop
from toksel.runtime.fanout import map_units
from toksel.runtime.io import (
    captured_outputs,
    file_digests,
    outputs_together,
    remove_leftovers,
    write_files,
    write_json,
)
from toksel.runtime.known_warnings import silence_known_warnings
from toksel.runtime.records import (
    Recorded,
    RunRecord,
    flatten,
    gathered_metrics,
    source_tags,
    write_records,
)
from toksel.runtime.workspace import check_experiment_alone, check_params_unchanged, keep_lock_copy

# A full disk, a quota, a read-only or forbidden folder, a file-size limit (ulimit -f): the machine's fault, told in
# one line, not a traceback.
OUTPUT_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EFBIG}

StageBody = Callable[[Config, RunRecord], None]
SeedsFolder = Callable[[Config], Path]  # where a stage that runs every seed keeps them: <folder>/seed<k>/...
Seeds = Callable[[Config], list[int]]  # the seeds a stage runs, if not all of base.seeds
Variant = Callable[[Config], str]  # what tells a stage's runs on one dataset apart, for their names
PLAN_ENV = "TOKSEL_PLAN"  # set by tools/plan.py: a stage DVC starts says it would run, and ends at once
PLANNED = 3  # its exit code: DVC then skips the stages that read its outputs, which would run after it


def run_stage(stage: str, sections: tuple[str, ...], body: StageBody, argv: Sequence[str] | None = None,
              every_seed: SeedsFolder | None = None, seeds: Seeds | None = None, per_dataset: bool = True,
              variant: Variant | None = None) -> int:
    """Run `body` as the stage `stage` (its config sections `sections`).

    every_seed: the body runs for each seed (`seeds`, else base.seeds) as a unit of work (runtime/fanout.py) with a
    run record of its own; the metrics they record under every_seed(config) are gathered into <that folder>.json,
    keyed by their folders, for `dvc metrics`. per_dataset: the stage works on one dataset (the report: on all).
    variant: what tells its runs from the same stage's on the same dataset (an ablation's variant).
    """
    from_command_line = argv is None  # a process of its own (DVC's, a user's), not a call from Python
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(arg in ("-h", "--help") for arg in argv):
        return _help(stage, sections, [arg for arg in argv if arg not in ("-h", "--help")])
    if os.environ.get(PLAN_ENV):
        print(f"{stage}: would run (a plan: nothing computed)", flush=True)
        return PLANNED
    silence_known_warnings()
    with _signals_raise():
        return _run(stage, sections, body, argv, every_seed, seeds, from_command_line,
                    RunNaming(stage, per_dataset, variant))


STOPPING = (signal.SIGTERM, signal.SIGINT)  # a `kill`, DVC or CI stopping a stage; Ctrl-C
PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when the one that started it ends


@contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM and SIGINT raise Terminated, so the stage closes its runs as KILLED and writes nothing."""
    forget_stops()
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
    """SIGTERM when the process that started the stage (DVC) ends, so that no stage writes after DVC has gone
    (Linux only)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # it ended before the request
        raise Terminated(signal.SIGTERM)


@dataclasses.dataclass(frozen=True)
class RunNaming:
    stage: str
    per_dataset: bool
    variant: Variant | None

    def _parts(self, config: Config, seeded: bool = False) -> list[str]:
        parts = [self.stage, config.dataset if self.per_dataset else None,
                 self.variant(config) if self.variant else None, f"seed {config.seed}" if seeded else None]
        return [part for part in parts if part]

    def name(self, config: Config, seeded: bool) -> str:
        """What a run is, in words: `gradient_flow imdb seed 1`, `ablation yelp_polarity two_layer_kq seed 0`."""
        return " ".join(self._parts(config, seeded))

    def records_path(self, config: Config) -> Path:
        """runs/<stage>[/<dataset>][/<variant>].json: the stage's run records, a DVC output of their own."""
        return Path("runs", *[part.replace(" ", "") for part in self._parts(config)]).with_suffix(".json")

    def record(self, config: Config, sections: tuple[str, ...], seeded: bool, dataset_input: bool,
               recorded: Recorded) -> RunRecord:
        """The run's record: tagged with the stage, its dataset, seed and settings' digest; its parameters the
        effective values of its sections, flattened."""
        resolved = config.sections(sections)
        tags = {"stage": self.stage, "params_hash": params_hash(resolved), **source_tags(self.stage),
                **({"dataset": config.dataset} if self.per_dataset else {}),
                **({"seed": str(config.seed)} if seeded else {})}
        params = {**flatten(resolved), **({"seed": config.seed} if seeded else {})}
        record = RunRecord(self.name(config, seeded), tags, params, recorded)
        if dataset_input:  # its MLflow input: the digest of its settings and files (an edited file is another dataset)
            data = config.data
            files = file_digests(data.files)
            source = ", ".join(files) if data.source == "file" else data.origin
            digest = params_hash({"data": config.sections(["data"]), **({"files": files} if files else {})})
            record.inputs.append({"name": config.dataset, "source": source, "digest": digest})
        return record


def _help(stage: str, sections: tuple[str, ...], overrides: list[str]) -> int:
    """--help: the stage's keys, their values and what they mean; a reader that stops early (`| head`) is no error."""
    try:
        lines = describe(load_config(overrides), sections)
    except ToksError as error:
        lines = [f"  ({error})"]
    try:
        print(f"usage: python -m pipelines.{stage} [key=value ...]", "", "keys, with their values in params.yaml:",
              *lines, sep="\n", flush=True)
    except BrokenPipeError:  # Python flushes stdout again as it exits: let that go nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _run(stage: str, sections: tuple[str, ...], body: StageBody, argv: list[str],
         every_seed: SeedsFolder | None, seeds: Seeds | None, from_command_line: bool, naming: RunNaming) -> int:
    try:
        if from_command_line:
            _stop_with_parent()
            if not is_worker():
                keep_lock_copy()
        read = read_config(argv)
        config = read.config
        check_experiment_alone()
        if every_seed is not None and any(arg.split("=", 1)[0].lstrip("+") == "seed" for arg in argv):
            raise ToksError(f"config error: {stage} runs every seed of base.seeds in one process: for one seed, "
                            "set base.seeds=[<seed>] instead of seed=")
        if not is_worker():
            for line in remove_leftovers():
                print(f"{stage}: {line}", file=sys.stderr)
        with outputs_together():  # every output of the stage (all its seeds, its run records) replaces the old ones
            if every_seed is None:
                record = naming.record(config, sections, False, told_dataset(argv), [])
                done = [_run_unit(SeedUnit(body, record, config), captured=is_worker())]
            else:
                configs = [replace(config, seed=seed) for seed in (seeds(config) if seeds else config.base.seeds)]
                units = [SeedUnit(body, naming.record(seeded, sections, True, told_dataset(argv), []), seeded)
                         for seeded in configs]
                # in-process under DDP, whose processes Lightning starts itself
                done = ([_run_unit(unit) for unit in units] if config.train.strategy == "ddp"
                        else map_units(_run_unit, units, config.compute, "processes"))
            if is_worker():  # a DDP worker has trained its share of every fit, as rank 0 did: rank 0 writes the files
                return 0
            for record, files, seconds in done:
                write_files(files)
                _tell(record, seconds)
            if every_seed is not None:
                recorded = [item for record, _, _ in done for item in record.recorded]
                write_json(every_seed(config).with_suffix(".json"), gathered_metrics(recorded, every_seed(config)))
            params_yaml = read.params_path.read_text() if read.params_path.exists() else ""  # publish shows it
            write_records(naming.records_path(config), [record for record, _, _ in done],
                          {"params_yaml": params_yaml})
            # at the end, before the outputs replace the old ones
            check_params_unchanged(read.params_path, read.params_digest)
            check_experiment_alone()
            raise_if_stopped()
    except ToksError as error:
        print(f"{stage}: {error}", file=sys.stderr)
        return 2
    except Terminated as stopped:
        print(f"{stage}: stopped by {signal.Signals(stopped.signum).name}: it wrote nothing", file=sys.stderr)
        return 128 + stopped.signum
    except OSError as error:
        if error.errno not in OUTPUT_ERRORS:
            raise
        where = f" ({error.filename})" if error.filename else ""
        print(f"{stage}: cannot write its outputs{where}: {os.strerror(error.errno)}; it wrote nothing",
              file=sys.stderr)
        return 2
    return 0


@dataclasses.dataclass(frozen=True)
class SeedUnit:
    """A run of the stage's body (one seed's): a unit of work (runtime/fanout.py)."""
    body: StageBody
    record: RunRecord
    config: Config


def _run_unit(unit: SeedUnit, captured: bool = True) -> tuple[RunRecord, dict[Path, bytes], float]:
    """The unit's run: its record, its outputs (captured, to be written with the other seeds'; or in place), and
    its seconds."""
    silence_known_warnings()
    started = time.perf_counter()
    with captured_outputs() if captured else contextlib.nullcontext({}) as files, unit.record.run():
        unit.body(unit.config, unit.record)
    return unit.record, files, time.perf_counter() - started


def _tell(record: RunRecord, seconds: float) -> None:
    """One line per unit of work: what it was, how long it took, where its result is."""
    if not is_worker():
        outcome = f"{record.outcome}; " if record.outcome else ""
        written = f": {record.written}" if record.written else ""
        print(f"{record.name}: {outcome}done in {seconds:.1f} s{written}", flush=True)


def told_dataset(argv: Sequence[str]) -> bool:
    """Whether the stage was given its dataset (dvc.yaml's per-dataset stages are): then it is the run's input."""
    return any(arg.split("=", 1)[0] == "dataset" for arg in argv)
