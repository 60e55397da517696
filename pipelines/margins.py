"""Stage `margins` (ours, docs/results.md): which margin an optimiser on p picks. On margins.dataset, every seed of
base.seeds: E frozen at that seed's E1 (one_step's), gradient flow and the l_q mirror flows of margins.potentials
from p0 to margins.horizon, each with its twin of halved steps; each norm's hard-margin direction for the important
tokens' selection; sign descent and Adam on p for margins.discrete_steps (shown, not judged). The claims are judged
over the seeds. Writes results/margins/: seeds/seed<k>/metrics.json, claims.json, summary.md, metrics.json,
verdicts.json and margins.png."""

from __future__ import annotations

import math
import sys

import numpy as np

from pipelines.sections import STAGE_SECTIONS
from toksel.claims.catalogue import BY_ID, MARGIN_CLAIMS, assess, claim_metrics, measure, verdict_counts
from toksel.data.corpus import PackedSplit
from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.figures.plots import margins_figure, save_figure
from toksel.models.fused import FusedBags
from toksel.params import Config
from toksel.runtime.cli import run_stage
from toksel.runtime.io import read_npz, write_json
from toksel.runtime.paths import results_dir, seed_dir
from toksel.runtime.records import RunRecord
from toksel.summaries.claims import Row, claims_table, publish_summary
from toksel.summaries.markdown import number, table
from toksel.theory.flow_field import FlowField
from toksel.theory.margins import (
    L2,
    NotFollowed,
    adam,
    flow_name,
    follow_optimisers,
    margin_metrics,
    norm_name,
    sign_descent,
)
from toksel.theory.max_margin import constraint_pairs

SECTIONS = STAGE_SECTIONS["margins"]
OUT = results_dir("margins", "")
SEEDS = OUT / "seeds"  # each seed's metrics, seeds/seed<k>/metrics.json: what the claims read
DISCRETE = ("sign", "adam")  # the exploratory optimisers: no theorem names their margin for attention


def seed_margins(config: Config, seed: int) -> dict[str, float]:
    """One seed: every optimiser's end against every norm's solution, and its flows' halved-step agreement; where
    the claims' premise fails on its draw (NotFollowed), `followed` 0 and no claim metric (not computed)."""
    settings, folder = config.margins, data_dir(config.margins.dataset, seed)
    embeddings = read_npz(seed_dir(results_dir("one_step", settings.dataset), seed) / "embeddings.npz", "one_step")
    E1, p0, v = embeddings["E1"], embeddings["p0"], embeddings["v"]
    train, tokens = PackedSplit.load(folder / "train.npz"), read_token_table(folder / "tokens.csv")
    pairs = constraint_pairs(np.isin(train.bag_tokens, np.flatnonzero(tokens.important)), train)
    bags = FusedBags.from_split(train)
    # l_inf: the geometry sign descent's (and, for linear models, Adam's) direction is known to favour
    try:
        solutions, flows = follow_optimisers(E1, p0, v, bags, pairs, settings.potentials, settings.horizon,
                                             settings.tolerance, twin=True, also=(math.inf,))
    except NotFollowed as reason:
        print(f"margins: seed {seed}: not computed: {reason}; the flows' settings are margins.horizon and "
              f"margins.tolerance, the step's datasets.{settings.dataset}.one_step.eta0", file=sys.stderr)
        return {"followed": 0.0, "constraints": float(len(pairs))}
    field = FlowField(E1, v, bags, 0.0)
    ends = {flow_name(q): end.p for q, end in flows.items()}
    ends |= {"sign": sign_descent(field, p0, settings.discrete_steps, settings.discrete_lr),
             "adam": adam(field, p0, settings.discrete_steps, settings.discrete_lr)}
    agreement = settings.agreement
    halved = {"halved_angle_max": max(end.halved_angle for end in flows.values()),
              "halved_norm_gap_max": max(end.halved_norm_gap for end in flows.values())}
    faithful = halved["halved_angle_max"] <= agreement and halved["halved_norm_gap_max"] <= agreement
    paths = {flow_name(q): end.path for q, end in flows.items()}
    return (margin_metrics(ends, {flow_name(q): q for q in flows}, solutions, paths) | halved
            | {"flows_faithful": float(faithful), "constraints": float(len(pairs)), "followed": 1.0}
            | {f"steps_{flow_name(q)}": float(end.steps) for q, end in flows.items()})


