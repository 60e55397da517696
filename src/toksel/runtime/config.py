"""params.yaml + `key=value` overrides -> one typed, validated config object.

The schema is a tree of dataclasses read through OmegaConf in struct mode, so an unknown key or a value of the
wrong type is rejected at load. Range limits live next to each field (`bounded`) and are checked after the
merge; every message names the full key.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional  # noqa: UP035  (OmegaConf needs the typing forms)

import yaml
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException

from toksel.runtime.errors import ToksError


# params.yaml holds every value; the schema holds types, bounds and descriptions only. A field's default is
# MISSING, so a key params.yaml lacks is an error, not a value hidden in the code (the run keys, dataset and seed,
# set per run on the command line, are the exception).
def bounded(default: Any = MISSING, *, ge: float | None = None, gt: float | None = None, le: float | None = None,
            choices: Sequence[str] | None = None, help: str = "") -> Any:
    """A dataclass field with an allowed range or set of choices and a one-line description."""
    return field(default=default, metadata={"ge": ge, "gt": gt, "le": le, "choices": choices, "help": help})


def limit(*, help: str) -> Any:
    """A cap on how many of something are kept: a non-negative integer, 0 for no cap."""
    return bounded(ge=0, help=help)


# The sections a `datasets` entry may override; dvc.yaml tracks datasets.<name>.<section> for each.
DATASET_SECTIONS = ("data", "model", "one_step", "gradient_flow", "train")


@dataclass
class BaseConfig:
    data_seed: int = bounded(ge=0, help="seed of the data: the synthetic generator, the subsamples, the "
                                           "controls' shuffled labels")
    seeds: List[int] = field(  # noqa: UP006
        default=MISSING,
        metadata={"help": "the seeds every stochastic stage runs with (initialisation, validation split, batch "
                          "order, and the data where they are drawn); each claim's interval is over them. A "
                          "costly stage runs the first few (its section's `seeds`)"})


@dataclass
class SyntheticConfig:
    mode: str = bounded(choices=("assumption1", "independent"),
                        help="assumption1: one relevant token per sequence; independent: i.i.d. positions")
    n_positive: int = bounded(ge=1, help="size of the positive token set")
    n_negative: int = bounded(ge=1, help="size of the negative token set")
    n_irrelevant: int = bounded(ge=1, help="size of the irrelevant token set")
    seq_len: int = bounded(ge=2, help="T, tokens per sequence")
    n_train: int = bounded(ge=2, help="training sequences (even in assumption1 mode: built in +/- pairs)")
    n_test: int = bounded(ge=2, help="test sequences")
    delta: float = bounded(ge=0.0, le=1.0, help="independent mode: probability of an irrelevant token")


# A file dataset's files lie in this folder of the project, which check_params depends on in dvc.yaml: a changed
# file reruns check_params, whose settings of that dataset's prepare hold the file's SHA-256.
OWN_DATA = Path("data", "own")
FILE_FORMATS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}  # extension -> format


@dataclass
class DataConfig:
    source: str = bounded(choices=("synthetic", "hub", "file"),
                          help="synthetic: our generator; hub: a Hugging Face dataset (or its mirror); file: a "
                               "CSV, JSON Lines or Parquet file of the project's data/own/")
    hub_id: str = bounded(help="Hub id, e.g. stanfordnlp/imdb (source hub)")
    path: str = bounded(help="source file: the file under data/own/, e.g. data/own/reviews.csv: the training "
                             "split, or every row when test_path is empty")
    test_path: str = bounded(help="source file: the test split's file under data/own/ (empty: test_fraction of "
                                  "path's rows)")
    test_fraction: float = bounded(gt=0.0, le=0.5, help="source file without test_path: the share of path's rows "
                                                         "held out as the test split (the same rows on every run)")
    text_column: str = bounded(help="column holding the text")
    label_column: str = bounded(help="column holding the integer label")
    num_classes: int = bounded(ge=2, help="labels must lie in 0 .. num_classes - 1")
    labels: Optional[List[int]] = bounded(  # noqa: UP006, UP045
        help="keep the rows with these source labels, renumbered 0 .. K-1 in this order (null: all rows)")
    tokenizer: str = bounded(choices=("word", "wordpiece", "bpe"),
                             help="word: lowercase words and punctuation; wordpiece/bpe: trained on train")
    subword_vocab_size: int = bounded(ge=100, help="vocabulary size a subword tokenizer is trained to")
    min_count: int = bounded(ge=1, help="keep tokens seen at least this often in the training split")
    max_vocab: int = limit(help="keep at most this many most frequent tokens (0: no limit)")
    max_train: int = limit(help="label-balanced, seeded subsample of the train split (0: all)")
    max_test: int = limit(help="label-balanced, seeded subsample of the test split (0: all)")
    bootstrap: bool = bounded(help="where the training split is used whole (no subsample, or one that takes every "
                                   "row), each seed trains on its own bootstrap resample of it, so that the seeds "
                                   "vary the data")
    max_len: Optional[int] = bounded(ge=1, help="truncate sequences to this many tokens (null: keep all)")  # noqa: UP045
    synthetic: Optional[SyntheticConfig] = bounded(  # noqa: UP045
        None, help="source synthetic: the generator's mode and sizes (the dataset's own)")

    @property
    def origin(self) -> str:
        """Where the data come from, in words: the Hub id, the file, or the generator's mode."""
        if self.source == "synthetic":
            return f"synthetic ({self.synthetic.mode})" if self.synthetic else "synthetic"
        return self.hub_id if self.source == "hub" else f"file {self.path}"

    @property
    def files(self) -> list[Path]:
        """The files a file dataset reads: path, then test_path when set ([] for the other sources)."""
        return [Path(name) for name in (self.path, self.test_path) if name] if self.source == "file" else []


