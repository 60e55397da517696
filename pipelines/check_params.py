"""Stage `check_params`: every setting of params.yaml validated before any other stage runs.

Every `prepare` stage depends on this stage's output, so in `dvc repro` (and `dvc exp run -S ...`) it runs first
whenever params.yaml changes. A rejected value stops the pipeline here, with one line and exit code 2, before
DVC deletes the outputs of the stages that read the value, and before a dataset key that is no valid name
reaches a stage's command line. Its verdict changes only with itself, so passing again reruns nothing: which
stages a change reaches, DVC decides from the keys each stage lists under `params:` in dvc.yaml.
"""

from __future__ import annotations

import sys
from pathlib import Path

from toksel.runtime.config import load_config
from toksel.runtime.errors import ToksError
from toksel.runtime.io import write_text
from toksel.runtime.workspace import workspace_experiment

VERDICT = Path("results") / "check_params" / "valid.txt"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        load_config(argv)  # every dataset entry is validated too, whichever one runs
    except ToksError as error:
        # `dvc exp run -S` in the workspace wrote the refused value into params.yaml and leaves it there
        left = ("; params.yaml keeps what `dvc exp run` wrote into it (DVC rewrote the file, comments gone): `git diff "
                "params.yaml` shows it, `git checkout params.yaml` undoes it" if workspace_experiment() else "")
        print(f"check_params: {error}{left}", file=sys.stderr)
        return 2
    write_text(VERDICT, "params.yaml passed validation\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
