"""Run the whole DAG under a named profile: `python -m tools.profile quick [dvc exp run options]` (`make quick`).

A profile, profiles/<name>.yaml, is a partial params.yaml (its `every_other_dataset` values go to each dataset entry
it does not name), checked against the schema, then run as a DVC experiment in a copy of the project (`dvc exp run
--temp -n <name>-<time> -S ++key=value ...`): the workspace stays as it was. The results are in the DVC experiment
(`dvc exp apply <name>` brings them here), its MLflow runs under a parent named after it. The real datasets come
from $TOKSEL_DATA_MIRROR, else the Hub; with neither, only the stages that need no real data run.

An experiment starts from the profile's own run on this commit (the newest experiment whose params are the
profile's values, else the newest of the profile), when there is one: DVC copies the
workspace with that experiment's dvc.lock in place of its own (set aside in .dvc/tmp and put back when DVC is done,
or by `python -m tools.heal_lock`, which make runs first, after a kill), so that DVC skips every stage whose inputs
and values the new settings leave as they were, instead of restoring each from its run cache and rewriting dvc.lock
after it (3 s a stage: most of a variant's time).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from toksel.data.sources import MIRROR_ENV
from toksel.params import Config
from toksel.runtime.config import load_config
from toksel.runtime.errors import ToksError
from toksel.runtime.workspace import LOCK, SET_ASIDE, put_back
from tools.plan import describe, planned


def settings(tree: dict[str, Any], prefix: str = "") -> list[str]:
    """The profile's values as `dvc exp run -S` arguments, one per leaf: ++base.seeds=[0, 1]."""
    found = []
    for key, value in tree.items():
        if isinstance(value, dict):
            found.extend(settings(value, f"{prefix}{key}."))
        else:  # `++` adds a key a dataset entry does not write yet; JSON is YAML, which is how DVC reads the value
            found.append(f"++{prefix}{key}={json.dumps(value)}")
    return found


def _load(profile: dict[str, Any], params: Path, overrides: tuple[str, ...] = ()) -> Config:
    """params.yaml with the profile's values on top, read and checked as the stages would read it."""
    with tempfile.TemporaryDirectory() as folder:
        merged = Path(folder, "params.yaml")
        OmegaConf.save(OmegaConf.merge(OmegaConf.load(params), profile), merged)
        return load_config(overrides, path=merged)


def read_profile(name: str, params: Path = Path("params.yaml")) -> dict[str, Any]:
    """profiles/<name>.yaml, checked: params.yaml with it applied must pass the schema."""
    folder = Path("profiles")
    path = folder / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in folder.glob("*.yaml"))) or "none"
        raise ToksError(f"no profile {name!r}: {folder}/ holds {known}")
    profile = OmegaConf.to_container(OmegaConf.load(path))
    if not isinstance(profile, dict) or profile.get("profile") != name:
        raise ToksError(f"{path} must be a mapping of params.yaml's sections that sets profile: {name}")
    # every_other_dataset: the values of each dataset entry the profile does not name (your own datasets)
    others, named = profile.pop("every_other_dataset", None), profile.setdefault("datasets", {})
    for entry in OmegaConf.load(params).get("datasets", {}) if others else ():
        named.setdefault(entry, others)
    _load(profile, params)  # one line naming the key when a value does not fit
    return profile


def synthetic_targets(profile: dict[str, Any], params: Path = Path("params.yaml")) -> list[str]:
    """The stages that need no real data: each synthetic dataset's evaluate, the phase diagram, the pair and margin
    claims (and what they read)."""
    synthetic = [name for name in _load(profile, params).datasets
                 if _load(profile, params, (f"dataset={name}",)).data.source == "synthetic"]
    return [*(f"evaluate@{name}" for name in synthetic), "phase_diagram", "pair_report", "margins"]


def real_data() -> str | None:
    """Where the real datasets come from, or None when nothing can serve them."""
    mirror = os.environ.get(MIRROR_ENV)
    if mirror and Path(mirror).is_dir():
        return f"the mirror {mirror}"
    return None if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") else "the Hugging Face Hub"


def experiment_name(profile: str, options: list[str]) -> tuple[str, list[str]]:
    """The experiment's name, `-n`/`--name` among the options, else <profile>-<date>-<time>; and the options with it."""
    for i, option in enumerate(options):
        if option in ("-n", "--name") and i + 1 < len(options):
            return options[i + 1], options
        if option.startswith("--name="):
            return option.split("=", 1)[1], options
    name = f"{profile}-{time.strftime('%Y%m%d-%H%M%S')}"
    return name, ["-n", name, *options]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    name, source = argv[0], real_data()
    try:
        profile = read_profile(name)
        targets = [] if source else synthetic_targets(profile)
    except ToksError as error:
        print(f"profile: {error}", file=sys.stderr)
        return 2
    print(f"profile {name}: the real datasets from {source}" if source else
          f"profile {name}: no TOKSEL_DATA_MIRROR and HF_HUB_OFFLINE is set: the synthetic datasets only "
          f"({' '.join(targets)})", flush=True)
    profile_settings = [arg for setting in settings(profile) for arg in ("-S", setting)]
    base = newest_experiment(name, profile_values(profile))
    copied = []  # DVC copies what git tracks, and what -C names: a dvc.lock git does not track yet
    if base is not None:
        print(f"profile {name}: starting from the experiment {base[0]}: DVC skips the stages the settings do not "
              "reach", flush=True)
        copied = [] if _tracked(LOCK) else ["-C", str(LOCK)]
    with starting_from(base[1] if base else None):
        if "--dry" in argv[1:]:  # DVC's own --dry fails on a pipeline (tools/plan.py says why): the plan instead
            plan, code = planned([*targets, *profile_settings, *copied, *argv[1:]])
            print("\n".join(f"profile {name}: {line}" for line in describe(plan)), flush=True)
            return code
        experiment, options = experiment_name(name, argv[1:])
        command = ["dvc", "exp", "run", "--temp", *targets, *profile_settings, *copied, *options]
        done = subprocess.run(command).returncode
    if done == 0:
        print(f"profile {name}: {closing(experiment)}", flush=True)
    return done


