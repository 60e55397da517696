"""`dvc repro` killed at seeded random points of a tiny project's run, run again, and every metric compared with
an uninterrupted run's.

`python -m benchmarks.interruptions [POINTS] [SEED]` (default 10 points, seed 0) builds the tests' tiny project
(tests/helpers.py: the whole DAG on the synthetic data) in a temporary folder and runs `dvc repro` once without
interruption: its metrics (every number in the JSON files under results/, the timings aside) are the reference.
Then, for each point, it starts `dvc repro -f`, stops it after a seeded random time within the uninterrupted
run's duration, runs it again as `make repro` does (tools/heal_lock.py mends a dvc.lock that the kill cut, then
`dvc repro`) and compares every metric with the reference. The stop alternates
between the two ways a run ends early: SIGKILL to DVC and every process it started (a machine that loses power),
and SIGTERM to DVC alone (`kill <dvc>`, a cancelled job: the stage it runs is told by Linux and stops). One line
per point, then a summary; exit 1 when a rerun fails or a metric differs. Run it with the project's environment
active (the stages call `python`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tests.helpers import CHECKOUT_PATH, TIMING_METRICS, dvc_environment, run_dvc, stages_run, tiny_dvc_project


def metrics(project: Path) -> dict[str, float]:
    """Every number in the JSON files under results/, keyed by file and path, the timings aside."""
    found: dict[str, float] = {}

    def walk(node: object, key: str) -> None:
        if isinstance(node, dict):
            for name, value in node.items():
                if name not in TIMING_METRICS:
                    walk(value, f"{key}.{name}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{key}[{i}]")
        elif isinstance(node, int | float) and not isinstance(node, bool):
            found[key] = float(node)

    for path in sorted((project / "results").rglob("*.json")):
        walk(json.loads(path.read_text()), str(path.relative_to(project)))
    return found


def stopped_run(project: Path, after: float, kill_all: bool) -> str:
    """`dvc repro -f`, stopped after `after` seconds: what it had run."""
    repro = subprocess.Popen(["dvc", "repro", "-f"], cwd=project, env=dvc_environment(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    time.sleep(after)
    if kill_all:
        os.killpg(repro.pid, signal.SIGKILL)
    else:
        repro.send_signal(signal.SIGTERM)
    output, _ = repro.communicate()
    return output


def make_repro(project: Path) -> tuple[subprocess.CompletedProcess, str]:
    """What `make repro` runs: tools.heal_lock, then `dvc repro`; and what heal_lock said."""
    healed = subprocess.run([sys.executable, "-m", "tools.heal_lock"], cwd=project, capture_output=True, text=True,
                            env={**dvc_environment(), "PYTHONPATH": CHECKOUT_PATH})
    return run_dvc(project, "repro"), healed.stderr.strip()


def differences(found: dict[str, float], reference: dict[str, float]) -> list[str]:
    keys = sorted(set(found) | set(reference))
    return [key for key in keys if not (key in found and key in reference and (
        found[key] == reference[key] or (np.isnan(found[key]) and np.isnan(reference[key]))))]


def main(argv: list[str]) -> int:
    points, seed = (int(argv[0]) if argv else 10), (int(argv[1]) if len(argv) > 1 else 0)
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as folder:
        project = tiny_dvc_project(Path(folder))
        start = time.monotonic()
        first = run_dvc(project, "repro")
        duration = time.monotonic() - start
        if first.returncode != 0:
            print(first.stdout[-3000:], file=sys.stderr)
            return 1
        reference = metrics(project)
        print(f"uninterrupted: {len(stages_run(first.stdout))} stages in {duration:.0f} s, {len(reference)} metrics")
        failed = 0
        for point in range(points):
            after, kill_all = float(rng.uniform(1.0, duration)), point % 2 == 0
            ran = stages_run(stopped_run(project, after, kill_all))
            rerun, mended = make_repro(project)
            differing = differences(metrics(project), reference) if rerun.returncode == 0 else []
            ok = rerun.returncode == 0 and not differing
            failed += not ok
            how = "SIGKILL to DVC and its stages" if kill_all else "SIGTERM to DVC"
            print(f"point {point}: {how} after {after:.1f} s, in {ran[-1] if ran else 'no stage'} "
                  f"({len(ran)} stages begun); {'dvc.lock was cut and mended; ' if mended else ''}"
                  f"the rerun ran {len(stages_run(rerun.stdout))} stages: "
                  + ("same metrics" if ok else f"FAILED (exit {rerun.returncode}; {len(differing)} metrics differ: "
                                               f"{', '.join(differing[:5])})"))
            if rerun.returncode != 0:
                print((rerun.stdout + rerun.stderr)[-3000:], file=sys.stderr)
        print(f"{points - failed} of {points} interrupted runs finished with the uninterrupted run's metrics")
        return int(failed > 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
