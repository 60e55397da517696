"""The claims of one dataset measured on what the stages wrote: per seed, the one_step and gradient_flow
stages' metrics (the `evaluate` stage's claims) and the three embedding arms' training runs (the `compare`
stage's); toksel.claims.catalogue reads them.

The training claims are read on the arms trained to convergence, `tuned lr`: each arm at the best rate of its
screen's best few that converges to the lowest validation loss, trained until its validation loss stopped improving
(the kept model), its control at the same rate. A
comparison of two arms means something only when both have converged: a fit the epoch budget stopped is counted
in each measurement (`budget_bound`), and the report does not count a verdict that rests on one. The claims whose
verdict depends on the protocol are measured again for the report's sensitivity table: `matched lr` (every arm at
one rate, train.lr, within train.matched_max_epochs: the rebuttal's protocol as far as it is told, and the budget
it had here before, whose untrained arm reads the rebuttal's 72 %), `equal steps` (every arm at its tuned rate after
the same train.screen_epochs epochs: its screen), `screened lr` (every arm at its screen's own choice, trained to
convergence: the protocol before the choice by converged validation loss)
and, for the spread ratios, the `theory protocol` (E frozen at E1, v at v0, p from gradient_flow: the setting of
Lemma 4.1 and Theorem 4.3).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from toksel.claims.catalogue import CLAIMS, CONTROL_PREFIX, Measurement, Regime, in_scope, measure
from toksel.claims.protocols import CONVERGED_PREFIX, EQUAL, MATCHED, SCREEN_PREFIX, SCREENED, THEORY
from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.params import EMBEDDINGS, Config, TrainConfig
from toksel.runtime.io import read_json, read_npz
from toksel.runtime.paths import results_dir, seed_dir
from toksel.theory.token_curves import CurveSettings, token_curves

Runs = dict[int, dict[str, dict[str, Any]]]  # seed -> run name -> metrics
PROTOCOL_CLAIMS = ("accuracy_gap", "accuracy_gap_size", "spread_ratio_v", "spread_ratio_v_size", "spread_ratio_p",
                   "spread_ratio_p_size")


def curve_settings(settings: TrainConfig) -> CurveSettings:
    """How the token curves are binned and which tokens they use, from the train section."""
    return CurveSettings(settings.bins, settings.binning, settings.min_bin_tokens, settings.heldout_min_count)


def seed_metrics(folder: Path, seeds: list[int], name: str = "metrics.json") -> dict[int, dict[str, Any]]:
    """Each seed's metrics under folder/seed<k>/; {} for a seed whose run is missing."""
    return {seed: read_json(path) if (path := seed_dir(folder, seed) / name).exists() else {} for seed in seeds}


def dataset_runs(dataset: str, config: Config, arms: bool = False) -> Runs:
    """seed -> {"step": one_step metrics, "flow": gradient_flow metrics}, over base.seeds; with `arms`, over the
    training seeds, and each embedding arm's kept fit (tuned lr) under its name."""
    seeds = config.training_seeds if arms else config.base.seeds
    runs: Runs = {seed: {} for seed in seeds}
    folders = [("step", results_dir("one_step", dataset)), ("flow", results_dir("gradient_flow", dataset))]
    folders += [(arm, results_dir("train", f"{dataset}/{arm}")) for arm in EMBEDDINGS] if arms else []
    for name, folder in folders:
        for seed, metrics in seed_metrics(folder, seeds).items():
            # a flow the step cap stopped short of its horizon says nothing of the claims read at the horizon
            runs[seed][name] = {} if metrics.get("horizon_reached") == 0 else metrics
    return runs