def cosine_rows(config: Config, followed: list[dict[str, float]]) -> tuple[list[str], list[str], np.ndarray]:
    """The optimisers, the norms and the mean over the followed seeds of each optimiser's cosine with each norm's
    solution (NaN where no seed was followed)."""
    optimisers = [flow_name(q) for q in (L2, *config.margins.potentials)] + list(DISCRETE)
    norms = [norm_name(q) for q in (L2, *config.margins.potentials, math.inf)]
    means = np.array([[np.mean([seed[f"cos_{name}_{norm}"] for seed in followed]) if followed else math.nan
                       for norm in norms] for name in optimisers])
    return optimisers, norms, means


def margins(config: Config, run: RunRecord) -> None:
    settings, runs = config.margins, {}
    for seed in config.base.seeds:
        metrics = seed_margins(config, seed)
        runs[seed] = {"margins": metrics}  # as claims.measurements.margin_runs reads them back
        run.record_metrics(seed_dir(SEEDS, seed) / "metrics.json", metrics)
        if metrics["followed"] and not metrics["flows_faithful"]:
            print(f"margins: seed {seed}: a flow and its twin of halved steps differ by more than "
                  f"margins.agreement = {settings.agreement:g} (angle "
                  f"{metrics['halved_angle_max']:.3g}, |p| {metrics['halved_norm_gap_max']:.3g}): lower "
                  "margins.tolerance", file=sys.stderr)
    measurements = [measure(claim, settings.dataset, runs) for claim in MARGIN_CLAIMS]
    write_json(OUT / "claims.json", [item.as_record() for item in measurements])
    assessed = [assess(BY_ID[item.claim], item, config) for item in measurements]
    followed = [seed["margins"] for seed in runs.values() if seed["margins"]["followed"]]
    skipped = [str(seed) for seed, found in runs.items() if not found["margins"]["followed"]]
    optimisers, norms, means = cosine_rows(config, followed)
    save_figure(margins_figure(optimisers, norms, means), OUT / "margins.png")
    run.log_artifact(OUT / "margins.png")

    def largest(metric: str) -> float | None:
        return max((m[metric] for m in followed), default=None)

    summary = "\n".join([
        f"# Which margin an optimiser on p picks ({settings.dataset}, seeds {', '.join(map(str, sorted(runs)))}; "
        f"flows to t = {settings.horizon:g})", "",
        *claims_table([Row(item, settings.dataset, "margins") for item in assessed]), "",
        *([f"Not computed on seed(s) {', '.join(skipped)}: the claims' premise fails on their draws (the stage's log "
           "says why: gradient flow does not select the important tokens, or a flow cannot reach margins.horizon "
           "within the step cap); "
           + ("the claims are judged on the other seeds." if followed else "no seed is left to judge them on."),
           ""] if skipped else []),
        "Each optimiser's end against each norm's hard-margin direction (cosine, mean over the seeds); sign descent "
        f"and Adam after {settings.discrete_steps:,} steps at lr {settings.discrete_lr:g}, exploratory:", "",
        *table(["optimiser", *norms], [[name, *map(number, row)] for name, row in zip(optimisers, means, strict=True)]),
        "", f"The l_2 solution's largest cosine with another norm's: {number(largest('solutions_cosine'))} "
        f"(at most, over the seeds). Every flow's twin of halved steps within {settings.agreement:g}: "
        f"{('yes' if all(m['flows_faithful'] for m in followed) else 'no') if followed else 'n/a'} (largest angle "
        f"{number(largest('halved_angle_max'))} rad).", "", "![margins.png](margins.png)"]) + "\n"
    extra = {"solutions_cosine_max": largest("solutions_cosine"),
             "flows_faithful": float(all(m["flows_faithful"] for m in followed)) if followed else None,
             **({"seeds_not_followed": float(len(skipped))} if skipped else {})}
    publish_summary(run, OUT, summary, claim_metrics(assessed) | extra, verdict_counts(assessed))


def main(argv: list[str] | None = None) -> int:
    return run_stage("margins", SECTIONS, margins, argv)


if __name__ == "__main__":
    sys.exit(main())
