"""What each stage's results depend on of the settings: whole sections, or single keys of them ("base.seeds"), as
they are for its dataset (the shared sections completed by its entry of `datasets`, then its command line). A theory
stage's include those of the theory stages it reads from (a flow run carries the one step's eta0 and the data's
sizes it was built on), so that its run shows its lineage.

A stage logs these as its run's parameters (MLflow shows them) and tags its run with their digest. What reruns a
stage is DVC's: the keys dvc.yaml lists under the stage's `params:`, which hold these and every other value the stage
reads while it runs (which claims are judged on its dataset: pair.dataset), and no more (tests/test_stage_deps.py
and tests/test_stage_reads.py check that they do).
"""

STAGE_SECTIONS: dict[str, tuple[str, ...]] = {
    # The ledger reads params.yaml whole and git's history, neither through these sections: dvc.yaml runs it always.
    "ledger": (),
    "prepare": ("base.data_seed", "base.seeds", "data"),
    "one_step": ("base.seeds", "base.data_seed", "data", "model", "one_step"),
    "gradient_flow": ("base.seeds", "base.data_seed", "data", "model", "one_step", "gradient_flow"),
    "evaluate": ("base.seeds", "base.data_seed", "data", "model", "one_step", "gradient_flow", "evaluate"),
    "train": ("base.seeds", "base.data_seed", "model", "one_step", "train"),
    "compare": ("base.seeds", "data", "train", "ablation.multiclass", "report"),
    "d_sweep": ("base.seeds", "base.data_seed", "model", "one_step", "train", "d_sweep"),
    "ablation": ("base.seeds", "base.data_seed", "train", "sequence"),
    "pair": ("base.seeds", "base.data_seed", "train", "sequence"),
    "pair_report": ("base.seeds", "train.seeds", "pair"),
    "margins": ("base.seeds", "base.data_seed", "data", "model", "one_step", "margins"),
    "negation": ("base.seeds", "train", "sequence", "negation"),
    "ablation_report": ("base.seeds", "train.seeds", "ablation", "sequence", "report"),
    "phase": ("base.seeds", "model", "gradient_flow", "phase.eta0", "phase.horizon", "phase.tolerance",
              "evaluate.min_selection_fraction"),
    "phase_diagram": ("base.seeds", "phase", "evaluate"),
    "calibrate": ("base.seeds", "train", "calibration", "report", "evaluate", "ablation", "pair", "margins"),
    "report": ("profile", "base.seeds", "train.datasets", "train.seeds", "report", "evaluate", "ablation", "phase",
               "pair", "margins", "d_sweep", "sequence.scale", "sequence.cpu", "sequence.paper"),
}