@dataclass
class ModelConfig:
    d: int = bounded(ge=1, help="embedding dimension")


@dataclass
class OneStepConfig:
    eta0: float = bounded(gt=0.0, help="step size of the single GD step on E (Lemma 4.1)")


@dataclass
class GradientFlowConfig:
    horizon: float = bounded(gt=0.0, help="the flow time T the flow on p is followed to (error-controlled "
                                               "gradient steps, each advancing t by its step size)")
    tolerance: float = bounded(gt=0.0, le=0.1, help="the local error a step may make, relative to "
                                                         "max(|p|, 1): smaller is closer to the flow and slower")
    agreement: float = bounded(gt=0.0, help="the flow follows the flow when the same run with every step "
                                                  "halved agrees within this (|p_t|, loss, selection; radians)")
    seeds: int = limit(help="how many of base.seeds (the first) the flow runs (0: all of them)")
    selection_tol: float = bounded(ge=0.0,
                                   help="s is selected in X if (p/|p|)^T (E_max - E_s) <= selection_tol")
    max_margin: bool = bounded(help="solve the max-margin QP of Theorem 4.3 (small data only)")
    control_penalty: float = bounded(gt=0.0, help="Lemma 4.2's control: the same flow on the loss plus "
                                                       "lambda/2 |p|^2 with lambda = control_penalty / horizon, "
                                                       "bounded at a level it reaches within the run")
    method: str = bounded(choices=("explicit", "implicit", "implicit-krylov"),
                          help="the integrator: error-controlled gradient steps, or the linearly implicit ROS2 "
                               "(long steps where the flow is stiff: real data at long horizons)")


EMBEDDINGS = ("trained", "untrained", "one_step")


@dataclass
class TrainConfig:
    arms: List[str] = field(  # noqa: UP006
        default=MISSING,
        metadata={"help": "the embedding arms the train stage fits, in turn: trained (E, p, v jointly), untrained (E "
                          "frozen at its random init), one_step (E frozen at E1; p, v trained in both). dvc.yaml "
                          "declares all three arms' outputs, and compare reads them"})
    datasets: List[str] = field(  # noqa: UP006
        default=MISSING,
        metadata={"help": "dvc.yaml trains the three embedding arms on each of these datasets, every seed"})
    optimizer: str = bounded(choices=("adam", "sgd"), help="optimiser of every trained parameter")
    lr_grid: List[float] = field(  # noqa: UP006
        default=MISSING,
        metadata={"help": "each embedding arm trains at every learning rate here and keeps the one with the lowest "
                          "validation loss (the same procedure for every arm)"})
    lr: float = bounded(gt=0.0, help="the learning rate of the ablations, and of the matched-lr protocol "
                                           "(every arm at this lr, as the paper ran them: the claims' protocol; it "
                                           "must be in lr_grid)")
    lr_extensions: int = limit(help="when the best rate of lr_grid is its smallest or largest, screen this "
                                       "many more rates beyond it at most (the grid's own spacing)")
    seeds: int = limit(help="how many of base.seeds (the first) the training stages run (0: all of them)")
    screen_epochs: int = bounded(ge=1, help="each rate of lr_grid first trains this many epochs; the one with the "
                                               "lowest validation loss goes on from there under the stopping rule")
    weight_decay: float = bounded(ge=0.0, help="L2 penalty (decoupled for adam: AdamW)")
    batch_size: int = bounded(ge=1, help="sequences per minibatch")
    max_epochs: int = bounded(ge=1, help="at most this many epochs (the budget of every fit but the matched ones)")
    matched_max_epochs: int = bounded(ge=1, help="at most this many epochs for the matched-lr fits (every arm at lr)")
    patience: int = bounded(ge=1, help="early stopping: epochs without a lower validation loss")
    val_fraction: float = bounded(gt=0.0, le=0.5, help="share of the train split held out for validation")
    accelerator: str = bounded(choices=("auto", "cpu", "gpu"), help="auto: a GPU when there is one")
    strategy: str = bounded(choices=("auto", "ddp"),
                            help="ddp: one process per device (gloo on CPUs, NCCL on GPUs), each training its share "
                                 "of every batch; needed for devices or num_nodes above 1")
    devices: int = bounded(ge=1, help="processes (CPU) or GPUs per node")
    num_nodes: int = bounded(ge=1, help="machines of a multi-node DDP run (started with torchrun or SLURM)")
    precision: str = bounded(choices=("32-true", "64-true", "bf16-mixed"), help="Lightning precision")
    bins: int = bounded(ge=2, help="bins of the posterior difference for the token curves")
    binning: str = bounded(choices=("equal_width", "quantile"),
                           help="equal_width (the paper's tables) or quantile (bins of equal token counts)")
    min_bin_tokens: int = bounded(ge=1, help="a bin with fewer tokens is left out of the curve and its "
                                                "statistics (its count is still shown)")
    heldout_min_count: int = bounded(ge=1, help="a token enters the curves and rank statistics when it occurs "
                                                    "this often in the held-out (test) split, whose labels give "
                                                    "its statistics")


