"""The shared entry point of every stage: `python -m pipelines.<stage> [key=value ...]`.

Loads and validates the config (before anything is opened or written), runs the stage inside its MLflow
run, and turns bad input into one line on stderr and exit code 2.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Sequence

from toksel.config import Config, describe, load_config
from toksel.distributed import WorkerFinished
from toksel.errors import ToksError
from toksel.tracking import StageRun, stage_run

StageBody = Callable[[Config, StageRun], None]


def show_progress() -> bool:
    """Progress bars on a terminal, off in CI (CI set) or when TOKSEL_PROGRESS=0."""
    if os.environ.get("TOKSEL_PROGRESS") is not None:
        return os.environ["TOKSEL_PROGRESS"] not in ("0", "false", "")
    return not os.environ.get("CI") and sys.stderr.isatty()


def run_stage(stage: str, sections: tuple[str, ...], body: StageBody, argv: Sequence[str] | None = None,
              seeded: bool = False) -> int:
    """Run `body` as the stage `stage` (its config sections `sections`); seeded: once per seed (`seed=`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(arg in ("-h", "--help") for arg in argv):
        print(f"usage: python -m pipelines.{stage} [key=value ...]\n\nkeys, with their values in params.yaml:")
        try:
            overrides = [arg for arg in argv if arg not in ("-h", "--help")]
            print("\n".join(describe(load_config(overrides), sections)))
            if seeded:
                print(f"  {'seed=0':<44} the model seed of this run (dvc.yaml runs each of base.seeds)")
        except ToksError as error:
            print(f"  ({error})")
        return 0
    # A known, harmless warning of the stack (a `noload` deprecation notice): keep the stage output readable.
    warnings.filterwarnings("ignore", message=".*noload.*")
    try:
        config = load_config(argv)
        with stage_run(stage, config, sections, seeded) as run:
            body(config, run)
    except WorkerFinished:  # a DDP worker's share is done; rank 0 writes the outputs
        return 0
    except ToksError as error:
        print(f"{stage}: {error}", file=sys.stderr)
        return 2
    return 0
