"""Known answers for the theory's claims: the one step and the gradient flow on small synthetic Assumption-1 data.

Each seed of a replicate draws its own data and initialisation, takes the one step on labels that keep all of
their signal (the lemmas' setting: the effect at the paper's size), half of it, or none (shuffled: the effect
absent), and follows the flow on p with E frozen there, on the true labels. The flow with a bounded |p_t| (a
weak L2 penalty) is Lemma 4.2's null. Every number comes from the stages' own functions (the step, the flow and
its checks, the controls), so what is calibrated is what the claims run.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from toksel.data.prepared import prepare_synthetic
from toksel.models.fused import FusedBags
from toksel.runtime.config import CalibrationConfig, GradientFlowConfig
from toksel.theory.convergence import control_metrics, follow_gradient_flow
from toksel.theory.one_step import alignment_metrics, embedding_update, one_step_from_initialisation, theory_slope

HALF = 0.5  # the share of the labels' signal a half-size effect keeps


def seed_of(*parts: int) -> int:
    """One integer seed from several (the replicate's, the seed's): torch's generator takes one int."""
    return int(np.random.SeedSequence(parts).generate_state(1)[0])


def theory_replicate(settings: CalibrationConfig, flow: GradientFlowConfig, replicate: int,
                     seed: int) -> dict[str, dict[str, float | None]]:
    """One seed of one replicate: condition (power, half, null) -> the theory claims' statistics there.

    power: the step on the true labels and the flow after it; half: the step on labels that keep half their
    signal and the flow after it; null: the step on shuffled labels and the flow after it, and the flow after the
    true step with a bounded |p_t| (Lemma 4.2's null), exactly the pipeline's controls.
    """
    draw = (settings.seed, replicate, seed)
    prepared = prepare_synthetic(settings.synthetic, draw)
    train, tokens = prepared.splits["train"], prepared.tokens
    step = one_step_from_initialisation(train, tokens, settings.d, seed_of(*draw), settings.eta0, null_seed=draw)
    half_update = embedding_update(step.E0, step.p0, step.v, FusedBags.from_split(train.with_signal(HALF, draw)),
                                   settings.eta0)
    E_half = half_update.applied(step.E0, step.p0, step.v)
    present = np.flatnonzero(tokens.occurring())
    half_step = alignment_metrics(step.E0, E_half, step.v, tokens.column("alpha"), theory_slope(settings.eta0, 2),
                                  present)
    # The QP, as on the synthetic datasets; the replicates' own horizon.
    settings_flow = dataclasses.replace(flow, max_margin=True, horizon=settings.horizon)
    flowed = follow_gradient_flow(step.E1, step.p0, step.v, train, tokens, settings_flow).metrics
    half_flow = follow_gradient_flow(E_half, step.p0, step.v, train, tokens, settings_flow).metrics
    E_null = step.null_update.applied(step.E0, step.p0, step.v)
    null = control_metrics(step.E1, E_null, step.p0, step.v, train, tokens, settings_flow)
    names = ("pearson_r", "slope_rel_error")
    flow_names = ("log_growth", "selection_fraction", "cos_max_margin_important", "flow_faithful")
    return {
        "power": {**{name: step.metrics[name] for name in names}, **{name: flowed[name] for name in flow_names}},
        "half": {**{name: half_step[name] for name in names}, **{name: half_flow[name] for name in flow_names}},
        "null": {**{name: step.metrics[f"control_{name}"] for name in names},
                 **{name: null[f"control_{name}"] for name in ("log_growth", "selection_fraction",
                                                              "cos_max_margin_important")}},
    }
