"""The report's first lines: the verdict in words, what the run was, and a warning when it is a small run.

The verdict is built from the verdicts of the tables below it: each claim (of the paper, then ours) once, with
the datasets it holds on, fails on or leaves unsettled; then how the controls behaved. The run: the profile
(params.yaml's `profile`: full, the paper's sizes; paper, the ablations' too; or the profile that set smaller
values), the seeds, each
dataset's d (model.d after its entry's overrides) and its rows (prepare's metrics), the git commit and the DVC
experiment that made the report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from toksel.claims.catalogue import Assessment, Claim
from toksel.data.draws import what_varies
from toksel.params import Config
from toksel.runtime.io import file_digests, read_json
from toksel.summaries.markdown import number

FULL = "full"  # params.yaml's own values: the paper's sizes, the ablations at their CPU size
# The profiles that run at least the paper's sizes: no warning. Every other profile is a small run.
AT_SCALE = {FULL: "the paper's sizes for the one-layer model", "paper": "the paper's sizes, the ablations' too "
            "(profiles/paper.yaml)"}
NOT_PREPARED = "not prepared"
UNSETTLED = ("inconclusive", "not computed")
Judged = tuple[str, Assessment]  # (dataset, its assessment)
Uncounted = tuple[str, Assessment, str]  # (dataset, its assessment, why it does not count)


@dataclass(frozen=True)
class Standing:
    """One claim over the datasets it was judged on: each verdict with its datasets."""

    claim: Claim
    judged: tuple[Judged, ...]

    def on(self, *verdicts: str) -> list[Judged]:
        return [(data, item) for data, item in self.judged if item.verdict in verdicts]

    @property
    def outcome(self) -> str:
        """fails (on at least one dataset), unsettled (none fails, one is inconclusive), or holds (on every one)."""
        if self.on("fails"):
            return "fails"
        return "unsettled" if self.on(*UNSETTLED) else "holds"


def standings(judged: Iterable[Judged], origin: str) -> list[Standing]:
    """The judged claims of `origin` (paper, ours), in the registry's order, each with its datasets."""
    by_claim: dict[str, list[Judged]] = {}
    claims: dict[str, Claim] = {}
    for data, item in judged:
        if item.judged and item.claim.origin == origin:
            by_claim.setdefault(item.claim.id, []).append((data, item))
            claims[item.claim.id] = item.claim
    return [Standing(claims[key], tuple(rows)) for key, rows in by_claim.items()]


def _name(claim: Claim) -> str:
    return f"{claim.source}: {claim.statement}"


def _value(item: Assessment) -> str:
    """Our interval against the threshold, in a few characters: 0.05 [0.04, 0.06] against >= 0.1."""
    interval = item.interval
    ours = number(interval.mean) + (f" [{number(interval.low)}, {number(interval.high)}]" if interval.exists else "")
    return f"{ours} against {item.threshold_text}"


def _datasets(rows: Sequence[Judged], with_values: bool = False) -> str:
    return ", ".join(f"{data} ({_value(item)}{_own(item)})" if with_values else data for data, item in rows)


def _own(item: Assessment) -> str:
    """Where the error control moved a verdict: what the row's own rule says (a reversal, decided by the rule,
    stays decided in the words even where Holm leaves it open)."""
    return f"; {item.own_verdict} by its own rule" if item.own_verdict and item.own_verdict != item.verdict else ""


def _standing_text(standing: Standing) -> str:
    """The claim, then where it fails or is unsettled (with our values), and where it holds."""
    if standing.outcome == "holds":
        return f"{_name(standing.claim)} ({_datasets(standing.judged)})"
    parts = [f"{verdict} on {_datasets(rows, with_values=True)}" for verdict, rows in
             ((verdict, standing.on(verdict)) for verdict in ("fails", *UNSETTLED)) if rows]
    if held := standing.on("holds"):
        parts.append(f"holds on {_datasets(held)}")
    return f"{_name(standing.claim)}: {'; '.join(parts)}"


def _lead(found: list[Standing]) -> str:
    """The paper's claims in one sentence: whether they hold, and which do not."""
    if not found:
        return "No claim of the paper has been judged yet: the stages that measure them have not run."
    held = [item for item in found if item.outcome == "holds"]
    failed = [item for item in found if item.outcome == "fails"]
    unsettled = len(found) - len(held) - len(failed)
    if len(held) == len(found):
        return (f"The paper's claims hold: each of the {len(found)} judged here holds on every dataset it was "
                "judged on.")
    sentence = (f"The paper's claims hold in part: {len(held)} of the {len(found)} judged here hold on every dataset "
                "they were judged on; " if held else
                f"No claim of the paper judged here ({len(found)}) holds on every dataset it was judged on; ")
    if failed:
        sentence += "these do not: " + "; ".join(f"{item.claim.statement} (fails on {_datasets(item.on('fails'))})"
                                                 for item in failed)
    else:
        sentence += "none fails"
    if unsettled:
        sentence += (f"; {unsettled} {'is' if unsettled == 1 else 'are'} unsettled (inconclusive under the error "
                     "control: an interval straddles its threshold, or its own rule's verdict does not survive the "
                     "control)")
    return sentence + "."


