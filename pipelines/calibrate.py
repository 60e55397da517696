"""Stage `calibrate`: every claim family's verdict rule against known answers (toksel.calibration), on every
dataset its claims are judged on and in that dataset's regime: the holding rate along a ladder of planted effects
(an operating curve, each rate with its Wilson interval), the power at the paper's size, the false-positive rate
at the null, the effect where the power reaches 0.8. The one step's families run on each dataset's own data, d and
eta0; the flow's on fresh draws of each synthetic dataset's generator with its own flow settings (on real data the
growth of |p_t| has no known answer to plant); the training families on each dataset's own token statistics and
the seed-to-seed spread of its runs; the pair claims' on the pair dataset's generator and the spread of the pair
stage's runs (calibration/pair.py). Writes results/calibration/: calibration.json, metrics.json and rates.png (the
curves); the report renders calibration.json as its table.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
import sys
import time
import zlib
from collections.abc import Callable, Sequence

from tqdm import tqdm

from pipelines.sections import STAGE_SECTIONS
from toksel.calibration.curves import TokenPopulation
from toksel.calibration.families import (
    BY_NAME,
    FAMILIES,
    NO_GROWTH_ANSWER,
    REFERENCE_FIDELITY,
    Answers,
    Family,
    PlantedAccuracies,
    PlantedAnswers,
    added_spread,
    flow_answers,
    growth_reach,
    margin_answers,
    pair_step_answers,
    row,
    step_answers,
    uncalibrated_rows,
)
from toksel.calibration.margins import MarginRegime
from toksel.calibration.pair import PairRegime
from toksel.calibration.theory import FlowRegime, StepRegime
from toksel.claims.catalogue import BY_ID, in_scope, measure
from toksel.claims.measurements import claim_runs, dataset_runs, pair_runs
from toksel.data.draws import MANIFEST, data_dir
from toksel.data.token_table import read_token_table
from toksel.figures.plots import calibration_figure, save_figure
from toksel.params import Config
from toksel.runtime.cli import run_stage
from toksel.runtime.config import dataset_configs
from toksel.runtime.fanout import map_units
from toksel.runtime.io import write_json
from toksel.runtime.paths import processed_dir, results_dir
from toksel.runtime.progress import show_progress
from toksel.runtime.records import RunRecord

SECTIONS = STAGE_SECTIONS["calibrate"]
OUT = results_dir("calibration", "")


def judged_on(family: Family, config: Config, datasets: dict[str, Config]) -> list[str]:
    """The datasets any of the family's claims is measured on."""
    claims = [claim for claim in BY_ID.values() if claim.family == family.name]
    return [name for name in config.datasets
            if any(in_scope(claim, name, datasets[name].data, config) for claim in claims)]


def pair_spread(own: Config) -> tuple[int, float] | None:
    """The number of test pair sequences and the seed-to-seed standard deviation of the accuracy on them, pooled
    over the pair dataset's models (pair.variants); None before the pair stage has run."""
    runs = pair_runs(own)
    values = [[seed[variant]["pair_accuracy"] for seed in runs.values() if "pair_accuracy" in seed.get(variant, {})]
              for variant in own.pair.variants]
    if any(len(found) < 2 for found in values):
        return None
    rows = next(seed[own.pair.variants[0]]["pair_test_rows"] for seed in runs.values() if own.pair.variants[0] in seed)
    return int(rows), statistics.fmean(statistics.variance(found) for found in values) ** 0.5


def trained_fidelity(dataset: str, config: Config) -> tuple[float, float]:
    """How closely the dataset's trained arm follows the statistics it learnt, (E_s^T p's, E_s^T v's): the mean over
    the training seeds of its noise-corrected U rise and rank correlation (about 1 for a score that follows its
    training statistic exactly), kept inside (0.05, 0.99); (0.8, 0.8) before the train stage has run."""
    runs = dataset_runs(dataset, config, arms=True)

    def mean(metric: str) -> float:
        values = [seed["trained"][metric] for seed in runs.values() if isinstance(seed.get("trained", {}).get(metric),
                                                                                  int | float)]
        return float(min(max(statistics.fmean(values), 0.05), 0.99)) if values else REFERENCE_FIDELITY

    return mean("u_rise_corrected"), mean("spearman_v_alpha_corrected")