def grid_runs(dataset: str, config: Config, protocol: str) -> Runs:
    """seed -> arm -> that arm's metrics under another protocol, from its grid.csv: `matched lr`, the full fit at
    train.lr, with the controls (trained at train.lr) from its metrics.json; `equal steps`, the screen of its kept
    rate (screen_<name>); `screened lr`, the converged fit at its screen's choice (converged_<name>)."""
    runs: Runs = {seed: {} for seed in config.training_seeds}
    for arm in EMBEDDINGS:
        for seed in config.training_seeds:
            folder = seed_dir(results_dir("train", f"{dataset}/{arm}"), seed)
            if not (folder / "grid.csv").exists() or not (folder / "metrics.json").exists():
                continue
            grid, kept = pd.read_csv(folder / "grid.csv"), read_json(folder / "metrics.json")
            wanted = {MATCHED: config.train.lr, SCREENED: kept.get("lr_screened")}.get(protocol, kept.get("lr"))
            row = grid[np.isclose(grid["lr"], wanted)] if wanted is not None else grid.iloc[:0]
            if not len(row):
                continue
            values = {key: _plain(value) for key, value in row.iloc[0].items()}
            prefix = {EQUAL: SCREEN_PREFIX, SCREENED: CONVERGED_PREFIX}.get(protocol)
            if prefix is not None:
                values = {key[len(prefix):]: value for key, value in values.items() if key.startswith(prefix)}
            if protocol != EQUAL:
                values |= {key: value for key, value in kept.items() if key.startswith(CONTROL_PREFIX)}
            runs[seed][arm] = values
    return runs


def mean_over_seeds(runs: Runs, run: str, metric: str) -> float | None:
    """The mean over the seeds of a run's metric (those seeds that have it); None if none has."""
    values = [seed[run][metric] for seed in runs.values() if isinstance(seed.get(run, {}).get(metric), int | float)]
    return float(np.mean(values)) if values else None


def kept_rates(kept: Runs) -> str:
    """The learning rates each arm kept over the seeds, and how many of them still sit at the edge of the rates
    its screen tried."""
    parts = []
    for arm in EMBEDDINGS:
        fits = [seed[arm] for seed in kept.values() if seed.get(arm, {}).get("lr") is not None]
        if not fits:
            continue
        rates = ", ".join(f"{rate:g}" for rate in sorted({fit["lr"] for fit in fits}))
        edge = sum(bool(fit.get("lr_at_edge")) for fit in fits)
        parts.append(f"{arm} {rates}" + (f" ({edge} of {len(fits)} at the edge of the rates tried)" if edge else ""))
    return "kept rates: " + "; ".join(parts) if parts else ""