def profile_values(profile: dict[str, Any], params: Path = Path("params.yaml")) -> dict[str, Any]:
    """params.yaml with the profile's values set, as the profile's own experiment records it."""
    return OmegaConf.to_container(OmegaConf.merge(OmegaConf.load(params), profile))


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def _tracked(path: Path) -> bool:
    return subprocess.run(["git", "ls-files", "--error-unmatch", str(path)], capture_output=True).returncode == 0


def newest_experiment(profile: str, values: dict[str, Any] | None = None) -> tuple[str, str] | None:
    """The DVC experiment of `profile` on this commit to start from, by name, and its dvc.lock: the newest whose
    params are `values` (the profile's own run, which a variant of one value differs from by that value alone),
    else the newest of the profile; None without one."""
    try:
        head = _git("rev-parse", "HEAD").strip()
        refs = _git("for-each-ref", "--sort=-committerdate", "--format=%(refname)",
                    f"refs/exps/{head[:2]}/{head[2:]}/").split()
        newest = None
        for ref in refs:
            params = OmegaConf.to_container(OmegaConf.create(_git("show", f"{ref}:params.yaml")))
            if not isinstance(params, dict) or params.get("profile") != profile:
                continue
            newest = newest or ref
            if params == values:
                newest = ref
                break
        return (newest.rsplit("/", 1)[1], _git("show", f"{newest}:{LOCK}")) if newest else None
    except (OSError, subprocess.CalledProcessError, ValueError, yaml.YAMLError):  # no git, no lock: HEAD's
        return None


@contextmanager
def starting_from(lock: str | None) -> Iterator[None]:
    """The workspace's dvc.lock is `lock` while DVC copies the workspace into the experiment's folder (the whole
    run: DVC says not when it is done copying), then its own again (or none, as before), also when the run is
    stopped."""
    if lock is None:
        yield
        return
    SET_ASIDE.parent.mkdir(parents=True, exist_ok=True)
    SET_ASIDE.write_bytes(LOCK.read_bytes() if LOCK.is_file() else b"")  # empty: the workspace had none
    previous = signal.signal(signal.SIGTERM, _interrupted)
    try:
        LOCK.write_text(lock)
        yield
    finally:
        put_back()
        signal.signal(signal.SIGTERM, previous)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # a `kill` ends the run as Ctrl-C does: the workspace's dvc.lock goes back first


def closing(experiment: str) -> str:
    """Where the experiment's results are, naming only what exists: the DVC experiment, its MLflow parent run."""
    # Every commit's: a commit made while the experiment ran moves HEAD off the experiment's baseline.
    listed = subprocess.run(["dvc", "exp", "list", "--all-commits", "--name-only"], capture_output=True,
                            text=True).stdout.split()
    if experiment not in listed:
        return (f"DVC kept no experiment {experiment} (nothing ran, or it was not saved): `dvc exp show` lists "
                "those kept")
    where = (f"its results are in the DVC experiment {experiment}, not in the workspace: `dvc exp show` lists it, "
             f"`dvc exp apply {experiment}` brings its files here; ")
    if parent_run(experiment):
        return where + f"MLflow shows its runs under the parent run {experiment} (make ui)"
    return where + ("MLflow has no run of it yet (its publish stage did not run: it runs last, after the report); "
                    "`python -m toksel.publish` in the workspace after `dvc exp apply` shows it")


def parent_run(experiment: str) -> bool:
    """Whether the MLflow store holds the experiment's parent run (publish made it); False where it cannot say."""
    from toksel.runtime.paths import tracking_uri
    from toksel.tracking.experiment import experiment_name, quiet_mlflow

    quiet_mlflow()
    from mlflow import MlflowClient

    try:
        client = MlflowClient(tracking_uri())
        found = client.get_experiment_by_name(experiment_name())
        wanted = f"tags.stage = 'pipeline' and tags.`dvc.experiment` = '{experiment}'"
        return found is not None and bool(client.search_runs([found.experiment_id], wanted, max_results=1))
    except Exception:  # noqa: BLE001 (a store that does not answer: the line says what it knows)
        return False


if __name__ == "__main__":
    sys.exit(main())
