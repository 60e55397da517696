"""A stage's results belong to the parameters it read, and DVC's own record, dvc.lock, survives a kill.

DVC records a stage's parameters by reading params.yaml again when the stage ends. Two things would make that record
lie, and are refused in one line before the stage's outputs replace the old ones: params.yaml changed while the stage
ran; or a second `dvc exp run` in the workspace rewrote the running experiment's records (.dvc/tmp/exps/run/) and
parameters, which DVC 3 lets it do. The first stage of a workspace experiment claims the workspace for its DVC
process (by PID and start time): another experiment's stage stops while that process lives, and so does a stage
whose experiment DVC's records no longer name. Queued experiments run in folders of their own.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil

from toksel.runtime.config import params_digest
from toksel.runtime.errors import ToksError
from toksel.runtime.processes import Process

LOCK = Path("dvc.lock")
LOCK_COPY = Path(".dvc") / "tmp" / "toksel-dvc.lock"  # dvc.lock as it was when DVC started the last stage
SET_ASIDE = Path(".dvc") / "tmp" / "toksel-workspace.lock"  # the workspace's own while a profile's experiment starts
CLAIM = Path(".dvc") / "tmp" / "toksel-experiment.json"
DVC_RUN = Path(".dvc") / "tmp" / "exps" / "run" / "workspace"  # DVC's record of the experiment in the workspace
ONE_AT_A_TIME = ("run experiments in one workspace one after the other, or queue them (`dvc exp run --queue "
                 "-S ...`, then `dvc queue start`)")


def put_back() -> bool:
    """The workspace's own dvc.lock back in place (none where it had none), if a profile set it aside; whether one
    was."""
    if not SET_ASIDE.is_file():
        return False
    if SET_ASIDE.stat().st_size:
        SET_ASIDE.replace(LOCK)
    else:
        LOCK.unlink(missing_ok=True)
        SET_ASIDE.unlink()
    return True


def keep_lock_copy() -> None:
    """Under DVC, copy dvc.lock as the stage starts, when it is whole. DVC rewrites it in place after every stage
    (about 0.4 s for this pipeline's); a kill then leaves it cut, and every later `dvc repro` refuses to start:
    `python -m tools.heal_lock` (run by `make repro`) puts this copy back."""
    if os.environ.get("DVC_STAGE") and LOCK.is_file():
        _replace(LOCK_COPY, LOCK.read_bytes())


def check_params_unchanged(path: Path, digest_read: str) -> None:
    """The parameters file still holds the values the stage read (else DVC would record other parameters)."""
    try:
        unchanged = params_digest(path) == digest_read
    except (ToksError, OSError):  # gone, or no longer YAML
        unchanged = False
    if not unchanged:
        raise ToksError(f"{path} changed while this stage ran (an edit, or another `dvc exp run` in this "
                        "workspace): its outputs are not replaced; run it again")


def workspace_experiment() -> str | None:
    """The DVC experiment this stage runs in, if it runs in the workspace itself (not a queued one's folder)."""
    name = os.environ.get("DVC_EXP_NAME")
    root = os.environ.get("DVC_ROOT")
    if not name or not root or Path(root).resolve() != Path.cwd().resolve():
        return None
    return name


def _dvc_record() -> tuple[str | None, int | None]:
    """The experiment DVC says runs in the workspace, and the PID of the DVC process running it."""
    try:
        name = json.loads((DVC_RUN / "workspace.run").read_text()).get("name")
        pid = json.loads((DVC_RUN / "workspace.json").read_text()).get("pid")
    except (OSError, ValueError, AttributeError):
        return None, None
    return name, pid if isinstance(pid, int) else None


def check_experiment_alone() -> None:
    """Inside `dvc exp run` in the workspace: this experiment is the only one there (see the module's notes)."""
    name = workspace_experiment()
    if name is None:
        return
    recorded_name, dvc_pid = _dvc_record()
    ancestors = {parent.pid for parent in psutil.Process().parents()}
    if recorded_name != name or dvc_pid not in ancestors:
        other = f"experiment {recorded_name!r}" if recorded_name and recorded_name != name else "another experiment"
        raise ToksError(f"{other} was started in this workspace while experiment {name!r} ran, and DVC let it "
                        f"rewrite {name!r}'s records (params.yaml may hold its parameters now): {name!r} stops "
                        f"here, before this stage's outputs; {ONE_AT_A_TIME}")
    ours = {"name": name, "process": str(Process.of(dvc_pid))}
    claim = _read_claim()
    # Told apart by their DVC processes, not their names: `dvc exp run -n same` twice is two experiments too.
    if claim is not None and claim["process"] != ours["process"] and Process.parse(claim["process"]).running():
        raise ToksError(f"experiment {claim.get('name')!r} is running in this workspace (DVC PID "
                        f"{Process.parse(claim['process']).pid}): experiment {name!r} stops; {ONE_AT_A_TIME}")
    if claim != ours:
        _replace(CLAIM, json.dumps(ours).encode())


def _read_claim() -> dict | None:
    """The claim on the workspace; None where there is none, or not a valid one."""
    try:
        claim = json.loads(CLAIM.read_text())
        Process.parse(claim["process"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return claim


def _replace(path: Path, content: bytes) -> None:
    """`path` holds `content`, whole: written beside it, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_bytes(content)
    partial.replace(path)