SEQUENCE_VARIANTS = ("one_layer", "mlp", "mlp_residual", "two_layer", "two_layer_kq")  # models/sequence.py


@dataclass
class ScaleConfig:
    d: int = bounded(ge=1, help="embedding dimension")
    max_len: Optional[int] = bounded(ge=1, help="keep each review's first max_len tokens (null: all)")  # noqa: UP045
    max_train: int = limit(help="seeded subset of the train split, validation included (0: all)")
    max_test: int = limit(help="seeded subset of the test split (0: all)")


@dataclass
class SequenceConfig:
    variant: str = bounded(choices=SEQUENCE_VARIANTS,
                           help="one_layer; mlp: a ReLU layer of width d before the head; mlp_residual: z + that "
                                "layer; two_layer: residual self-attention, then the <cls> read-out; two_layer_kq: "
                                "both with trained W_KQ")
    scale: str = bounded(choices=("cpu", "paper"), help="which size profile below the stage uses")
    cpu: ScaleConfig = field(default_factory=ScaleConfig)
    paper: ScaleConfig = field(default_factory=ScaleConfig)
    batch_size: int = bounded(ge=1, help="sequences per minibatch")
    bucketed: bool = bounded(help="training batches of similar length (less padding)")

    @property
    def profile(self) -> ScaleConfig:
        return self.cpu if self.scale == "cpu" else self.paper


@dataclass
class AblationConfig:
    datasets: List[str] = field(  # noqa: UP006
        default=MISSING,
        metadata={"help": "dvc.yaml runs each of ablation.variants on each of these datasets"})
    variants: List[str] = field(  # noqa: UP006
        default=MISSING,
        metadata={"help": f"the sequence.variant values dvc.yaml runs ({', '.join(SEQUENCE_VARIANTS)})"})
    multiclass: str = bounded(help="the dataset whose trained-arm curves (train@<it>) are set "
                                                 "against the rebuttal's 4-class tables")
    min_spearman: float = bounded(ge=-1.0, le=1.0, help="a curve agrees in shape with a rebuttal table when "
                                                             "the Spearman of their bin means is at least this")


@dataclass
class PhaseConfig:
    dataset: str = bounded(help="the assumption1 synthetic dataset of `datasets` the grid runs on")
    horizon: float = bounded(gt=0.0, help="the flow time of the grid's cells (in place of the dataset's)")
    tolerance: float = bounded(gt=0.0, le=0.1, help="the flow's error tolerance in the grid's cells (in place "
                                                         "of the dataset's)")
    eta0: List[float] = field(  # noqa: UP006
        default=MISSING,
        metadata={"help": "one_step.eta0 of the grid's columns (dvc.yaml runs every eta0 x d cell)"})
    d: List[int] = field(  # noqa: UP006
        default=MISSING,
        metadata={"help": "model.d of the grid's rows; also the d sweep of the one-step error"})


@dataclass
class DSweepConfig:
    datasets: List[str] = field(  # noqa: UP006
        default=MISSING,
        metadata={"help": "dvc.yaml sweeps d on each of these datasets (d_sweep@<dataset>): the trained and untrained "
                          "arms at every d, every training seed"})
    d: List[int] = field(  # noqa: UP006
        default=MISSING,
        metadata={"help": "the embedding dimensions of the sweep (the train stage's model.d joins them)"})


@dataclass
class TrackingConfig:
    live: bool = bounded(help="each fit also sends its curves to MLflow as it trains (Lightning's MLFlowLogger), for "
                              "long trainings on a GPU; publish completes those runs. It changes no result, so no "
                              "stage reruns for it")


@dataclass
class ComputeConfig:
    address: str = bounded(help="a Dask scheduler (tcp://host:8786) the independent units (phase cells, calibration "
                                "replicates) go to; empty: this machine ($TOKSEL_COMPUTE_ADDRESS wins). It changes "
                                "no result, so no stage reruns for it")
    workers: int = bounded(ge=0, help="units at a time on this machine; 0: one per core")


