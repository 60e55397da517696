"""What each stage reads of the settings: whole sections, or single keys of them ("base.seeds").

A stage logs these as its run's parameters and hashes them; check_params writes them, resolved for each stage of
dvc.yaml (its dataset's overrides and its command line applied), to the settings file that is the stage's DVC
dependency on the parameters: a stage reruns when a value it reads changes, and only then.
"""

STAGE_SECTIONS: dict[str, tuple[str, ...]] = {
    # The ledger reads params.yaml whole and git's history, neither through these sections: dvc.yaml runs it always.
    "ledger": (),
    "prepare": ("base.data_seed", "base.seeds", "data"),
    "one_step": ("base.seeds", "base.data_seed", "model", "one_step"),
    "gradient_flow": ("base.seeds", "model", "gradient_flow"),
    "evaluate": ("base.seeds", "data", "model", "evaluate"),
    "train": ("base.seeds", "base.data_seed", "model", "one_step", "train"),
    "compare": ("base.seeds", "data", "train", "ablation.multiclass", "report"),
    "d_sweep": ("base.seeds", "base.data_seed", "model", "one_step", "train", "d_sweep"),
    "ablation": ("base.seeds", "base.data_seed", "train", "sequence"),
    "ablation_report": ("base.seeds", "train.seeds", "ablation", "sequence", "report"),
    "phase": ("base.seeds", "model", "gradient_flow", "phase.eta0", "phase.horizon", "phase.tolerance",
              "evaluate.min_selection_fraction"),
    "phase_diagram": ("base.seeds", "phase", "evaluate"),
    "calibrate": ("base.seeds", "train", "calibration", "report", "evaluate", "ablation"),
    "report": ("profile", "base.seeds", "train.datasets", "train.seeds", "report", "evaluate", "ablation", "phase",
               "d_sweep", "sequence.scale", "sequence.cpu", "sequence.paper"),
}

# What a stage that runs on every dataset reads of each dataset's own regime, resolved as that dataset's stages
# read it (its entry's overrides applied): a shared value that every dataset's entry overrides reruns nothing.
PER_DATASET_SECTIONS: dict[str, tuple[str, ...]] = {
    "calibrate": ("data", "model", "one_step", "gradient_flow"),
}