@dataclass(frozen=True)
class Item:
    """One point of the verdict: a label, a sentence, and the claims it names (one per line)."""

    label: str
    text: str
    claims: list[str] = field(default_factory=list)


OUTCOMES = {"holds": ("Hold", "on every dataset they were judged on"),
            "fails": ("Do not hold", "they fail on at least one dataset"),
            "unsettled": ("Unsettled", "none fails under the error control, but at least one row is inconclusive "
                                       "there: its interval straddles its threshold, or the verdict by its own rule "
                                       "(given beside it) does not survive the control")}


def _by_outcome(found: list[Standing]) -> list[Item]:
    items = []
    for outcome, (label, meaning) in OUTCOMES.items():
        mine = [_standing_text(item) for item in found if item.outcome == outcome]
        if mine:
            items.append(Item(label, f"{len(mine)} of the {len(found)}, {meaning}", mine))
    return items


def _ours(found: list[Standing]) -> Item:
    counts = {label.lower(): sum(item.outcome == outcome for item in found) for outcome, (label, _) in OUTCOMES.items()}
    words = ", ".join(f"{count} of {len(found)} {label}" for label, count in counts.items() if count)
    return Item("Ours (beyond the paper)", words, [_standing_text(item) for item in found])


def _controls(judged: Sequence[Judged]) -> str:
    """How the controls of the judged claims behaved: a near miss without the effect must fail the check."""
    controlled = [(data, item) for data, item in judged
                  if item.judged and item.control_interval is not None and item.control_interval.n > 0]
    if not controlled:
        return ""
    behaved = sum(item.control_behaved is True for _, item in controlled)
    held = [f"{item.claim.id} ({data})" for data, item in controlled if item.control_behaved is False]
    if behaved == len(controlled):
        return (f"every one of the {len(controlled)} controls of the judged claims failed as it must: each check "
                "tells its effect from a near miss without it.")
    text = f"{behaved} of the {len(controlled)} controls of the judged claims failed as they must"
    if unclear := len(controlled) - behaved - len(held):
        text += f"; {unclear} {'is' if unclear == 1 else 'are'} inconclusive"
    if held:
        text += (f"; {len(held)} held where {'it' if len(held) == 1 else 'they'} must fail, so there the check does "
                 f"not tell the effect from its absence: {', '.join(held)}")
    return text + "."


def _left_out(judged: Sequence[Judged], not_counted: Sequence[Uncounted] = ()) -> str:
    items = [item for _, item in judged]
    exploratory = sum(item.verdict == "exploratory" for item in items)
    described = sum(item.verdict == "described" for item in items)
    transient = sum(item.verdict == "transient" for item in items)
    stages = sorted({item.claim.producer for item in items if item.measurement is None})
    parts = []
    if not_counted:
        reasons: dict[str, int] = {}
        for _, _, reason in not_counted:
            key = reason.split(":")[0]
            reasons[key] = reasons.get(key, 0) + 1
        parts.append(f"{len(not_counted)} judged rows not counted (" + "; ".join(
            f"{count}: {reason}" for reason, count in reasons.items()) + ")")
    if exploratory or described or transient:
        parts.append(f"{exploratory} exploratory (the data lack what the lemma needs), {transient} not tested "
                     f"(transient: a flow whose statistic still moved) and {described} described: shown in the "
                     "tables, not counted")
    if stages:
        parts.append(f"{sum(item.measurement is None for item in items)} not run yet (stages {', '.join(stages)})")
    return "; ".join(parts) + ("." if parts else "")


@dataclass(frozen=True)
class Verdict:
    lead: str  # one sentence: do the paper's claims hold, which do not
    items: list[Item]  # the paper's claims by outcome, ours, the controls, what is not counted


def verdict(judged: Sequence[Judged], not_counted: Sequence[Uncounted] = ()) -> Verdict:
    """The verdict in words, from each (dataset, assessment) of the report's tables that counts (its verdict the
    one under the error control) or is not judged, and the judged rows that do not count, with the reason."""
    paper, ours = standings(judged, "paper"), standings(judged, "ours")
    items = _by_outcome(paper) + ([_ours(ours)] if ours else [])
    items += [Item(label, text) for label, text in (("Controls", _controls(judged)),
                                                    ("Not counted", _left_out(judged, not_counted))) if text]
    return Verdict(_lead(paper), items)