@dataclass
class CalibrationConfig:
    seed: int = bounded(ge=0, help="seed of the known answers' draws (data, initialisations, noise)")
    precision: float = bounded(gt=0.0, le=0.5, help="the Wilson half-width each rate is drawn to where a "
                                                       "replicate is cheap (planted statistics, small synthetic data)")
    costly_precision: float = bounded(gt=0.0, le=0.5, help="the same where a replicate follows flows or passes "
                                                              "over a text corpus")
    max_replicates: int = bounded(ge=2, help="replicates at most per rung where a replicate is cheap")
    max_costly_replicates: int = bounded(ge=2, help="replicates at most per rung where a replicate is costly")
    flow_datasets: List[str] = field(  # noqa: UP006
        default=MISSING, metadata={"help": "the synthetic datasets whose flows are calibrated (a replicate is "
                                                "five flows at each rung: where each takes seconds, thousands do not "
                                                "fit)"})


@dataclass
class EvaluateConfig:
    max_slope_rel_error: float = bounded(gt=0.0, help="Lemma 4.1: |slope - eta0/2| / (eta0/2) at most")
    min_pearson_r: float = bounded(ge=-1.0, le=1.0, help="Lemma 4.1: Pearson r at least")
    min_selection_fraction: float = bounded(ge=0.0, le=1.0, help="Lemma 4.4: selection fraction at least")
    min_cos_max_margin: float = bounded(ge=-1.0, le=1.0, help="Theorem 4.3: cos(p_T, p_mm) at least")
    min_log_growth: float = bounded(help="Lemma 4.2: the slope of |p_t| against log t over [T/2, T] over its "
                                              "average since the flow started to move, at least")


@dataclass
class ReportConfig:
    min_accuracy_gap: float = bounded(ge=-1.0, le=1.0, help="presence: trained minus untrained test accuracy "
                                                                 "above this, the gap of its null")
    size_factor: float = bounded(gt=1.0, help="size: our value within this factor of the paper's (its interval "
                                                   "inside [paper / factor, paper x factor])")
    min_spread_ratio: float = bounded(gt=0.0, help="the scale-free spread of E_s^T v and E_s^T p around their "
                                                        "binned curves, full training over one step then frozen, at "
                                                        "least")
    min_rank_agreement: float = bounded(ge=-1.0, le=2.0, help="a noise-corrected rank correlation that makes a "
                                                                   "curve rise, at least")
    max_edge_factor: float = bounded(ge=1.0, help="a measured edge of the eta0 window agrees with the scale "
                                                       "argument when within this factor of it")
    max_slope_deviation: float = bounded(gt=0.0, help="the one-step error's log-log slope in d agrees with "
                                                            "-1/2 when within this of it")
    size_alpha: float = bounded(gt=0.0, le=0.25, help="a size claim's equivalence test (TOST): each one-sided "
                                                              "test at this level, the 1 - 2 alpha interval inside "
                                                              "the band")
    family_alpha: float = bounded(gt=0.0, le=0.5, help="the family-wise error rate of the report's counted "
                                                                "verdicts under Holm's procedure")


