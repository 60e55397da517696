"""The schema of params.yaml: every section's keys, their types, ranges or choices and what they mean, and the rules
that tie keys together. runtime/config.py reads params.yaml, merges a dataset's entry and the command line, and
validates the result against this schema, turning its first complaint into one line that names the key.

The science reads its settings through these types; nothing here reads a file or the environment.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, get_args  # noqa: UP035  (pydantic resolves these forms)

import pydantic
from pydantic import Field

# params.yaml holds every value; the schema holds types, bounds and descriptions only. A field without a default is
# required, so a key params.yaml lacks is an error, not a value hidden in the code (the run keys, dataset and seed,
# set per run on the command line, are the exception). Numbers must be finite; a number given for a text is read as
# text, as YAML would write it.
dataclass = pydantic.dataclasses.dataclass(
    kw_only=True, config=pydantic.ConfigDict(extra="forbid", allow_inf_nan=False, coerce_numbers_to_str=True))


# The sections a `datasets` entry may override; dvc.yaml tracks datasets.<name>.<section> for each.
DATASET_SECTIONS = ("data", "model", "one_step", "gradient_flow", "train")


@dataclass
class BaseConfig:
    data_seed: int = Field(ge=0,
        description="seed of the data: the synthetic generator, the subsamples, the controls' shuffled labels")
    seeds: List[int] = Field(  # noqa: UP006
        description="the seeds every stochastic stage runs with (initialisation, validation split, batch order, and "
                    "the data where they are drawn); each claim's interval is over them. A costly stage runs the first"
                    " few (its section's `seeds`)")


@dataclass
class SyntheticConfig:
    mode: Literal["assumption1", "independent", "pair", "pair_first_order"] = Field(
        description="assumption1: one relevant token per sequence; independent: i.i.d. positions; pair: a share of "
                    "the sequences carries a sentiment token that a negator flips; pair_first_order: the same, the "
                    "negator flipping nothing (data/synthetic.py)")
    n_positive: int = Field(ge=1, description="size of the positive token set")
    n_negative: int = Field(ge=1, description="size of the negative token set")
    n_irrelevant: int = Field(ge=1, description="size of the irrelevant token set")
    seq_len: int = Field(ge=2, description="T, tokens per sequence")
    n_train: int = Field(ge=2, description="training sequences (even but in independent mode: built in +/- pairs)")
    n_test: int = Field(ge=2, description="test sequences")
    delta: float = Field(ge=0.0, le=1.0, description="independent mode: probability of an irrelevant token")
    pair_share: float = Field(ge=0.0, le=1.0,
        description="the pair modes: the share of the sequences that carry the pair (in quadruples)")
    label_noise: float = Field(ge=0.0, lt=0.5,
        description="the pair modes: each label of the sequences without the pair flipped with this probability")


# A file dataset's files lie in this folder of the project, which check_params and prepare depend on in dvc.yaml:
# a changed file reruns them.
OWN_DATA = Path("data", "own")
FILE_FORMATS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}  # extension -> format


@dataclass
class DataConfig:
    source: Literal["synthetic", "hub", "file"] = Field(
        description="synthetic: our generator; hub: a Hugging Face dataset (or its mirror); file: a CSV, JSON Lines or"
                    " Parquet file of the project's data/own/")
    hub_id: str = Field(description="Hub id, e.g. stanfordnlp/imdb (source hub)")
    path: str = Field(
        description="source file: the file under data/own/, e.g. data/own/reviews.csv: the training split, or every "
                    "row when test_path is empty")
    test_path: str = Field(
        description="source file: the test split's file under data/own/ (empty: test_fraction of path's rows)")
    test_fraction: float = Field(gt=0.0, le=0.5,
        description="source file without test_path: the share of path's rows held out as the test split (the same rows"
                    " on every run)")
    text_column: str = Field(description="column holding the text")
    label_column: str = Field(description="column holding the integer label")
    num_classes: int = Field(ge=2, description="labels must lie in 0 .. num_classes - 1")
    labels: Optional[List[int]] = Field(  # noqa: UP006, UP045
        description="keep the rows with these source labels, renumbered 0 .. K-1 in this order (null: all rows)")
    tokenizer: Literal["word", "wordpiece", "bpe"] = Field(
        description="word: lowercase words and punctuation; wordpiece/bpe: trained on train")
    subword_vocab_size: int = Field(ge=100, description="vocabulary size a subword tokenizer is trained to")
    min_count: int = Field(ge=1, description="keep tokens seen at least this often in the training split")
    max_vocab: int = Field(ge=0, description="keep at most this many most frequent tokens (0: no limit)")
    max_train: int = Field(ge=0, description="label-balanced, seeded subsample of the train split (0: all)")
    max_test: int = Field(ge=0, description="label-balanced, seeded subsample of the test split (0: all)")
    bootstrap: bool = Field(
        description="where the training split is used whole (no subsample, or one that takes every row), each seed "
                    "trains on its own bootstrap resample of it, so that the seeds vary the data")
    max_len: Optional[int] = Field(ge=1,  # noqa: UP045
        description="truncate sequences to this many tokens (null: keep all)")
    synthetic: Optional[SyntheticConfig] = Field(None,  # noqa: UP045
        description="source synthetic: the generator's mode and sizes (the dataset's own)")

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
    d: int = Field(ge=1, description="embedding dimension")


@dataclass
class OneStepConfig:
    eta0: float = Field(gt=0.0, description="step size of the single GD step on E (Lemma 4.1)")


@dataclass
class GradientFlowConfig:
    horizon: float = Field(gt=0.0,
        description="the flow time T the flow on p is followed to (error-controlled gradient steps, each advancing t "
                    "by its step size)")
    tolerance: float = Field(gt=0.0, le=0.1,
        description="the local error a step may make, relative to max(|p|, 1): smaller is closer to the flow and "
                    "slower")
    agreement: float = Field(gt=0.0,
        description="the flow follows the flow when the same run with every step halved agrees within this (|p_t|, "
                    "loss, selection; radians)")
    seeds: int = Field(ge=0, description="how many of base.seeds (the first) the flow runs (0: all of them)")
    selection_tol: float = Field(ge=0.0, description="s is selected in X if (p/|p|)^T (E_max - E_s) <= selection_tol")
    max_margin: bool = Field(description="solve the max-margin QP of Theorem 4.3 (small data only)")
    control_penalty: float = Field(gt=0.0,
        description="Lemma 4.2's control: the same flow on the loss plus lambda/2 |p|^2 with lambda = control_penalty "
                    "/ horizon, bounded at a level it reaches within the run")
    method: Literal["explicit", "implicit", "implicit-krylov"] = Field(
        description="the integrator: error-controlled gradient steps, or the linearly implicit ROS2 (long steps where "
                    "the flow is stiff: real data at long horizons)")


EMBEDDINGS = ("trained", "untrained", "one_step")


@dataclass
class TrainConfig:
    arms: List[str] = Field(  # noqa: UP006
        description="the embedding arms the train stage fits, in turn: trained (E, p, v jointly), untrained (E frozen "
                    "at its random init), one_step (E frozen at E1; p, v trained in both). dvc.yaml declares all three"
                    " arms' outputs, and compare reads them")
    datasets: List[str] = Field(  # noqa: UP006
        description="dvc.yaml trains the three embedding arms on each of these datasets, every seed")
    optimizer: Literal["adam", "sgd"] = Field(description="optimiser of every trained parameter")
    lr_grid: List[float] = Field(  # noqa: UP006
        description="each embedding arm trains at every learning rate here and keeps the one with the lowest "
                    "validation loss (the same procedure for every arm)")
    lr: float = Field(gt=0.0,
        description="the learning rate of the ablations, and of the matched-lr protocol (every arm at this lr, as the "
                    "paper ran them: the claims' protocol; it must be in lr_grid)")
    lr_extensions: int = Field(ge=0,
        description="when the best rate of lr_grid is its smallest or largest, screen this many more rates beyond it "
                    "at most (the grid's own spacing)")
    seeds: int = Field(ge=0, description="how many of base.seeds (the first) the training stages run (0: all of them)")
    screen_epochs: int = Field(ge=1,
        description="each rate of lr_grid first trains this many epochs (the screen, which ranks the rates)")
    converged_candidates: int = Field(ge=1,
        description="the screen's best this many rates each train to convergence under the stopping rule; the one "
                    "with the lowest converged validation loss is kept")
    weight_decay: float = Field(ge=0.0, description="L2 penalty (decoupled for adam: AdamW)")
    batch_size: int = Field(ge=1, description="sequences per minibatch")
    max_epochs: int = Field(ge=1, description="at most this many epochs (the budget of every fit but the matched ones)")
    matched_max_epochs: int = Field(ge=1,
        description="at most this many epochs for the matched-lr fits (every arm at lr)")
    patience: int = Field(ge=1, description="early stopping: epochs without a lower validation loss")
    val_fraction: float = Field(gt=0.0, le=0.5, description="share of the train split held out for validation")
    accelerator: Literal["auto", "cpu", "gpu"] = Field(description="auto: a GPU when there is one")
    strategy: Literal["auto", "ddp"] = Field(
        description="ddp: one process per device (gloo on CPUs, NCCL on GPUs), each training its share of every batch;"
                    " needed for devices or num_nodes above 1")
    devices: int = Field(ge=1, description="processes (CPU) or GPUs per node")
    num_nodes: int = Field(ge=1, description="machines of a multi-node DDP run (started with torchrun or SLURM)")
    precision: Literal["32-true", "64-true", "bf16-mixed"] = Field(description="Lightning precision")
    bins: int = Field(ge=2, description="bins of the posterior difference for the token curves")
    binning: Literal["equal_width", "quantile"] = Field(
        description="equal_width (the paper's tables) or quantile (bins of equal token counts)")
    min_bin_tokens: int = Field(ge=1,
        description="a bin with fewer tokens is left out of the curve and its statistics (its count is still shown)")
    heldout_min_count: int = Field(ge=1,
        description="a token enters the curves and rank statistics when it occurs this often in the held-out (test) "
                    "split, whose labels give its statistics")


Variant = Literal["one_layer", "mlp", "mlp_residual", "two_layer", "two_layer_kq"]  # models/sequence.py
SEQUENCE_VARIANTS: tuple[str, ...] = get_args(Variant)


@dataclass
class ScaleConfig:
    d: int = Field(ge=1, description="embedding dimension")
    max_len: Optional[int] = Field(ge=1,  # noqa: UP045
        description="keep each review's first max_len tokens (null: all)")
    max_train: int = Field(ge=0, description="seeded subset of the train split, validation included (0: all)")
    max_test: int = Field(ge=0, description="seeded subset of the test split (0: all)")


@dataclass
class SequenceConfig:
    variant: Variant = Field(
        description="one_layer; mlp: a ReLU layer of width d before the head; mlp_residual: z + that layer; two_layer:"
                    " residual self-attention, then the <cls> read-out; two_layer_kq: both with trained W_KQ")
    scale: Literal["cpu", "paper"] = Field(description="which size profile below the stage uses")
    cpu: ScaleConfig
    paper: ScaleConfig
    batch_size: int = Field(ge=1, description="sequences per minibatch")
    bucketed: bool = Field(description="training batches of similar length (less padding)")

    @property
    def profile(self) -> ScaleConfig:
        return self.cpu if self.scale == "cpu" else self.paper


@dataclass
class AblationConfig:
    datasets: List[str] = Field(  # noqa: UP006
        description="dvc.yaml runs each of ablation.variants on each of these datasets")
    variants: List[str] = Field(  # noqa: UP006
        description=f"the sequence.variant values dvc.yaml runs ({', '.join(SEQUENCE_VARIANTS)})")
    multiclass: str = Field(
        description="the dataset whose trained-arm curves (train@<it>) are set against the rebuttal's 4-class tables")
    min_spearman: float = Field(ge=-1.0, le=1.0,
        description="a curve agrees in shape with a rebuttal table when the Spearman of their bin means is at least "
                    "this")


@dataclass
class PhaseConfig:
    dataset: str = Field(description="the assumption1 synthetic dataset of `datasets` the grid runs on")
    horizon: float = Field(gt=0.0, description="the flow time of the grid's cells (in place of the dataset's)")
    tolerance: float = Field(gt=0.0, le=0.1,
        description="the flow's error tolerance in the grid's cells (in place of the dataset's)")
    eta0: List[float] = Field(  # noqa: UP006
        description="one_step.eta0 of the grid's columns (dvc.yaml runs every eta0 x d cell)")
    d: List[pydantic.StrictInt] = Field(  # noqa: UP006  (plain integers: dvc.yaml names each row's folder after one)
        description="model.d of the grid's rows; also the d sweep of the one-step error")


@dataclass
class PairConfig:
    dataset: str = Field(description="the synthetic dataset in pair mode whose claims are judged (a negator flips a "
                                     "sentiment token)")
    control: str = Field(description="the same generator in pair_first_order mode: every pair claim's control")
    variants: List[str] = Field(  # noqa: UP006
        description=f"the models with positions dvc.yaml trains on both ({', '.join(SEQUENCE_VARIANTS)}): one_layer "
                    "and a model that mixes tokens (mlp)")
    max_alignment: float = Field(gt=0.0,
        description="the pair tokens' one-step update along v, over that of the first-order tokens' tenth "
                    "percentile of |alpha_s|, at most")
    past_cap: float = Field(gt=0.0, le=1.0,
        description="a model reads the pair when its accuracy on the pair sequences is at least this (the one-layer "
                    "model's cap is 3/4)")


@dataclass
class MarginsConfig:
    dataset: str = Field(description="the Assumption-1 synthetic dataset whose one step the optimisers start from")
    potentials: List[float] = Field(  # noqa: UP006
        description="q of the l_q mirror flows run beside gradient flow (q = 2), each > 1 and not 2: each judged "
                    "against its own norm's hard-margin direction")
    horizon: float = Field(gt=0.0, description="the flow time every optimiser's flow is followed to")
    tolerance: float = Field(gt=0.0, description="each flow step's local error, relative to max(|p|, 1)")
    agreement: float = Field(gt=0.0, description="each flow and its twin of halved steps agree within this: radians "
                                                 "between their ends, and |p| relative")
    discrete_steps: int = Field(ge=1, description="steps of sign descent and Adam on p (exploratory rows)")
    discrete_lr: float = Field(gt=0.0, description="the learning rate of sign descent and Adam on p")
    min_preference: float = Field(
        description="an optimiser picks its own norm's margin when its cosine to that solution exceeds its cosine "
                    "to any other norm's by more than this")
    min_cosine: float = Field(gt=0.0, le=1.0,
        description="an optimiser converges in direction when the limit its cosine with its own norm's solution "
                    "heads to (the trend over its flow, carried to t -> infinity) is at least this")


@dataclass
class NegationConfig:
    dataset: str = Field(description="the two-class dataset whose negated test reviews are shaded (its one-layer model "
                                     "must be among `models`)")
    models: List[str] = Field(  # noqa: UP006
        description="the kept models read, folders under results/ with a seed<k>/ per training seed: "
                    "train/<dataset>/<arm> (the one-layer model) or ablation/<dataset>/<variant> (with positions)")
    negators: str = Field(
        description="the negating words, one string, separated by spaces (as a list it would hold a bare no, which "
                    "YAML 1.1 reads as false once `dvc exp run -S` has rewritten params.yaml); n't stands for every "
                    "word that ends in it (the word tokenizer keeps don't, isn't whole)")
    window: int = Field(ge=1, description="a review is negated when a negator stands at most this many tokens before "
                                          "a strong sentiment word")
    min_polarity: float = Field(gt=0.0, le=1.0,
        description="a strong sentiment word: |P(+|s) - P(-|s)| on the training split at least this")
    min_count: int = Field(ge=1, description="a strong sentiment word: at least this many occurrences in the training "
                                             "split")
    examples: int = Field(ge=0, description="how many negated test reviews of `dataset` are shaded (the shortest)")


@dataclass
class DSweepConfig:
    datasets: List[str] = Field(  # noqa: UP006
        description="dvc.yaml sweeps d on each of these datasets (d_sweep@<dataset>): the trained and untrained arms "
                    "at every d, every training seed")
    d: List[int] = Field(  # noqa: UP006
        description="the embedding dimensions of the sweep (the train stage's model.d joins them)")


@dataclass
class ComputeConfig:
    address: str = Field(
        description="a Dask scheduler (tcp://host:8786) the independent units (phase cells, calibration replicates) go"
                    " to; empty: this machine ($TOKSEL_COMPUTE_ADDRESS wins). It changes no result, so no stage reruns"
                    " for it")
    workers: int = Field(ge=0, description="units at a time on this machine; 0: one per core")


@dataclass
class CalibrationConfig:
    seed: int = Field(ge=0, description="seed of the known answers' draws (data, initialisations, noise)")
    precision: float = Field(gt=0.0, le=0.5,
        description="the Wilson half-width each rate is drawn to where a replicate is cheap (planted statistics, small"
                    " synthetic data)")
    costly_precision: float = Field(gt=0.0, le=0.5,
        description="the same where a replicate follows flows or passes over a text corpus")
    max_replicates: int = Field(ge=2, description="replicates at most per rung where a replicate is cheap")
    max_costly_replicates: int = Field(ge=2, description="replicates at most per rung where a replicate is costly")
    flow_datasets: List[str] = Field(  # noqa: UP006
        description="the synthetic datasets whose flows are calibrated (a replicate is five flows at each rung: where "
                    "each takes seconds, thousands do not fit)")


@dataclass
class EvaluateConfig:
    max_slope_rel_error: float = Field(gt=0.0, description="Lemma 4.1: |slope - eta0/2| / (eta0/2) at most")
    min_pearson_r: float = Field(ge=-1.0, le=1.0, description="Lemma 4.1: Pearson r at least")
    min_selection_fraction: float = Field(ge=0.0, le=1.0, description="Lemma 4.4: selection fraction at least")
    min_cos_max_margin: float = Field(ge=-1.0, le=1.0, description="Theorem 4.3: cos(p_T, p_mm) at least")
    min_log_growth: float = Field(
        description="Lemma 4.2: the slope of |p_t| against log t over [T/2, T] over its average since the flow started"
                    " to move, at least")


@dataclass
class ReportConfig:
    min_accuracy_gap: float = Field(ge=-1.0, le=1.0,
        description="presence: trained minus untrained test accuracy above this, the gap of its null")
    size_factor: float = Field(gt=1.0,
        description="size: our value within this factor of the paper's (its interval inside [paper / factor, paper x "
                    "factor])")
    min_spread_ratio: float = Field(gt=0.0,
        description="the scale-free spread of E_s^T v and E_s^T p around their binned curves, full training over one "
                    "step then frozen, at least")
    min_rank_agreement: float = Field(ge=-1.0, le=2.0,
        description="a noise-corrected rank correlation that makes a curve rise, at least")
    max_edge_factor: float = Field(ge=1.0,
        description="a measured edge of the eta0 window agrees with the scale argument when within this factor of it")
    max_slope_deviation: float = Field(gt=0.0,
        description="the one-step error's log-log slope in d agrees with -1/2 when within this of it")
    size_alpha: float = Field(gt=0.0, le=0.25,
        description="a size claim's equivalence test (TOST): each one-sided test at this level, the 1 - 2 alpha "
                    "interval inside the band")
    family_alpha: float = Field(gt=0.0, le=0.5,
        description="the family-wise error rate of the report's counted verdicts under Holm's procedure")


@dataclass
class Config:
    dataset: str = Field("synthetic", description="the entry of `datasets` to run on")
    profile: str = Field(
        description="what the values are: full (the paper's sizes) or the name of the profile that set them (quick: "
                    "profiles/quick.yaml, `make quick`); the report's first lines say it")
    seed: int = Field(0, ge=0, description="the model seed of this run (dvc.yaml runs each of base.seeds)")
    base: BaseConfig
    data: DataConfig
    model: ModelConfig
    one_step: OneStepConfig
    gradient_flow: GradientFlowConfig
    train: TrainConfig
    sequence: SequenceConfig
    ablation: AblationConfig
    phase: PhaseConfig
    report: ReportConfig
    evaluate: EvaluateConfig
    calibration: CalibrationConfig
    d_sweep: DSweepConfig
    pair: PairConfig
    margins: MarginsConfig
    negation: NegationConfig
    compute: ComputeConfig
    # name -> {data: {...}, model: {...}, one_step: {...}, gradient_flow: {...}, train: {...}}: its overrides
    datasets: Dict[str, Any]  # noqa: UP006

    @property
    def training_seeds(self) -> list[int]:
        """The seeds the training stages run (train, ablation) and their claims are read over."""
        return first_seeds(self.base.seeds, self.train.seeds)

    @property
    def flow_seeds(self) -> list[int]:
        """The seeds the gradient_flow stage runs on this dataset."""
        return first_seeds(self.base.seeds, self.gradient_flow.seeds)

    def __post_init__(self) -> None:
        _rules(self)

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



def first_seeds(seeds: Sequence[int], count: int) -> list[int]:
    """The first `count` of `seeds`, or all of them for 0: the seeds a stage with a narrower budget runs."""
    return list(seeds[:count] if count else seeds)


NAME = re.compile(r"[A-Za-z0-9_-]+")  # what may name a folder and stand in a DVC command line
MAX_SEEDS = 1000  # an interval over a thousand seeds is already 30 times tighter than over one; 20,000 took the
                  # settings check past a minute and a stopped prepare left thousands of empty seed folders


def name_problem(name: str, what: str) -> str | None:
    """Why `name` cannot name a folder and stand in DVC's command lines (letters, digits, `_` and `-` only)."""
    if NAME.fullmatch(name):
        return None
    return (f"{what} {name!r} may hold only letters, digits, '_' and '-' (it names a folder and stands in dvc.yaml's "
            "commands)")