def prepared_rows(dataset: str, root: Path = Path("results")) -> tuple[str, str]:
    """The train and test rows prepare kept of `dataset` (a range where its draws differ); not prepared: say so."""
    path = root / "prepare" / dataset / "metrics.json"
    if not path.exists():
        return NOT_PREPARED, NOT_PREPARED
    draws = list(read_json(path).values())

    def rows(key: str) -> str:
        counts = sorted({int(draw[key]) for draw in draws if key in draw})
        return f"{counts[0]:,}" if len(counts) == 1 else f"{counts[0]:,}-{counts[-1]:,}"

    train = rows("n_train")
    if any("distinct_train_rows" in draw for draw in draws):  # bootstrap resamples: how many different rows
        train += f" ({rows('distinct_train_rows')} distinct)"
    return train, rows("n_test")


DATASET_COLUMNS = ["dataset", "data", "classes", "d", "train rows", "test rows", "a seed varies"]


def dataset_rows(configs: Mapping[str, Config], root: Path = Path("results")) -> list[list[str]]:
    """One row per dataset: where its data come from (a file with the start of its SHA-256), its classes, d after its
    overrides, and its rows."""
    lines = []
    for name, config in configs.items():
        data = config.data
        digests = ", ".join(f"{path} (SHA-256 {digest[:12] if digest else 'missing'})"
                            for path, digest in file_digests(data.files).items())
        lines.append([name, f"file {digests}" if digests else data.origin, str(data.num_classes), str(config.model.d),
                      *prepared_rows(name, root), what_varies(data)])
    return lines


def _seeds(seeds: Sequence[int]) -> str:
    return ", ".join(map(str, seeds))


def ablation_size(config: Config) -> str:
    """The size the ablations ran at: the paper's, or the CPU profile's smaller one (sequence.scale)."""
    size = config.sequence.profile
    reviews = "whole reviews" if size.max_len is None else f"reviews cut to {size.max_len} tokens"
    rows = "every row" if not size.max_train else f"at most {size.max_train:,} training rows"
    scale = "the paper's" if config.sequence.scale == "paper" else "not the paper's (sequence.scale: cpu)"
    return f"the ablations at d {size.d} on {reviews}, {rows}: {scale}"


def run_text(config: Config, tags: Mapping[str, str]) -> str:
    """The profile, the seeds, the commit and the DVC experiment, in one paragraph."""
    profile = AT_SCALE.get(config.profile, f"profiles/{config.profile}.yaml's smaller values")
    experiment = tags.get("dvc.experiment") or "none (a run in the workspace, not a DVC experiment)"
    return (f"Profile {config.profile}: {profile}; {ablation_size(config)}. Seeds {_seeds(config.base.seeds)} (the "
            f"theory, the phase diagram); the training and the ablations on {_seeds(config.training_seeds)}. Commit "
            f"{tags.get('git_sha', 'unknown')}; DVC experiment: {experiment}. Each dataset's d and its rows:")


def warning(profile: str) -> str:
    """"" for a profile at the paper's sizes; else what a small run is and is not."""
    if profile in AT_SCALE:
        return ""
    how = "`make quick`, " if profile == "quick" else ""
    return (f"Profile {profile} ({how}profiles/{profile}.yaml) cuts the data, d, the seeds and the training so that "
            "the whole pipeline runs in minutes: its verdicts show that the pipeline works, not whether the paper's "
            "claims hold. The paper's sizes are profile full (`git checkout params.yaml`, then `make repro`).")


@dataclass(frozen=True)
class Header:
    warning: str  # "" for the full profile
    verdict: Verdict
    run: str
    datasets: list[list[str]]  # a row per dataset, under `columns`
    columns: list[str] = field(default_factory=lambda: list(DATASET_COLUMNS))


def header(config: Config, judged: Sequence[Judged], configs: Mapping[str, Config], tags: Mapping[str, str],
           root: Path = Path("results"), not_counted: Sequence[Uncounted] = ()) -> Header:
    """The report's first lines. config: the report stage's; judged: (dataset, assessment) of every row of its
    tables that counts (its verdict under the error control) or is not judged; not_counted: the judged rows that
    do not count, with why; configs: each dataset's (dataset_configs); tags: the stage run's (its commit and DVC
    experiment)."""
    return Header(warning(config.profile), verdict(judged, not_counted), run_text(config, tags),
                  dataset_rows(configs, root))