@dataclass
class Config:
    dataset: str = bounded("synthetic", help="the entry of `datasets` to run on")
    profile: str = bounded(help="what the values are: full (the paper's sizes) or the name of the profile that set "
                                "them (quick: profiles/quick.yaml, `make quick`); the report's first lines say it")
    seed: int = bounded(0, ge=0, help="the model seed of this run (dvc.yaml runs each of base.seeds)")
    base: BaseConfig = field(default_factory=BaseConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    one_step: OneStepConfig = field(default_factory=OneStepConfig)
    gradient_flow: GradientFlowConfig = field(default_factory=GradientFlowConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    sequence: SequenceConfig = field(default_factory=SequenceConfig)
    ablation: AblationConfig = field(default_factory=AblationConfig)
    phase: PhaseConfig = field(default_factory=PhaseConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    d_sweep: DSweepConfig = field(default_factory=DSweepConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    # name -> {data: {...}, model: {...}, one_step: {...}, gradient_flow: {...}, train: {...}}: its overrides
    datasets: Dict[str, Any] = field(default=MISSING)  # noqa: UP006

    @property
    def training_seeds(self) -> list[int]:
        """The seeds the training stages run (train, ablation) and their claims are read over."""
        return first_seeds(self.base.seeds, self.train.seeds)

    @property
    def flow_seeds(self) -> list[int]:
        """The seeds the gradient_flow stage runs on this dataset."""
        return first_seeds(self.base.seeds, self.gradient_flow.seeds)

    def sections(self, names: Iterable[str]) -> dict[str, Any]:
        """The named sections, or single keys of them ("base.seeds"), as a plain nested dict (what a stage logs
        and hashes)."""
        tree: dict[str, Any] = {}
        for name in names:
            section, _, key = name.partition(".")
            value = getattr(self, section)
            if key:
                tree.setdefault(section, {})[key] = _plain(getattr(value, key))
            else:
                tree[section] = _plain(value)
        return tree


def _plain(value: Any) -> Any:
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value


def _check_ranges(node: Any, prefix: str, shown: Callable[[str], str] = str) -> None:
    """Each value within its bounds; an error names the key as `shown` writes it (where params.yaml holds it)."""
    for spec in dataclasses.fields(node):
        key, value = f"{prefix}{spec.name}", getattr(node, spec.name)
        if spec.name == "datasets":
            continue
        if dataclasses.is_dataclass(value):
            _check_ranges(value, f"{key}.", shown)
            continue
        key = shown(key)
        limits = spec.metadata
        if value is None:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ToksError(f"config error: {key} = {value} must be a finite number")
        for bound, holds, words in (("ge", lambda v, b: v >= b, ">="), ("gt", lambda v, b: v > b, ">"),
                                    ("le", lambda v, b: v <= b, "<=")):
            if limits.get(bound) is not None and not holds(value, limits[bound]):
                raise ToksError(f"config error: {key} = {value} is out of range: must be {words} {limits[bound]}")
        if limits.get("choices") and value not in limits["choices"]:
            raise ToksError(f"config error: {key} = {value!r} is not one of {', '.join(limits['choices'])}")


def _check_consistency(config: Config, prefix: str) -> None:
    data, synthetic = config.data, config.data.synthetic
    if data.source == "synthetic" and synthetic is None:
        raise ToksError(f"config error: {prefix}data.synthetic is missing: a synthetic dataset gives its generator's "
                        "mode and sizes there")
    if data.source == "synthetic" and synthetic.mode == "assumption1" and (synthetic.n_train % 2 or
                                                                          synthetic.n_test % 2):
        raise ToksError(f"config error: {prefix}data.synthetic.n_train and n_test must be even in assumption1 "
                        "mode (sequences come in +/- pairs)")
    if data.labels is not None and (len(data.labels) != data.num_classes or len(set(data.labels)) != len(data.labels)):
        raise ToksError(f"config error: {prefix}data.labels = {data.labels} must list data.num_classes = "
                        f"{data.num_classes} distinct source labels")
    seeds = config.base.seeds
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ToksError(f"config error: {prefix}base.seeds = {seeds} must be a non-empty list of distinct seeds >= 0")
    if len(seeds) > MAX_SEEDS:
        raise ToksError(f"config error: {prefix}base.seeds holds {len(seeds):,} seeds, more than {MAX_SEEDS:,}: each "
                        "is a folder, a run and a unit of every seeded stage; run larger studies in batches of seeds")
    arms = config.train.arms
    if not arms or len(set(arms)) != len(arms) or not set(arms) <= set(EMBEDDINGS):
        raise ToksError(f"config error: {prefix}train.arms = {arms} must be a non-empty list of distinct arms of "
                        f"{', '.join(EMBEDDINGS)}")
    grid = config.train.lr_grid
    if not grid or min(grid) <= 0 or len(set(grid)) != len(grid):
        raise ToksError(f"config error: {prefix}train.lr_grid = {grid} must be a non-empty list of distinct "
                        "positive learning rates")
    if config.train.lr not in grid:
        raise ToksError(f"config error: {prefix}train.lr = {config.train.lr:g} must be one of train.lr_grid = {grid} "
                        "(the matched-lr protocol reads the grid's runs at that lr)")
    for name in config.train.datasets:
        if config.datasets and name not in config.datasets:
            raise ToksError(f"config error: {prefix}train.datasets names {name!r}, which `datasets` does not define "
                            f"({', '.join(config.datasets)})")
    if not config.ablation.datasets:
        raise ToksError(f"config error: {prefix}ablation.datasets is empty: name at least one dataset")
    unknown = [variant for variant in config.ablation.variants if variant not in SEQUENCE_VARIANTS]
    if unknown or not config.ablation.variants:
        raise ToksError(f"config error: {prefix}ablation.variants = {config.ablation.variants} must name some of "
                        f"{', '.join(SEQUENCE_VARIANTS)}")
    for name in (*config.ablation.datasets, config.ablation.multiclass):
        if config.datasets and name not in config.datasets:
            raise ToksError(f"config error: {prefix}ablation names the dataset {name!r}, which `datasets` does not "
                            f"define ({', '.join(config.datasets)})")
    sweep = config.d_sweep
    if not sweep.d or min(sweep.d) < 1 or len(set(sweep.d)) != len(sweep.d):
        raise ToksError(f"config error: {prefix}d_sweep.d = {sweep.d} must be a non-empty list of distinct positive "
                        "dimensions")
    for name in sweep.datasets:
        if config.datasets and name not in config.datasets:
            raise ToksError(f"config error: {prefix}d_sweep.datasets names {name!r}, which `datasets` does not define "
                            f"({', '.join(config.datasets)})")
    phase = config.phase
    if not phase.eta0 or not phase.d or min(phase.eta0) <= 0 or min(phase.d) < 1:
        raise ToksError(f"config error: {prefix}phase.eta0 = {phase.eta0} and phase.d = {phase.d} must be non-empty "
                        "lists of positive numbers")
    if len({f"{eta0:g}" for eta0 in phase.eta0}) != len(phase.eta0) or len(set(phase.d)) != len(phase.d):
        raise ToksError(f"config error: {prefix}phase.eta0 = {phase.eta0} and phase.d = {phase.d} must each hold "
                        "distinct values (each names a cell of the grid)")
    for name in (config.dataset, *config.datasets):
        check_name(name, f"{prefix}dataset key")
    if config.datasets and phase.dataset not in config.datasets:
        raise ToksError(f"config error: {prefix}phase.dataset = {phase.dataset!r} is not an entry of `datasets` "
                        f"({', '.join(config.datasets)})")
    train = config.train
    if train.devices * train.num_nodes > 1 and train.strategy != "ddp":
        raise ToksError(f"config error: {prefix}train.devices = {train.devices} x train.num_nodes = "
                        f"{train.num_nodes} processes need train.strategy=ddp")
    if data.source == "hub" and not data.hub_id:
        raise ToksError(f"config error: {prefix}data.hub_id is empty: a hub dataset needs its Hub id")
    if data.source == "file":
        _check_data_files(data, prefix)


def _check_data_files(data: DataConfig, prefix: str) -> None:
    """A file dataset names its file, and each file lies under data/own/ with an extension that gives its format."""
    if not data.path:
        raise ToksError(f"config error: {prefix}data.path is empty: a file dataset needs its file (CSV, JSON Lines "
                        f"or Parquet under {OWN_DATA}/)")
    for key in ("path", "test_path"):
        value = getattr(data, key)
        if not value:
            continue
        parts = Path(os.path.normpath(value)).parts
        if len(parts) < 3 or parts[:2] != OWN_DATA.parts:  # an absolute path, or one leading out of it
            raise ToksError(f"config error: {prefix}data.{key} = {value!r} must lie in the project's {OWN_DATA}/ "
                            f"folder, written relative to the project ({OWN_DATA}/reviews.csv): DVC follows that "
                            "folder, so a changed file reruns its stages")
        if not Path(value).resolve().is_relative_to(OWN_DATA.resolve()):  # a link there to a file elsewhere
            raise ToksError(f"config error: {prefix}data.{key} = {value!r} is a link to a file outside {OWN_DATA}/: "
                            "copy the file there (DVC follows that folder, not what its links point to)")
        if Path(value).suffix.lower() not in FILE_FORMATS:
            raise ToksError(f"config error: {prefix}data.{key} = {value!r}: the format comes from the extension, "
                            f"one of {', '.join(FILE_FORMATS)}")


NAME = re.compile(r"[A-Za-z0-9_-]+")  # what may name a folder and stand in a DVC command line


def check_name(name: str, what: str) -> None:
    """`name` names a folder and stands in DVC's command lines: letters, digits, `_` and `-` only."""
    if not NAME.fullmatch(name):
        raise ToksError(f"config error: {what} {name!r} may hold only letters, digits, '_' and '-' (it names a "
                        "folder and stands in dvc.yaml's commands)")


def _check_folder_numbers(params: Any, path: Path) -> None:
    """dvc.yaml names phase@<d>'s folder after the number as params.yaml writes it: 128.0 would name d128.0."""
    written = OmegaConf.select(params, "phase.d", default=None)
    if isinstance(written, ListConfig) and not all(isinstance(d, int) and not isinstance(d, bool)
                                                   for d in written):
        raise ToksError(f"config error: phase.d = {list(written)} in {path}: write each d as a plain integer "
                        "(dvc.yaml names each row's folder after it)")


MAX_SEEDS = 1000  # an interval over a thousand seeds is already 30 times tighter than over one; 20,000 took the
                  # settings check past a minute and a stopped prepare left thousands of empty seed folders


def _check_interpolations(path: Path, params: Any) -> None:
    """Refuse `${...}` anywhere in the values: DVC compares the text, not what it resolves to, so a change behind it
    would rerun nothing; and `${oc.env:VAR}` would copy the environment (a password) into the settings and MLflow."""
    def walk(node: Any, key: str) -> None:
        if isinstance(node, dict | list):
            for name, value in node.items() if isinstance(node, dict) else enumerate(node):
                walk(value, f"{key}.{name}" if key else str(name))
        elif isinstance(node, str) and "${" in node:
            raise ToksError(f"config error: {key} = {node!r} in {path} is an interpolation: write the value itself "
                            "(DVC sees the text, not what it resolves to; an environment variable would be copied "
                            "into the settings and MLflow)")
    walk(OmegaConf.to_container(params, resolve=False), "")


def _check_aliases(path: Path, text: str) -> None:
    """Refuse any YAML alias, found in the parser's events (which cost what the text does) before anything expands
    it: params.yaml uses none, and a few dozen nested ones expand to gigabytes (a "billion laughs")."""
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            raise ToksError(f"config error: {path} uses a YAML alias (*{event.anchor}) at line "
                            f"{event.start_mark.line + 1}: write the values out")


def _read_params(path: Path) -> tuple[Any, str]:
    """params.yaml as an OmegaConf node, and the digest of the values in it (what DVC records: comments and
    layout aside); one line for a file that is not UTF-8, not YAML, repeats a key or is not a mapping."""
    try:
        text = path.read_bytes().decode("utf-8")
        _check_aliases(path, text)
        params = OmegaConf.load(io.StringIO(text))
    except UnicodeDecodeError as error:
        raise ToksError(f"config error: {path} is not UTF-8 text (byte {error.start})") from None
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ToksError(f"config error: {path} is not valid YAML{at}: {problem}") from None
    except OmegaConfBaseException as error:
        raise ToksError(f"config error: {path}: {str(error).splitlines()[0]}") from None
    if not isinstance(params, DictConfig):
        raise ToksError(f"config error: {path} must be a mapping of sections, not a list")
    _check_interpolations(path, params)
    values = json.dumps(OmegaConf.to_container(params, resolve=False), sort_keys=True, default=str)
    return params, hashlib.sha256(values.encode()).hexdigest()


def params_digest(path: Path | str = "params.yaml") -> str:
    """The digest of the values `path` holds now, as read_config took it."""
    return _read_params(Path(path))[1]


@functools.cache
def _schema() -> Any:
    """The schema as an OmegaConf node, built once: each merge copies it, and building it is the slow part."""
    return OmegaConf.structured(Config)


def _resolve(layers: list[Any], prefix: str = "", dataset: str | None = None) -> Config:
    """Merge the layers (the shared sections, a dataset entry's, the command line) onto the schema and validate;
    errors name the key, after `prefix`; a missing value of a dataset's own section, in `dataset`'s entry."""
    try:
        config = OmegaConf.to_object(OmegaConf.merge(_schema(), *layers))
    except OmegaConfBaseException as error:
        key = f"{prefix}{getattr(error, 'full_key', None) or '?'}"
        if isinstance(error, ConfigKeyError):
            raise ToksError(f"config error: unknown key {key!r} (check the spelling against params.yaml)") from None
        if isinstance(error, MissingMandatoryValue):
            if dataset and key.split(".")[0] in DATASET_SECTIONS:
                key = f"datasets.{dataset}.{key}"
            raise ToksError(f"config error: {key} has no value: params.yaml holds every setting (the code has no "
                            "defaults), so add it there") from None
        raise ToksError(f"config error: {key}: {str(error).splitlines()[0]}") from None
    # A value the dataset entry gives (and no later layer, the command line, replaces) is named as it is written.
    entry, later = (layers[1], layers[2:]) if dataset and len(layers) > 1 else (None, [])

    def shown(key: str) -> str:
        given = entry is not None and OmegaConf.select(entry, key, default=None) is not None
        replaced = any(OmegaConf.select(layer, key, default=None) is not None for layer in later)
        return f"datasets.{dataset}.{key}" if given and not replaced else key

    _check_ranges(config, prefix, shown)
    _check_consistency(config, prefix)
    data = config.data
    if data.source == "synthetic" and data.num_classes != 2:
        raise ToksError(f"config error: {prefix}data.num_classes = {data.num_classes}: the synthetic generator draws "
                        "two classes (labels +1 and -1); K classes come from a text dataset")
    return config


def _dataset_layer(datasets: Any, name: str) -> Any:
    """The sections a dataset entry overrides; every entry lists all of DATASET_SECTIONS ({} for none)."""
    if name not in datasets:
        known = ", ".join(datasets) or "none"
        raise ToksError(f"config error: unknown dataset {name!r}: params.yaml defines {known}")
    entry = datasets[name]
    missing = [section for section in DATASET_SECTIONS if entry is None or section not in entry]
    if missing:
        raise ToksError(f"config error: datasets.{name} lacks the sections {', '.join(missing)} (use {{}} for "
                        "no overrides: dvc.yaml tracks each of them)")
    return OmegaConf.create({section: entry[section] or {} for section in DATASET_SECTIONS})


@dataclass(frozen=True)
class ReadConfig:
    config: Config
    params_path: Path  # the params file it was made from
    params_digest: str  # of the values in that file


def load_config(overrides: Sequence[str] = (), path: Path | str = "params.yaml") -> Config:
    """Read `path`, apply the chosen dataset's overrides, then the `key=value` overrides, and validate.

    Every dataset entry is validated too, so a typo anywhere in params.yaml is caught on the first run.
    Raises ToksError naming the offending key.
    """
    return read_config(overrides, path).config


def dataset_configs(names: Iterable[str], overrides: Sequence[str] = ()) -> dict[str, Config]:
    """Each dataset's config as its stages read it: its entry's overrides, then a stage's command line (the values
    a stage run by hand with the same `key=value`s had)."""
    return {name: load_config([*overrides, f"dataset={name}"]) for name in names}


def read_config(overrides: Sequence[str] = (), path: Path | str = "params.yaml") -> ReadConfig:
    """load_config, with the digest of the values it read: a stage checks at its end that the file still holds them."""
    path = Path(path)
    if not path.exists():
        raise ToksError(f"config error: {path} not found: run from the project root")
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise ToksError(f"config error: override {item!r} is not of the form key=value")
    params, digest = _read_params(path)
    _check_folder_numbers(params, path)
    try:
        command_line = OmegaConf.from_dotlist(list(overrides))
    except OmegaConfBaseException as error:
        raise ToksError(f"config error: the overrides {' '.join(overrides)}: {str(error).splitlines()[0]}") from None
    # Which dataset, and the entries (the command line may change them too): each entry completes the shared
    # sections with its own values, so no config is whole before one is applied.
    try:
        chosen = OmegaConf.merge(params, command_line)
        datasets, name = chosen.get("datasets"), chosen.get("dataset", Config.dataset)
    except OmegaConfBaseException as error:
        raise ToksError(f"config error: {str(error).splitlines()[0]}") from None
    if not isinstance(datasets, DictConfig) or not datasets:
        raise ToksError(f"config error: {path} has no `datasets` mapping: each dataset is an entry there")
    if not isinstance(name, str):
        raise ToksError(f"config error: dataset = {name!r} must name an entry of datasets")
    _check_no_dead_values(params, datasets, path)
    # Every section but the dataset entries, which each entry's own layer stands in for.
    shared = OmegaConf.merge(OmegaConf.masked_copy(params, [key for key in params if key != "datasets"]),
                             {"datasets": {}})
    for entry in (name, *datasets):  # names first: each stands in a folder and a command line
        check_name(entry, "dataset key")
    layer = _dataset_layer(datasets, name)
    if OmegaConf.select(layer, "data.synthetic") is None and OmegaConf.select(command_line, "data.synthetic"):
        command_line.data.pop("synthetic")  # the generator's values (a test's tiny sizes): synthetic datasets' only
    config = _resolve([params, layer, command_line], dataset=name)  # the run's own first
    for entry in datasets:
        _resolve([shared, _dataset_layer(datasets, entry)], prefix=f"datasets.{entry}.")
    return ReadConfig(config, path, digest)


def _check_no_dead_values(params: Any, datasets: Any, path: Path) -> None:
    """A shared value that every dataset's entry sets too would change nothing (`dvc exp run -S one_step.eta0=50`
    once did nothing): refused, naming where the value lives."""
    def leaves(node: Any, key: str) -> Iterator[str]:
        if isinstance(node, DictConfig) and len(node):
            for name in node:
                yield from leaves(node[name], f"{key}.{name}")
        else:
            yield key

    for section in DATASET_SECTIONS:
        for key in leaves(params.get(section), section) if section in params else []:
            if all(OmegaConf.select(entry, key, default="<absent>") != "<absent>" for entry in datasets.values()):
                raise ToksError(f"config error: {key} in {path} is every dataset's own: set "
                                f"datasets.<name>.{key} (datasets: {', '.join(datasets)})")


def describe(config: Config, sections: Iterable[str]) -> list[str]:
    """One line per key of `sections`: its current value and what it means (for --help)."""
    lines = []

    def walk(node: Any, prefix: str) -> None:
        for spec in dataclasses.fields(node):
            value = getattr(node, spec.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{spec.name}.")
            else:
                lines.append(f"  {f'{prefix}{spec.name}={value}':<44} {spec.metadata.get('help', '')}".rstrip())

    for name in sections:
        section, _, key = name.partition(".")
        if not key and dataclasses.is_dataclass(getattr(config, section)):
            walk(getattr(config, section), f"{section}.")
            continue
        owner = getattr(config, section) if key else config  # a key of a section, or a top-level key (profile)
        spec = next(spec for spec in dataclasses.fields(owner) if spec.name == (key or section))
        lines.append(f"  {f'{name}={getattr(owner, key or section)}':<44} {spec.metadata.get('help', '')}".rstrip())
    return lines


def first_seeds(seeds: Sequence[int], count: int) -> list[int]:
    """The first `count` of `seeds`, or all of them for 0: the seeds a stage with a narrower budget runs."""
    return list(seeds[:count] if count else seeds)


def params_hash(sections: dict[str, Any]) -> str:
    """A short, stable fingerprint of a stage's resolved parameters."""
    return hashlib.sha256(json.dumps(sections, sort_keys=True).encode()).hexdigest()[:12]
