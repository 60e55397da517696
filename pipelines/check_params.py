"""Stage `check_params`: every setting of params.yaml validated before any other stage runs.

Every `prepare` stage depends on this stage's output, so in `dvc repro` (and `dvc exp run -S ...`) it runs first
whenever params.yaml changes. A rejected value stops the pipeline here, with one line and exit code 2, before
DVC deletes the outputs of the stages that read the value, and before a dataset key that is no valid name
reaches a stage's command line. Its verdict changes only with itself, so passing again re-runs nothing.

It also writes, for each stage of dvc.yaml, the values that stage reads (pipelines/sections.py) as they are for it,
after its dataset's overrides and its command line: results/check_params/settings/<stage name>.json, the stage's
DVC dependency on the parameters. A stage reruns when such a value changes, and only then: with
`dvc exp run -S one_step.eta0=50`, a dataset whose own entry sets eta0 keeps its file, and its stages stay.
The prepare settings of a file dataset (data.source file) also hold the SHA-256 of its files, and dvc.yaml makes
this stage depend on data/own/, where they lie: a changed file reruns this stage, then that dataset's stages alone.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from pipelines.sections import PER_DATASET_SECTIONS, STAGE_SECTIONS
from toksel.runtime.config import dataset_configs, load_config
from toksel.runtime.errors import ToksError
from toksel.runtime.io import file_digests, write_json, write_text

VERDICT = Path("results") / "check_params" / "valid.txt"
SETTINGS = Path("results") / "check_params" / "settings"
STAGE_COMMAND = re.compile(r"python -m pipelines\.(\w+)(.*)")


def stage_commands(project: Path = Path(".")) -> dict[str, str]:
    """Each stage of the project's dvc.yaml, as DVC names it (one_step@imdb, ablation@yelp_polarity-mlp), with its
    command, as DVC resolves them ({} without a dvc.yaml: a stage run by hand, a test)."""
    if not (project / "dvc.yaml").exists():
        return {}
    from dvc.repo import Repo  # a second of importing, only here
    from dvc.stage import PipelineStage

    with Repo(str(project)) as repo:  # dvc.yaml's stages, not the .dvc files of `dvc add` (data/own/reviews.csv.dvc)
        return {stage.name: stage.cmd for stage in repo.index.stages if isinstance(stage, PipelineStage)}


def write_settings(commands: dict[str, str]) -> int:
    """The settings file of every stage that reads settings; how many were written."""
    written, configs = 0, {}
    for name, command in commands.items():
        match = STAGE_COMMAND.fullmatch(command.strip())
        if match is None or match[1] not in STAGE_SECTIONS:
            continue
        args = tuple(shlex.split(match[2]))
        if args not in configs:  # the stages of a dataset share theirs: loaded once (0.13 s each)
            configs[args] = load_config(list(args))
        settings = configs[args].sections(STAGE_SECTIONS[match[1]])
        if match[1] in PER_DATASET_SECTIONS:
            own = dataset_configs(configs[args].datasets, args)
            settings["datasets"] = {name: config.sections(PER_DATASET_SECTIONS[match[1]])
                                    for name, config in own.items()}
        files = configs[args].data.files
        if match[1] == "prepare" and files:  # prepare reads a file dataset's files; later stages follow its outputs
            settings["data_files"] = file_digests(files)
        write_json(SETTINGS / f"{name}.json", settings)
        written += 1
    return written


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        load_config(argv)  # every dataset entry is validated too, whichever one runs
        write_settings(stage_commands())
    except ToksError as error:
        print(f"check_params: {error}", file=sys.stderr)
        return 2
    write_text(VERDICT, "params.yaml passed validation\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
