"""Which claims moved between two runs: `python -m toksel.claims_diff [OLD [NEW]]` (`make claims-diff`).

OLD and NEW are anything DVC reads a file at: a DVC experiment's name, a commit, a branch or a tag; `workspace`
for the files as they are here. By default OLD is HEAD and NEW the workspace; with one name, that run against the
workspace. It reads each side's results/report/claims.csv (written by the report stage) and prints the claim rows
whose verdict, its verdict under the error control or its value moved, verdicts first, under 120 columns.
A name DVC does not know, or a run whose report has no claims table: one line, exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

from toksel.report.claim_table import moves, moves_text, read_claim_table
from toksel.runtime.errors import ToksError

TABLE = "results/report/claims.csv"
WORKSPACE = "workspace"


def table_at(revision: str) -> str:
    """claims.csv as `revision` has it."""
    if revision == WORKSPACE:
        if not Path(TABLE).is_file():
            raise ToksError(f"{TABLE} is missing here: run the report stage first (dvc repro report)")
        return Path(TABLE).read_text()
    import dvc.api
    from dvc.exceptions import DvcException, PathMissingError

    try:
        return dvc.api.read(TABLE, rev=revision)
    except (FileNotFoundError, PathMissingError):
        raise ToksError(f"{revision} has no {TABLE}: its report ran before the table existed, or not at all") from None
    except DvcException as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ToksError(f"cannot read {TABLE} at {revision!r}: {reason}") from None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__.strip())
        return 0
    if len(argv) > 2:
        print(f"diff: at most two runs to compare, not {len(argv)}: python -m toksel.claims_diff [OLD [NEW]]",
              file=sys.stderr)
        return 2
    old = argv[0] if argv else "HEAD"
    new = argv[1] if len(argv) > 1 else WORKSPACE
    try:
        tables = []
        for revision in (old, new):
            try:
                tables.append(read_claim_table(table_at(revision)))
            except ValueError as error:
                raise ToksError(f"{TABLE} at {revision}: {error}") from None
    except ToksError as error:
        print(f"diff: {error}", file=sys.stderr)
        return 2
    print("\n".join(moves_text(moves(*tables), old, new)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
