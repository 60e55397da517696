"""Put back a dvc.lock that a kill cut: `python -m tools.heal_lock` (run by `make repro` before `dvc repro`).

DVC rewrites dvc.lock in place after every stage; a kill while it writes (SIGKILL, a lost machine) leaves the
file cut, and every later `dvc repro` then stops with "'./dvc.lock' validation failed" until it is mended by
hand. Each stage keeps a copy of the file as DVC started it (toksel.runtime.workspace.keep_lock_copy). A dvc.lock
that DVC's own schema refuses is set aside as dvc.lock.damaged and replaced by that copy, which lacks at most
the record of the stage that was running: `dvc repro` runs that stage again, or restores it from its run
cache. Without a good copy the cut file is only set aside: DVC then runs, or restores from its run cache,
every stage. A whole file, or none, is left alone. Exit code 0, with one line when something was mended.
"""

from __future__ import annotations

import sys
from pathlib import Path

from toksel.runtime.workspace import LOCK, LOCK_COPY


def whole(path: Path) -> bool:
    """Whether DVC would read `path` as a lock file."""
    import voluptuous
    from dvc.exceptions import DvcException
    from dvc.schema import COMPILED_LOCKFILE_SCHEMA
    from dvc.utils.serialize import load_yaml

    try:
        COMPILED_LOCKFILE_SCHEMA(load_yaml(path))
    except (DvcException, voluptuous.Invalid, OSError):
        return False
    return True


def heal(project: Path) -> str | None:
    """Mend `project`'s dvc.lock if it is cut; what was done, or None when it was whole (or absent)."""
    lock, copy = project / LOCK, project / LOCK_COPY
    if not lock.exists() or whole(lock):
        return None
    damaged = lock.with_name(f"{lock.name}.damaged")
    lock.replace(damaged)
    if copy.exists() and whole(copy):
        lock.write_bytes(copy.read_bytes())
        return (f"{lock.name} was cut (DVC was stopped while writing it): set aside as {damaged.name} and replaced "
                "by its copy from the start of the last stage, which runs again")
    return (f"{lock.name} was cut (DVC was stopped while writing it) and no whole copy was kept: set aside as "
            f"{damaged.name}; dvc repro runs every stage again, or restores it from its run cache")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args:
        print("usage: python -m tools.heal_lock   (in the project root)", file=sys.stderr)
        return 2
    done = heal(Path.cwd())
    if done is not None:
        print(f"heal_lock: {done}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
