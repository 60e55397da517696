"""Stage `gradient_flow`: E frozen at E1, the flow on p followed in flow time up to gradient_flow.horizon; selection
and max-margin checks along the way, the same run with every step halved (do the steps follow the flow?), and the
controls of those claims (theory/convergence.py); Lemma 4.2's control (a bounded flow) where that lemma is judged
(two classes, and a flow whose statistic settled over its last two doublings: elsewhere its row is exploratory or
not tested, shown without a control). Every seed of
base.seeds in one process (the first gradient_flow.seeds of them where that is set), each from that seed's one_step,
into results/gradient_flow/<dataset>/seed<seed>/; their metrics gathered in results/gradient_flow/<dataset>.json."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from pipelines.sections import STAGE_SECTIONS
from toksel.claims.catalogue import BY_ID
from toksel.claims.measurements import regime
from toksel.data.corpus import PackedSplit
from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.params import Config
from toksel.runtime.cli import run_stage
from toksel.runtime.io import read_npz, write_csv, write_npz
from toksel.runtime.paths import results_dir, seed_dir
from toksel.runtime.progress import FlowWatch
from toksel.runtime.records import RunRecord
from toksel.theory.convergence import control_metrics, follow_gradient_flow
from toksel.theory.gradient_flow import MAX_STEPS
from toksel.theory.one_step import EmbeddingUpdate

SECTIONS = STAGE_SECTIONS["gradient_flow"]
STEPS_PER_DECADE = 100  # MLflow's step of a flow record at time t: 100 log10 t


def gradient_flow(config: Config, run: RunRecord) -> None:
    data, seed = data_dir(config.dataset, config.seed), config.seed
    embeddings = read_npz(seed_dir(results_dir("one_step", config.dataset), seed) / "embeddings.npz",
                          producer="one_step")
    train, tokens = PackedSplit.load(data / "train.npz"), read_token_table(data / "tokens.csv")
    settings = config.gradient_flow
    horizon_key = f"datasets.{config.dataset}.gradient_flow.horizon"
    watch = FlowWatch(run.label, settings.horizon, MAX_STEPS, horizon_key)
    try:
        flow = follow_gradient_flow(embeddings["E1"], embeddings["p0"], embeddings["v"], train, tokens, settings,
                                    observe=watch, stop_at_cap=True)
    finally:
        watch.close()
    reached = bool(flow.metrics["horizon_reached"])
    if not reached:
        print(f"gradient_flow: seed {seed}: {MAX_STEPS:,} steps reached flow time {flow.trajectory.times[-1]:.3g} of "
              f"the horizon {settings.horizon:.3g} (too stiff for it): the flow is kept as far as it went and its "
              f"claims are not computed on this seed; {horizon_key} sets the horizon", file=sys.stderr)
    null = EmbeddingUpdate(embeddings["null_along_p"], embeddings["null_along_v"])
    # Lemma 4.2's control (a bounded flow) where the lemma is judged: two classes, and a flow whose statistic
    # settled (an unsettled one is not tested, and needs no control). A flow stopped short of its horizon is
    # judged on nothing, so it needs no control either.
    judged = not regime(config.dataset, config).unmet(BY_ID["lemma42_growth"].requires)
    settled = bool(flow.metrics["log_growth_settled"])
    controls = control_metrics(embeddings["E1"], null.applied(embeddings["E0"], embeddings["p0"], embeddings["v"]),
                               embeddings["p0"], embeddings["v"], train, tokens, settings,
                               bounded=judged and settled) if reached else {}
    report, trajectory = flow.report, flow.trajectory
    if settings.max_margin and not report.max_margin.solved:
        print(f"gradient_flow: the max-margin QP for the final selection is {report.max_margin.status} "
              f"({report.n_constraints} constraints); cos_max_margin_selected and normalized_margin are null",
              file=sys.stderr)
    if not flow.metrics["flow_faithful"]:
        gaps = ", ".join(f"{name} {flow.metrics[f'half_step_{key}']:.3g}" for name, key in (
            ("|p_t|", "p_norm_gap"), ("loss", "loss_gap"), ("selection", "selection_gap"), ("angle", "angle")))
        print(f"gradient_flow: seed {seed}: the run with every step halved differs by more than "
              f"gradient_flow.agreement = {settings.agreement:g} ({gaps}): lower gradient_flow.tolerance; the run is "
              "flagged", file=sys.stderr)
    run.set_tag("max_margin_status", report.max_margin.status)

    out = seed_dir(results_dir("gradient_flow", config.dataset), seed)
    p_mm = report.max_margin.direction if report.max_margin.solved else np.full_like(trajectory.p[-1], np.nan)
    write_npz(out / "trajectory.npz", times=trajectory.times, p=trajectory.p, p_max_margin=p_mm)
    history = {**report.history, "half_step_p_norm": flow.halved.p_norm, "half_step_loss": flow.halved.loss}
    write_csv(out / "history.csv", pd.DataFrame(history))
    # MLflow draws a history against its integer steps: here 100 log10 t (step 300 is t = 1000), so that the curves
    # of flows with other horizons line up; the record at t = 0 has no log t.
    moved = trajectory.times > 0
    curves = {name: np.asarray(values)[moved] for name, values in history.items()}
    run.log_history(np.round(STEPS_PER_DECADE * np.log10(trajectory.times[moved])).astype(int), curves)
    run.record_metrics(out / "metrics.json", {**flow.metrics, **controls}, logged=curves)


def main(argv: list[str] | None = None) -> int:
    return run_stage("gradient_flow", SECTIONS, gradient_flow, argv,
                     every_seed=lambda config: results_dir("gradient_flow", config.dataset),
                     seeds=lambda config: config.flow_seeds)


if __name__ == "__main__":
    sys.exit(main())
