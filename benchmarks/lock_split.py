"""What one dvc.lock costs each stage, against the same stages split over several dvc.yaml files.

DVC rewrites a stage's dvc.lock after every stage, parsing and dumping the whole file, so a stage's fixed cost
grows with the lock. This builds two throw-away DVC projects with the same trivial stages (each writes one small
file and reads one section of short lists from params.yaml, so its lock entry is about as long as a real stage's)
and times `dvc repro -f` in each: all stages in one dvc.yaml, or spread over several in subfolders (`wdir: ..`,
run with `dvc repro -P`, since a plain `dvc repro` runs only the top dvc.yaml).

    python -m benchmarks.lock_split [STAGES] [FILES]   (default 60 6)
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tests.helpers import dvc_environment  # this interpreter's dvc and python first


def build(root: Path, n_stages: int, n_files: int) -> None:
    """A git and DVC project of n_stages trivial stages over n_files dvc.yaml files (1: the top one only)."""
    root.mkdir(parents=True)
    for command in (["git", "init", "-q"], ["dvc", "init", "-q"]):
        subprocess.run(command, cwd=root, check=True, env=dvc_environment())
    params = {f"section{i}": {f"key{j}": [1, 2, 3, 4, 5] for j in range(12)} for i in range(n_stages)}
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    (root / "out").mkdir()
    (root / ".gitignore").write_text("/out\n")
    per_file = math.ceil(n_stages / n_files)
    for group in range(n_files):
        folder = root if n_files == 1 else root / f"part{group}"
        folder.mkdir(exist_ok=True)
        stages = {
            f"stage{i}": {
                "cmd": f"python -c \"open('out/{i}.txt', 'w').write('x')\"",
                "wdir": "." if n_files == 1 else "..",
                "params": [f"section{i}"],
                "outs": [f"out/{i}.txt"],
            }
            for i in range(group * per_file, min(n_stages, (group + 1) * per_file))
        }
        (folder / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))


def seconds_to_repro(root: Path, n_files: int) -> float:
    command = ["dvc", "repro", "-f", "-q"] + (["-P"] if n_files > 1 else [])
    started = time.perf_counter()
    subprocess.run(command, cwd=root, check=True, stdout=subprocess.DEVNULL, env=dvc_environment())
    return time.perf_counter() - started


def lock_lines(root: Path) -> int:
    return sum(len(lock.read_text().splitlines()) for lock in root.rglob("dvc.lock"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lock_split", description=__doc__.splitlines()[0])
    parser.add_argument("stages", nargs="?", type=int, default=60)
    parser.add_argument("files", nargs="?", type=int, default=6, help="dvc.yaml files to spread the stages over")
    args = parser.parse_args(argv)  # a bad argument: argparse's one line and exit code 2
    n_stages, n_files = args.stages, args.files
    with tempfile.TemporaryDirectory() as tmp:
        for files in (1, n_files):
            root = Path(tmp) / f"files{files}"
            build(root, n_stages, files)
            first = seconds_to_repro(root, files)
            forced = seconds_to_repro(root, files)
            print(f"{n_stages} stages in {files} dvc.yaml: dvc.lock {lock_lines(root):,} lines; dvc repro -f "
                  f"{first:.1f} s from nothing, {forced:.1f} s again ({forced / n_stages:.2f} s a stage)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