def _plain(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def theory_protocol_metrics(dataset: str, seed: int, curves: CurveSettings) -> dict[str, Any]:
    """The token-curve metrics of E1 with v0 and p_T from gradient flow (the one_step and gradient_flow stages of
    `seed`, on its draw of the data); {} if either has not run."""
    embeddings_path = seed_dir(results_dir("one_step", dataset), seed) / "embeddings.npz"
    trajectory_path = seed_dir(results_dir("gradient_flow", dataset), seed) / "trajectory.npz"
    if not (embeddings_path.exists() and trajectory_path.exists()):
        return {}
    embeddings = read_npz(embeddings_path, "one_step")
    p_final = read_npz(trajectory_path, "gradient_flow")["p"][-1]
    E1 = embeddings["E1"]
    tokens = read_token_table(data_dir(dataset, seed) / "tokens.csv")
    return token_curves(tokens, E1 @ p_final, E1 @ embeddings["v"], curves)[0]


def regime(dataset: str, config: Config) -> Regime:
    """What the dataset offers the lemmas (its first seed's draw): classes, d, the tokens that occur in training,
    and whether it is Assumption-1 data."""
    tokens = read_token_table(data_dir(dataset, config.base.seeds[0]) / "tokens.csv")
    data = config.data
    return Regime(tokens.num_classes, config.model.d, int(tokens.occurring().sum()),
                  data.source == "synthetic" and data.synthetic.mode == "assumption1")


def dataset_measurements(dataset: str, config: Config, producer: str,
                         details: dict[str, str] | None = None) -> list[Measurement]:
    """The claims stage `producer` (evaluate, compare) judges on `dataset` (config: its resolved config), and the
    protocol variants of the training claims (compare); details: claim id -> a few words on what was measured."""
    details = details or {}
    claims = [claim for claim in CLAIMS
              if claim.producer == producer and in_scope(claim, dataset, config.data, config)]
    if producer == "evaluate":
        runs, where = dataset_runs(dataset, config), regime(dataset, config)
        return [measure(claim, dataset, runs, details.get(claim.id, ""),
                        regime=where if claim.requires or claim.inferred else None)
                for claim in claims]
    kept, matched = dataset_runs(dataset, config, arms=True), grid_runs(dataset, config, MATCHED)
    rates = kept_rates(kept)
    measured = [measure(claim, dataset, kept, "; ".join(part for part in (details.get(claim.id, ""), rates) if part))
                for claim in claims]
    variants = [claim for claim in claims if claim.id in PROTOCOL_CLAIMS]
    measured += [measure(claim, dataset, matched, protocol=MATCHED) for claim in variants]
    measured += [measure(claim, dataset, grid_runs(dataset, config, protocol), protocol=protocol)
                 for protocol in (EQUAL, SCREENED) for claim in variants]
    curves = curve_settings(config.train)
    theory = {seed: {**kept[seed], "one_step": theory_protocol_metrics(dataset, seed, curves)}
              for seed in config.training_seeds}
    measured += [measure(claim, dataset, theory, protocol=THEORY) for claim in variants
                 if claim.id.startswith("spread_ratio")]
    return measured


def ablation_runs(dataset: str, config: Config) -> Runs:
    """seed -> each ablation variant's metrics, and the one-layer model's trained arm (`one_layer_trained`), over
    the training seeds: what the ablation claims read."""
    seeds = config.training_seeds
    variants = {variant: seed_metrics(results_dir("ablation", f"{dataset}/{variant}"), seeds)
                for variant in config.ablation.variants}
    one_layer = seed_metrics(results_dir("train", f"{dataset}/trained"), seeds)
    return {seed: {variant: by_seed[seed] for variant, by_seed in variants.items()}
            | {"one_layer_trained": one_layer[seed]} for seed in seeds}


def pair_runs(config: Config) -> Runs:
    """seed -> the one step ("step") and each model of pair.variants ("mlp") on pair.dataset, and the same on
    pair.control suffixed "_control" ("step_control", "one_layer_control"), over base.seeds (a seed the pair stage
    did not train reads as missing)."""
    seeds = config.base.seeds
    runs: Runs = {seed: {} for seed in seeds}
    for dataset, suffix in ((config.pair.dataset, ""), (config.pair.control, "_control")):
        folders = [("step", results_dir("one_step", dataset))]
        folders += [(variant, results_dir("pair", f"{dataset}/{variant}")) for variant in config.pair.variants]
        for name, folder in folders:
            for seed, metrics in seed_metrics(folder, seeds).items():
                runs[seed][name + suffix] = metrics
    return runs


def margin_runs(config: Config) -> Runs:
    """seed -> {"margins": the margins stage's metrics of that seed}, over base.seeds."""
    found = seed_metrics(results_dir("margins", "seeds"), config.base.seeds)
    return {seed: {"margins": metrics} for seed, metrics in found.items()}


def claim_runs(producer: str, dataset: str, config: Config, protocol: str = "") -> Runs:
    """The runs a stage's claims read on `dataset`, under a protocol of the training claims ("": their own)."""
    if producer == "evaluate":
        return dataset_runs(dataset, config)
    if producer == "ablation_report":
        return ablation_runs(dataset, config)
    if producer == "pair_report":
        return pair_runs(config)
    if producer == "margins":
        return margin_runs(config)
    if producer == "compare":
        return grid_runs(dataset, config, protocol) if protocol else dataset_runs(dataset, config, arms=True)
    return {}


EPOCHS = "epochs.csv"  # each arm's per-epoch log of its kept and matched fits (training/record.py)