def _require(holds: bool, problem: str) -> None:
    if not holds:
        raise ValueError(problem)


def _distinct(values: Sequence[Any]) -> bool:
    return len(set(values)) == len(values)


def _rules(config: Config) -> None:
    """The rules that tie keys together; the first broken one is a ValueError naming its keys."""
    data, synthetic, train = config.data, config.data.synthetic, config.train
    phase, sweep = config.phase, config.d_sweep
    _require(data.source != "synthetic" or synthetic is not None,
             "data.synthetic is missing: a synthetic dataset gives its generator's mode and sizes there")
    if data.source == "synthetic":
        _require(synthetic.mode == "independent" or not (synthetic.n_train % 2 or synthetic.n_test % 2),
                 f"data.synthetic.n_train and n_test must be even in {synthetic.mode} mode (sequences come in +/- "
                 "pairs)")
    _require(data.labels is None or (len(data.labels) == data.num_classes and _distinct(data.labels)),
             f"data.labels = {data.labels} must list data.num_classes = {data.num_classes} distinct source labels")
    seeds = config.base.seeds
    _require(bool(seeds) and min(seeds) >= 0 and _distinct(seeds),
             f"base.seeds = {seeds} must be a non-empty list of distinct seeds >= 0")
    _require(len(seeds) <= MAX_SEEDS, f"base.seeds holds {len(seeds):,} seeds, more than {MAX_SEEDS:,}: each is a "
                                      "folder, a run and a unit of every seeded stage; run larger studies in batches")
    _require(bool(train.arms) and _distinct(train.arms) and set(train.arms) <= set(EMBEDDINGS),
             f"train.arms = {train.arms} must be a non-empty list of distinct arms of {', '.join(EMBEDDINGS)}")
    _require(bool(train.lr_grid) and min(train.lr_grid) > 0 and _distinct(train.lr_grid),
             f"train.lr_grid = {train.lr_grid} must be a non-empty list of distinct positive learning rates")
    _require(train.lr in train.lr_grid, f"train.lr = {train.lr:g} must be one of train.lr_grid = {train.lr_grid} "
                                        "(the matched-lr protocol reads the grid's runs at that lr)")
    _require(bool(config.ablation.datasets), "ablation.datasets is empty: name at least one dataset")
    _require(bool(config.ablation.variants) and set(config.ablation.variants) <= set(SEQUENCE_VARIANTS),
             f"ablation.variants = {config.ablation.variants} must name some of {', '.join(SEQUENCE_VARIANTS)}")
    _require(bool(sweep.d) and min(sweep.d) >= 1 and _distinct(sweep.d),
             f"d_sweep.d = {sweep.d} must be a non-empty list of distinct positive dimensions")
    _require(bool(phase.eta0) and bool(phase.d) and min(phase.eta0) > 0 and min(phase.d) >= 1,
             f"phase.eta0 = {phase.eta0} and phase.d = {phase.d} must be non-empty lists of positive numbers")
    _require(_distinct([f"{eta0:g}" for eta0 in phase.eta0]) and _distinct(phase.d),
             f"phase.eta0 = {phase.eta0} and phase.d = {phase.d} must each hold distinct values (each names a cell "
             "of the grid)")
    if config.datasets:  # a dataset entry's own config is read without the others
        named = [("train.datasets", train.datasets), ("ablation.datasets", config.ablation.datasets),
                 ("ablation.multiclass", [config.ablation.multiclass]), ("d_sweep.datasets", sweep.datasets),
                 ("phase.dataset", [phase.dataset]), ("pair.dataset", [config.pair.dataset]),
                 ("pair.control", [config.pair.control]), ("margins.dataset", [config.margins.dataset])]
        for key, names in named:
            for name in names:
                _require(name in config.datasets, f"{key} names {name!r}, which `datasets` does not define "
                                                  f"({', '.join(config.datasets)})")
        for key, mode in (("dataset", "pair"), ("control", "pair_first_order")):
            name = getattr(config.pair, key)
            found = config.datasets[name].get("data", {}).get("synthetic", {}).get("mode")
            _require(found == mode, f"pair.{key} names {name!r}, whose data.synthetic.mode is {found!r}: it must be "
                                    f"a synthetic dataset in {mode} mode")
        name = config.margins.dataset
        found = config.datasets[name].get("data", {}).get("synthetic", {}).get("mode")
        _require(found == "assumption1", f"margins.dataset names {name!r}, whose data.synthetic.mode is {found!r}: "
                                         "it must be a synthetic dataset in assumption1 mode")
    potentials = config.margins.potentials
    _require(bool(potentials) and all(q > 1 and q != 2 for q in potentials) and _distinct(potentials),
             f"margins.potentials = {potentials} must be distinct numbers above 1 other than 2 (gradient flow runs "
             "beside them)")
    _require(bool(config.pair.variants) and set(config.pair.variants) <= set(SEQUENCE_VARIANTS),
             f"pair.variants = {config.pair.variants} must name some of {', '.join(SEQUENCE_VARIANTS)}")
    _negation_rules(config)
    _require(train.devices * train.num_nodes == 1 or train.strategy == "ddp",
             f"train.devices = {train.devices} x train.num_nodes = {train.num_nodes} processes need train.strategy=ddp")
    _require(data.source != "hub" or bool(data.hub_id), "data.hub_id is empty: a hub dataset needs its Hub id")
    if data.source == "file":
        _require(bool(data.path), f"data.path is empty: a file dataset needs its file (CSV, JSON Lines or Parquet "
                                  f"under {OWN_DATA}/)")
        for key in ("path", "test_path"):
            _check_data_file(key, getattr(data, key))
    _require(data.source != "synthetic" or data.num_classes == 2,
             f"data.num_classes = {data.num_classes}: the synthetic generator draws two classes (labels +1 and -1); "
             "K classes come from a text dataset")