def _said(item: dict, seconds: float) -> None:
    drawn = sum(point["replicates"] for point in item.get("curve", []))
    standing = "calibrated" if item["calibrated"] else f"uncalibrated: {item['reason']}"
    print(f"calibrate: {item['family']} on {item['data']}: {drawn} replicates, {standing}; {seconds:.1f} s",
          flush=True)


def salt(dataset: str) -> int:
    """The dataset's own stream of the known answers' random numbers."""
    return zlib.crc32(dataset.encode())


PLANTED = object()  # the answers of a planted family: drawn apart (planted_rows)


class Sources:
    """The known answers of every dataset, made when a family first asks for them."""

    def __init__(self, config: Config, datasets: dict[str, Config], progress: Callable[[], None]) -> None:
        self.config, self.datasets, self.progress = config, datasets, progress
        self._made: dict[tuple[str, str], Answers] = {}

    def for_family(self, family: Family, dataset: str) -> tuple[Answers | object | None, str]:
        """The answers the family reads on `dataset`, or None with the reason there are none."""
        own = self.datasets[dataset]
        kind = family.source if family.source in ("one_step", "flow", "pair_step", "pair_accuracy", "margins") else \
            "planted"
        if family.source == "flow" and own.data.source != "synthetic":
            return None, NO_GROWTH_ANSWER
        if family.flows and dataset not in self.config.calibration.flow_datasets:
            return None, ("its flows are not calibrated here (calibration.flow_datasets): each takes seconds, and "
                          "the thousands a rate needs would not fit the pipeline's time")
        if kind != "flow" and not (processed_dir(dataset) / MANIFEST).exists():
            return None, f"its data are not prepared: run prepare@{dataset}"
        if family.source == "accuracy" and not real_spreads(family, dataset, self.config, own):
            return None, f"the train stage has not run on {dataset}: its gaps' spread is the known answers' noise"
        if kind == "pair_accuracy" and pair_spread(own) is None:
            return None, f"the pair stage has not run on {dataset}"
        if kind == "planted":  # drawn by planted_rows, a process a dataset
            return PLANTED, ""
        if (kind, dataset) not in self._made:
            self._made[kind, dataset] = self._make(kind, dataset, own)
        return self._made[kind, dataset], ""

    def _make(self, kind: str, dataset: str, own: Config) -> Answers | PlantedAccuracies:
        config = self.config
        if kind == "one_step":
            folders = tuple(str(data_dir(dataset, seed)) for seed in config.base.seeds)
            return step_answers(StepRegime(folders, own.model.d, own.one_step.eta0, salt(dataset)), config,
                                self.progress)
        if kind == "margins":
            settings = config.margins
            return margin_answers(MarginRegime(own.data.synthetic, own.model.d, own.one_step.eta0,
                                               tuple(settings.potentials), settings.horizon, settings.tolerance,
                                               len(config.base.seeds), salt(dataset)), config, self.progress)
        if kind.startswith("pair"):
            regime = PairRegime(own.data.synthetic, own.model.d, own.one_step.eta0, len(own.training_seeds),
                                salt(dataset))
            if kind == "pair_step":
                return pair_step_answers(regime, config, self.progress)
            rows, spread = pair_spread(own)
            return PlantedAccuracies(dataclasses.replace(regime, test_rows=rows, spread=spread), config)
        regime = FlowRegime(own.data.synthetic, own.model.d, own.one_step.eta0, own.gradient_flow,
                            len(own.flow_seeds), salt(dataset))
        return flow_answers(regime, config, self.progress)


def real_spreads(family: Family, dataset: str, config: Config, own: Config) -> dict[str, float]:
    """Each claim of the family judged on `dataset` (not a description): the between-seed standard deviation of its
    statistic in the real runs, as the claim measures it there; a claim measured on fewer than two seeds is left
    out."""
    found = {}
    for claim in BY_ID.values():
        if claim.family != family.name or claim.kind == "description" or not in_scope(claim, dataset, own.data,
                                                                                        config):
            continue
        values = [value for value in measure(claim, dataset, claim_runs(claim.producer, dataset, config)).values
                  if value is not None and math.isfinite(value)]
        if len(values) > 1:
            found[claim.id] = statistics.stdev(values)
    return found


