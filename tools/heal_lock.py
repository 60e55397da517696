"""Put back a dvc.lock that a kill cut, or that a killed profile run left standing in for the workspace's: `python
-m tools.heal_lock` (`make repro` and `make quick` run it first).

A dvc.lock DVC's schema refuses is set aside as dvc.lock.damaged and replaced by the copy the last stage kept, if
whole (docs/operations.md, "A dvc.lock cut by a kill is mended"). Exit code 0; one line when something was mended.
"""

from __future__ import annotations

import sys
from pathlib import Path

from toksel.runtime.workspace import LOCK, LOCK_COPY, put_back


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
    damaged = lock.replace(lock.with_name(f"{lock.name}.damaged"))
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
    if put_back():  # a profile's experiment was killed while its dvc.lock stood in for the workspace's
        print("heal_lock: dvc.lock was another experiment's (a stopped make quick): the workspace's is back",
              file=sys.stderr)
    if done := heal(Path.cwd()):
        print(f"heal_lock: {done}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