def _negation_rules(config: Config) -> None:
    """negation.models names kept models of the train or ablation stage, on two-class datasets, the headline
    dataset's one-layer model among them."""
    settings = config.negation
    _require(bool(settings.negators.split()), "negation.negators is empty: name at least one negating word")
    runs = {"train": EMBEDDINGS, "ablation": SEQUENCE_VARIANTS}
    for model in settings.models:
        stage, dataset, run = ([*model.split("/"), "", ""])[:3]
        _require(model.count("/") == 2 and run in runs.get(stage, ()),
                 f"negation.models names {model!r}: each must be train/<dataset>/<arm: {', '.join(EMBEDDINGS)}> or "
                 f"ablation/<dataset>/<variant: {', '.join(SEQUENCE_VARIANTS)}>")
        if config.datasets:  # a dataset entry's own config is read without the others
            _require(dataset in config.datasets, f"negation.models names {model!r}, whose dataset `datasets` does "
                                                 f"not define ({', '.join(config.datasets)})")
            classes = config.datasets[dataset].get("data", {}).get("num_classes")
            _require(classes == 2, f"negation.models names {model!r}, whose dataset has {classes} classes: a "
                                   "sentiment word's polarity is read between two")
    _require(any(model.startswith(f"train/{settings.dataset}/") for model in settings.models),
             f"negation.dataset = {settings.dataset!r}: negation.models must hold its one-layer model "
             f"(train/{settings.dataset}/<arm>), which shades its reviews")