def planted_rows(config: Config, datasets: dict[str, Config], group: tuple[str, tuple[str, ...]]) -> list[dict]:
    """The rows of the families of one dataset whose known answers are planted statistics (a process's unit of
    work: the families that read the same draws share them there). A family whose claims have real runs gets a row
    per claim, its planted statistics carrying that claim's between-seed spread (the token draws' own spread, and
    seed noise for the rest): a rule calibrated on narrower noise than the runs' would claim power it lacks."""
    dataset, names = group
    tokens = read_token_table(data_dir(dataset, config.training_seeds[0]) / "tokens.csv")
    answers = PlantedAnswers(TokenPopulation.of(tokens, config.train.heldout_min_count),
                             trained_fidelity(dataset, config), config, len(config.training_seeds), salt(dataset))
    rows = []
    for name in names:
        family = BY_NAME[name]
        spreads = real_spreads(family, dataset, config, datasets[dataset])
        if not spreads:
            rows.append(row(family, dataset, answers.for_family(family), config))
            continue
        planted = answers.planted_spread(family)
        for claim, real in spreads.items():
            added = added_spread(real, planted)
            rows.append(row(family, dataset, answers.for_family(family, added), config)
                        | {"claim": claim, "for_claims": [claim], "real_spread": real, "planted_spread": planted,
                           "added_spread": added})
    return rows


def calibrate(config: Config, run: RunRecord, overrides: Sequence[str] = ()) -> None:
    datasets = dataset_configs(config.datasets, overrides)  # each dataset's regime, as its stages read it
    found: dict[tuple[str, str], list[dict]] = {}  # (family, dataset) -> its rows (one per claim where they differ)
    planted: dict[str, list[str]] = {}  # dataset -> the families whose answers are planted statistics there
    with tqdm(desc="calibration: known answers", unit=" units", disable=not show_progress()) as bar:
        sources = Sources(config, datasets, bar.update)
        for family in FAMILIES:
            where = judged_on(family, config, datasets)
            if not where:
                found[family.name, "-"] = [row(family, "-", None, config, "none of its datasets is in this pipeline")]
            for dataset in where:
                answers, reason = sources.for_family(family, dataset)
                if answers is PLANTED:
                    planted.setdefault(dataset, []).append(family.name)
                    continue
                start = time.perf_counter()
                costly = family.source == "one_step" and datasets[dataset].data.source != "synthetic"
                item = row(family, dataset, None if answers is None else answers.for_family(family), config,
                           reason, costly)
                if family.name == "growth" and isinstance(answers, Answers):
                    item["reach"] = growth_reach(item["crossing"], answers.means(family, "bound_ratio"))
                found[family.name, dataset] = [item]
                _said(item, time.perf_counter() - start)
        # The planted answers are drawn in this process's workers, a dataset each: their draws are cheap one by one
        # but many, and the theory's fan-out is done with its own.
        start = time.perf_counter()
        groups = [(dataset, tuple(names)) for dataset, names in planted.items()]
        for rows in map_units(functools.partial(planted_rows, config, datasets), groups, config.compute,
                              "processes", bar.update):
            for item in rows:
                found.setdefault((item["family"], item["data"]), []).append(item)
                _said(item, time.perf_counter() - start)
    rows = [item for family in FAMILIES for dataset in [*judged_on(family, config, datasets), "-"]
            for item in found.get((family.name, dataset), [])]
    rows += uncalibrated_rows()
    write_json(OUT / "calibration.json", rows)
    save_figure(calibration_figure(rows), OUT / "rates.png")
    run.log_artifact(OUT / "rates.png")
    run.log_artifact(OUT / "calibration.json")
    metrics = {f"{item['family']}_{item['data']}{''.join('_' + claim for claim in item.get('for_claims', []))}_"
               f"{name}": item[name]["rate"] for item in rows for name in ("power", "null") if name in item}
    judged = [item for item in rows if "power" in item]
    metrics |= {"families_calibrated": float(sum(item["calibrated"] for item in judged)),
                "families_measured": float(len(judged))}
    run.record_metrics(OUT / "metrics.json", metrics)


def main(argv: list[str] | None = None) -> int:
    overrides = sys.argv[1:] if argv is None else list(argv)  # each dataset's config takes them too
    return run_stage("calibrate", SECTIONS, functools.partial(calibrate, overrides=overrides), argv,
                     per_dataset=False)


if __name__ == "__main__":
    sys.exit(main())