def _check_data_file(key: str, value: str) -> None:
    """A file dataset's file lies under data/own/ (DVC follows that folder) with an extension that gives its format;
    data/own/ itself lies in the project, and neither the file nor a folder on its way is a link out of it."""
    if not value:
        return
    shown = f"data.{key} = {value!r}"
    parts = Path(os.path.normpath(value)).parts
    _require(len(parts) >= 3 and parts[:2] == OWN_DATA.parts,  # not absolute, not leading out of it
             f"{shown} must lie in the project's {OWN_DATA}/ folder, written relative to the project "
             f"({OWN_DATA}/reviews.csv): DVC follows that folder, so a changed file reruns its stages")
    _require(".." not in Path(value).parts,  # the system takes `..` after a link from the link's target
             f"{shown} goes up a folder with '..': write the path without it ({os.path.normpath(value)})")
    project, folder = Path.cwd().resolve(), OWN_DATA.resolve()
    _require(folder.is_relative_to(project),  # data/own, or a folder above it, a link out of the project
             f"{OWN_DATA}/ leads out of the project through a link (to {folder}): make it a folder of the project "
             "and copy the files there (a clone or a DVC experiment would read whatever the link finds)")
    _require(Path(value).resolve().is_relative_to(folder),  # not a link there to a file elsewhere
             f"{shown} is a link to a file outside {OWN_DATA}/: copy the file there (DVC follows that folder, not "
             "what its links point to)")
    _require(Path(value).suffix.lower() in FILE_FORMATS,
             f"{shown}: the format comes from the extension, one of {', '.join(FILE_FORMATS)}")
