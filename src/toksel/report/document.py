"""One report of every claim: the paper's value, ours with its interval, the threshold, the three-way verdict,
the negative control's value and verdict, and the calibration of each claim's verdict rule; in Markdown, from which
toksel.report.page makes a self-contained HTML page.

The stages that measure claims write their measurements (claims.json: evaluate and compare per dataset,
ablation_report, phase_diagram); the registry (toksel.claims.catalogue) judges them here with the thresholds
of the config.
The calibration stage writes each claim family's power and false-positive rate (calibration.json). A claim whose
stage has not run stays in the report and says so.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from toksel.claims.catalogue import (
    CLAIMS,
    REQUIREMENTS,
    SCOPES,
    Assessment,
    Claim,
    Measurement,
    assess,
    in_scope,
    measure,
)
from toksel.claims.measurements import PROTOCOL_CLAIMS, claim_runs
from toksel.claims.protocols import EQUAL, MATCHED, SCREENED, THEORY, TUNED
from toksel.params import Config
from toksel.runtime.config import load_config
from toksel.runtime.io import pending, read_json, require_output
from toksel.runtime.paths import results_dir
from toksel.summaries.changes import history
from toksel.summaries.claims import (
    HEADER,
    PROTOCOL_NOTE,
    Calibration,
    Row,
    cells,
    family_anchor,
    interval_text,
)
from toksel.summaries.counting import count
from toksel.summaries.markdown import table

SECTIONS = {  # heading: the scopes it shows
    "The theory, on every dataset": ("every", "assumption1"),
    "Full training on real data": ("binary_real", "multiclass"),
    "The rebuttal's ablations": ("ablation",),
    "Beyond the paper: the eta0 x d phase diagram": ("phase",),
    "Beyond the paper: a label carried by a pair of tokens": ("pair",),
    "Beyond the paper: which margin an optimiser picks": ("margins",),
}
PROTOCOLS = (TUNED, SCREENED, MATCHED, EQUAL, THEORY)  # the sensitivity table's rows; TUNED is the claims' own
PER_DATASET = ("evaluate", "compare")  # the stages that run once per dataset (evaluate@imdb)
CALIBRATION = results_dir("calibration", "") / "calibration.json"
VERDICT_KINDS = ("holds", "fails", "inconclusive", "not computed")


def read_calibration(path: Path = CALIBRATION) -> Calibration:
    """The calibration stage's rows; [] before that stage has run."""
    return read_json(path) if path.exists() else []


def read_measurements(root: Path = Path("results")) -> list[Measurement]:
    """Every claims.json the measuring stages wrote under `root`."""
    found = []
    for path in sorted(root.glob("*/**/claims.json")):
        found += [Measurement.from_record(record) for record in json.loads(path.read_text())]
    return found


def rows(config: Config, measurements: list[Measurement],
         datasets: Mapping[str, Config] | None = None) -> dict[str, list[Row]]:
    """Every claim on every dataset in its scope, in the registry's order, grouped by section. datasets: each
    dataset's config (runtime.config.dataset_configs); by default params.yaml's."""
    configs = datasets or {name: load_config([f"dataset={name}"]) for name in config.datasets}
    data = {name: configs[name].data for name in config.datasets}
    main = {(item.claim, item.data): item for item in measurements if not item.protocol}
    grouped: dict[str, list[Row]] = {heading: [] for heading in SECTIONS}
    for claim in CLAIMS:
        heading = next(heading for heading, scopes in SECTIONS.items() if claim.scope in scopes)
        for dataset in [name for name in config.datasets if in_scope(claim, name, data[name], config)]:
            producer = claim.producer + (f"@{dataset}" if claim.producer in PER_DATASET else "")
            grouped[heading].append(Row(assess(claim, main.get((claim.id, dataset)), config), dataset, producer))
    return grouped


def with_counting(sections: dict[str, list[Row]], calibration: Calibration,
                  family_alpha: float) -> dict[str, list[Row]]:
    """The rows with whether each counts and its verdict under Holm's procedure across every counted row."""
    every = [row for section in sections.values() for row in section]
    found = iter(count([(row.data, row.assessment) for row in every], calibration, family_alpha))
    return {heading: [dataclasses.replace(row, counting=next(found)) for row in section]
            for heading, section in sections.items()}


def with_history(sections: dict[str, list[Row]], records: list | None, config: Config) -> dict[str, list[Row]]:
    """The rows with what the ledger says of each one's rule, and its verdict under the rule before the data."""
    def remeasure(row: Row) -> Callable[[Claim, str], Measurement | None]:
        def measured(claim: Claim, protocol: str) -> Measurement | None:
            runs = claim_runs(claim.producer, row.data, config, protocol)
            return measure(claim, row.data, runs) if runs else None
        return measured

    return {heading: [dataclasses.replace(row, rule=history(row.assessment, row.data, records, config, remeasure(row)))
                      for row in section] for heading, section in sections.items()}


def sensitivity(config: Config, measurements: list[Measurement]) -> list[tuple[Claim, str, str, Assessment]]:
    """(claim, dataset, protocol, assessment) for the protocol-dependent claims under each protocol measured."""
    by_key = {(item.claim, item.data, item.protocol or PROTOCOLS[0]): item for item in measurements}
    found = []
    for claim in (claim for claim in CLAIMS if claim.id in PROTOCOL_CLAIMS):
        for dataset in dict.fromkeys(item.data for item in measurements if item.claim == claim.id):
            for protocol in PROTOCOLS:
                if (claim.id, dataset, protocol) in by_key:
                    found.append((claim, dataset, protocol, assess(claim, by_key[claim.id, dataset, protocol], config)))
    return found


def tally(sections: dict[str, list[Row]]) -> dict[str, float]:
    """Verdict counts of the paper's claims and of ours apart: the rows that count (toksel.summaries.counting), by
    their own rule and under the error control across the report; the rows not counted, and why; the controls of
    the counted rows."""
    every = [row for section in sections.values() for row in section]
    counts: dict[str, float] = {}
    for origin in ("paper", "ours"):
        mine = [row for row in every if row.assessment.claim.origin == origin]
        counted = [row for row in mine if row.counting is not None and row.counting.counted]
        prefix = "claims" if origin == "paper" else "ours"
        counts[prefix] = float(len(counted))
        for verdict, name in zip(VERDICT_KINDS[:3], ("held", "failed", "inconclusive"), strict=True):
            counts[f"{prefix}_{name}"] = float(sum(row.assessment.verdict == verdict for row in counted))
            counts[f"{prefix}_{name}_holm"] = float(sum(row.counting.controlled == verdict for row in counted))
        counts[f"{prefix}_held_by"] = float(sum(row.counting.controlled_by == "holds" for row in counted))
        # The two kinds of rule apart (the ledger): fixed before the data, or changed after them.
        changed = [row for row in counted if row.rule is not None and row.rule.changed]
        counts[f"{prefix}_changed_rule"] = float(len(changed))
        counts[f"{prefix}_changed_rule_held_holm"] = float(sum(row.counting.controlled == "holds" for row in changed))
        counts[f"{prefix}_fixed_rule_held_holm"] = counts[f"{prefix}_held_holm"] - counts[
            f"{prefix}_changed_rule_held_holm"]
        judged = [row for row in mine if row.assessment.judged and row not in counted]
        counts[f"{prefix}_not_counted"] = float(len(judged))
        counts[f"{prefix}_not_run"] = float(sum(row.assessment.measurement is None for row in mine))
    items = [row.assessment for row in every]
    # The controls of every judged row (a row counts only where its control behaved, so these include the rows
    # that a control kept out of the count).
    controlled = [item for item in items
                  if item.judged and item.control_interval is not None and item.control_interval.n > 0]
    return counts | {"exploratory": float(sum(item.verdict == "exploratory" for item in items)),
                     "transient": float(sum(item.verdict == "transient" for item in items)),
                     "described": float(sum(item.verdict == "described" for item in items)),
                     "controls": float(len(controlled)),
                     "controls_behaved": float(sum(item.control_behaved is True for item in controlled))}


def headline(counts: dict[str, float]) -> str:
    def part(prefix: str) -> str:
        def n(key: str) -> str:
            return f"{counts[f'{prefix}{key}']:.0f}"

        fixed = counts[prefix] - counts[f"{prefix}_changed_rule"]
        return (f"{n('_held_holm')} of {n('')} counted hold under the error control ({n('_held')} by their own "
                f"rule), {n('_failed_holm')} fail ({n('_failed')}), {n('_inconclusive_holm')} are inconclusive "
                f"({n('_inconclusive')}); of the counted, {fixed:.0f} rules were fixed before the data "
                f"({n('_fixed_rule_held_holm')} hold) and {n('_changed_rule')} changed after them "
                f"({n('_changed_rule_held_holm')} hold); {n('_not_counted')} judged rows not counted, {n('_not_run')} "
                "not run")

    return (f"The paper's claims: {part('claims')}. Ours: {part('ours')}. Not judged: {counts['exploratory']:.0f} "
            f"exploratory (the data lack what the lemma needs), {counts['transient']:.0f} not tested (transient) and "
            f"{counts['described']:.0f} described. The error "
            "control is Holm's procedure across every counted row (family-wise error rate report.family_alpha; "
            f"Benjamini-Yekutieli's false discovery rate would keep {counts['claims_held_by']:.0f} of the paper's "
            f"{counts['claims']:.0f} counted and {counts['ours_held_by']:.0f} of our {counts['ours']:.0f} holding).")




def rate_text(rate: Mapping[str, Any] | None) -> str:
    """A rate with its 95 % interval: 0.95 [0.86, 0.99]; '-' where there is none."""
    if not rate:
        return "-"
    return f"{rate['rate']:.2f} [{rate['low']:.2f}, {rate['high']:.2f}]"


def crossing_text(row: Mapping[str, Any]) -> str:
    """Where the power reaches 0.8 along the ladder, with the bracket of rungs whose intervals reach it."""
    crossing = row.get("crossing") or {}
    if crossing.get("effect") is None:
        return "not reached" if "curve" in row else "-"
    bracket = [crossing.get("low"), crossing.get("high")]
    shown = ", ".join("?" if end is None else f"{end:g}" for end in bracket)
    reach = (row.get("reach") or {}).get("bound_ratio")
    bound = "" if reach is None else f"; a flow bounded beyond {reach:.3g} times its own |p_T| reads as growth"
    return f"{crossing['effect']:.3g} [{shown}]{bound}"


def _at(row: Mapping[str, Any], key: str, effect: str) -> str:
    rate = row.get(key)
    return "-" if not rate else f"{rate_text(rate)} at {row[effect]:g}"


CALIBRATION_HEADER = ["family", "data", "statistic and rule", "claims", "known answers", "planted effect (ladder)",
                      "power at the paper's size (*: a reference, the paper gives none)", "effect at power 0.8",
                      "false positives at the null", "replicates a rung", "standing"]


def calibration_rows(calibration: Calibration) -> list[list[str]]:
    """One row per family and dataset; each family's first row carries the anchor the claims link to."""
    anchored: set[str] = set()
    lines = []
    for row in calibration:
        family = name = row["family"]
        if family not in anchored:
            name = f"<a id='{family_anchor(family)}'></a>{name}"
            anchored.add(family)
        claims = ", ".join(row.get("for_claims") or [claim.id for claim in CLAIMS if claim.family == family])
        if row.get("for_claims"):  # drawn with that claim's own between-seed spread
            claims += (f" (its runs' spread over seeds {row['real_spread']:.3g}; planted {row['planted_spread']:.3g}, "
                       f"seed noise {row['added_spread']:.3g} added)")
        curve = row.get("curve", [])
        ladder = f"{row['unit']}: " + ", ".join(f"{point['effect']:g}" for point in curve) if curve else "-"
        replicates = (f"{min(point['replicates'] for point in curve)}-{max(point['replicates'] for point in curve)}"
                      if curve else "-")
        power = _at(row, "power", "reference") + ("" if row.get("paper", True) or not curve else " *")
        lines.append([name, row["data"], row["rule"], claims, row["known_answers"], ladder, power,
                      crossing_text(row), _at(row, "null", "null_effect"), replicates,
                      "calibrated" if row["calibrated"] else f"uncalibrated: {row['reason']}"])
    return lines


METHOD_NOTE = ("Each claim is measured on every seed it runs ({seeds} for the theory and the phase diagram, "
               "{training} for training, and on real data the gradient flow on its dataset's gradient_flow.seeds); "
               "`ours` is the mean with its 95 % interval (Student's t over the seeds). A presence claim holds when "
               "the whole interval lies on its side of the threshold, fails when it lies on the other side, and is "
               "inconclusive otherwise; a size claim holds when the interval lies inside the band around the "
               "paper's number, fails when it misses it. Its control is the same measurement on a near miss, where "
               "everything is as in the claim but the claimed effect: a control must fail (`fails, as it must`, "
               "green in report.html); one that holds (`holds: it must fail`, red) is the bad case, a check that "
               "cannot tell the effect from its absence. A claim on data its lemma does not cover is exploratory: "
               "shown, not counted. Each claim links to the calibration of its verdict rule.")


def method_note(config: Config) -> str:
    """How a claim is judged, with the seeds this run measured it on."""
    return METHOD_NOTE.format(seeds=len(config.base.seeds), training=len(config.training_seeds))


CALIBRATION_NOTE = ("Each family's statistic and verdict rule, run as the claims run them (the same seeds per "
                    "verdict, the same threshold), on known answers in each dataset's own regime (its data, d, eta0 "
                    "and flows; its token statistics and their noise), at every rung of a ladder of planted effects "
                    "fixed beforehand to bracket the threshold: the operating curve (figure below). Each rate is drawn "
                    "until its 95 % Wilson interval is within calibration.precision (calibration.costly_precision "
                    "where a replicate follows flows or passes over a text corpus), or its cap. A family is "
                    "calibrated on a dataset when its power at the "
                    "paper's size (a reference effect where the paper gives none) is at least 0.8 and its false-"
                    "positive rate at the null at most 0.1; a row counts only where its family is calibrated on its "
                    "dataset.")


FAITHFUL = "flow_faithful"


def flow_checks(root: Path = Path("results")) -> tuple[int, list[str]]:
    """How many gradient-flow runs (the gradient_flow stage's seeds, the phase cells) checked their steps against
    the same run with every step halved, and which of them differ by more than gradient_flow.agreement."""
    checked, flagged = 0, []

    def walk(node: object, where: str) -> None:
        nonlocal checked
        if isinstance(node, dict):
            if FAITHFUL in node:
                checked += 1
                if not node[FAITHFUL]:
                    flagged.append(where)
            for key, value in node.items():
                if isinstance(value, dict):
                    walk(value, f"{where} {key}")

    for path in sorted((root / "gradient_flow").glob("*.json")) + sorted((root / "phase").glob("*/metrics.json")):
        walk(read_json(path), str(path.relative_to(root).with_suffix("")).replace("/metrics", ""))
    return checked, flagged


def flow_note(checked: int, flagged: list[str]) -> str:
    if not checked:
        return ""
    if not flagged:
        return (f"Every gradient-flow run follows the flow: each of the {checked} runs (the gradient_flow stages' "
                "seeds and the phase cells) agrees with the same run with every step halved within "
                "gradient_flow.agreement.")
    return (f"{len(flagged)} of {checked} gradient-flow runs differ from the same run with every step halved by more "
            f"than gradient_flow.agreement (their steps are too long for the flow; read them with care): "
            f"{', '.join(flagged)}.")


D_SWEEP_HEADER = ["dataset", "d", "d / V", "trained: test accuracy", "untrained: test accuracy", "gap", "seeds"]


def d_sweep_rows(config: Config) -> list[list[str]]:
    """Per dataset and d of the sweep: the arms' mean test accuracy (+- the std over the seeds) and their gap."""
    rows = []
    for dataset in config.d_sweep.datasets:
        path = results_dir("d_sweep", dataset) / "sweep.csv"
        if not path.exists():
            continue
        sweep = pd.read_csv(path)
        for d, at_d in sweep.groupby("d"):
            arms = {arm: at_d[at_d["arm"] == arm]["test_accuracy"] for arm in ("trained", "untrained")}
            rows.append([dataset, f"{d:g}", f"{at_d['d_over_vocabulary'].mean():.3g}",
                         *(f"{values.mean():.3f} +- {values.std():.3f}" for values in arms.values()),
                         f"{arms['trained'].mean() - arms['untrained'].mean():.3f}", f"{len(arms['trained'])}"])
    return rows


D_SWEEP_NOTE = ("Ours, not judged: the trained and the untrained (random frozen) embeddings at every d of d_sweep.d, "
                "each arm at its own best learning rate, beside the train stage's runs at model.d. A random frozen "
                "E grows more expressive as d nears the number of tokens V; the gap the rebuttal reports moves with "
                "d / V.")

MEASURES_HEADER = ["claim", "source", "checks", "measured on; where its lemma applies", "statistic", "control",
                   "a bug that would make the control pass"]


def measures_rows() -> list[list[str]]:
    def scope(claim: Claim) -> str:
        needs = "; needs " + ", ".join(REQUIREMENTS[need] for need in claim.requires) if claim.requires else ""
        return SCOPES[claim.scope] + needs

    return [[claim.id, claim.source, f"{claim.kind} ({claim.origin})", scope(claim), claim.measures, claim.control,
             claim.bug] for claim in CLAIMS]


def _relative(path: Path, start: Path) -> str:
    return Path(*[".."] * len(start.parts), path).as_posix()


SENSITIVITY_HEADER = ["claim", "data", "protocol", "ours: mean [95 % interval]", "threshold", "verdict", "detail"]
TEMPLATE = Path(__file__).with_name("document.md.jinja")  # the report, in Markdown; report.html is made from it


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[str]]

    def __str__(self) -> str:
        return "\n".join(table(self.header, self.rows))


@dataclass(frozen=True)
class Block:
    """A section of the report: its heading, its paragraphs, its table."""

    heading: str
    paragraphs: list[str]
    table: Table | None = None


class FirstLines(Protocol):
    """The report's first lines (toksel.report.header.Header)."""

    warning: str
    verdict: Any  # header.Verdict: lead, items
    run: str
    columns: list[str]
    datasets: list[list[str]]


def blocks(sections: dict[str, list[Row]], found: list, calibration: Calibration,
           sweep: list[list[str]]) -> list[Block]:
    """The report's sections: the claims', the calibration, the d sweep, the protocols."""
    shown = [Block(heading, [], Table(HEADER, [cells(row, calibration) for row in section]))
             for heading, section in sections.items()]
    heading = "How each verdict rule is calibrated"
    if calibration:
        shown.append(Block(heading, [CALIBRATION_NOTE], Table(CALIBRATION_HEADER, calibration_rows(calibration))))
    else:
        shown.append(Block(heading, ["The calibration stage has not run (dvc repro calibrate)."]))
    if sweep:
        shown.append(Block("Beyond the paper: trained against random frozen embeddings as d grows", [D_SWEEP_NOTE],
                           Table(D_SWEEP_HEADER, sweep)))
    if found:
        values = [[f"`{claim.id}` {claim.statement}", data, protocol, interval_text(item.interval),
                   item.threshold_text, item.verdict, item.measurement.detail] for claim, data, protocol, item in found]
        shown.append(Block("How the protocol moves the verdicts", [PROTOCOL_NOTE], Table(SENSITIVITY_HEADER, values)))
    return shown


@dataclass(frozen=True)
class Content:
    """What the report shows besides its claims' rows: its figures (captions and files), the readings of real
    reviews (readings.readings_section), the calibration's rows, notes, the d sweep's rows, its first lines
    (toksel.report.header), how a claim is judged (method_note) and sections after the others."""

    figures: Sequence[tuple[str, Path]] = ()
    readings: str = ""
    calibration: Calibration = ()
    notes: Sequence[str] = ()
    sweep: list[list[str]] = ()
    header: FirstLines | None = None
    method: str = ""
    extra: Sequence[Block] = ()


def render(title: str, sections: dict[str, list[Row]], found: list, content: Content, out: Path) -> str:
    """The report in Markdown (figures linked relative to `out`, the report's folder), from its template
    (document.md.jinja); found: the protocol table's rows (sensitivity). toksel.report.page makes the HTML page."""
    import jinja2

    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE.parent), autoescape=False,
                                     undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    header = content.header
    page = environment.get_template(TEMPLATE.name).render(
        title=title, headline=headline(tally(sections)), method=content.method, header=header,
        run_table=header and Table(header.columns, header.datasets), notes=[note for note in content.notes if note],
        blocks=[*blocks(sections, found, content.calibration, content.sweep), *content.extra],
        readings=content.readings, measures=Table(MEASURES_HEADER, measures_rows()),
        figures=[(caption, _relative(path, out)) for caption, path in content.figures])
    return page.rstrip("\n") + "\n"


def embedded(figures: Iterable[tuple[str, Path]], out: Path) -> dict[str, Path]:
    """Each figure's link in report.md, and the file report.html embeds for it."""
    return {_relative(path, out): _as_written(path) for _, path in figures}


def _as_written(path: Path) -> Path:
    """The report's own figures (the forest plot, the training figures) wait, written, for the stage's end: their
    files as this stage wrote them."""
    return require_output(path, "report") if pending(path) else path


def figures(config: Config) -> list[tuple[str, Path]]:
    """The figures the report shows, those that exist: captions and paths (the first seed's runs)."""
    seed = f"seed{config.training_seeds[0]}"
    wanted = [("Every claim's interval against its threshold, and its control's", results_dir("report", "")
               / "verdicts.png"),
              ("The operating curves: how often each verdict rule holds as the planted effect grows, per dataset",
               results_dir("calibration", "") / "rates.png")]
    wanted += [(f"{name}: {what}", results_dir("evaluate", name) / file) for name in config.datasets
               for what, file in (("Lemma 4.1, one step", "one_step.png"), ("gradient flow on p", "gradient_flow.png"),
                                  ("E_s^T v and E_s^T p after gradient flow", "token_scores.png"))]
    wanted += [(f"{name}: full training, binned token scores (Figure 3), {seed}",
                results_dir("train", name) / "trained" / seed / "token_scores.png") for name in config.train.datasets]
    wanted += [(f"{name}: test accuracy against epochs, the untrained arm at the matched rate and at its own",
                results_dir("report", "") / "training" / f"accuracy_epochs_{name}.png")
               for name in config.train.datasets]
    wanted += [(f"{name}: the spread ratio across protocols (ours)", results_dir("report", "") / "training"
                / f"spread_sweep_{name}.png") for name in config.train.datasets]
    wanted += [("The rebuttal's tables against our runs", results_dir("ablation_report", "") / "rebuttal_tables.png")]
    wanted += [(f"{name}: test accuracy of trained and random frozen embeddings against d / V (ours)",
                results_dir("d_sweep", name) / "accuracy.png") for name in config.d_sweep.datasets]
    wanted += [("Beyond the paper: accuracy on negated test reviews, and how the one-layer model reads each token "
                "(ours, exploratory)", results_dir("negation", "") / "negation.png")]
    wanted += [(caption, results_dir("phase_diagram", "") / file) for caption, file in (
        ("Phase diagram: selection", "selection.png"),
        ("Phase diagram: max-margin direction", "cos_max_margin_selected.png"),
        ("The one-step error against d", "one_step_error.png"))]
    wanted += [("A label carried by a pair of tokens: the one step, and which model reads the pair (ours)",
                results_dir("pair_report", "") / "pair.png"),
               ("Which margin each optimiser on p picks (ours)", results_dir("margins", "") / "margins.png")]
    return [(caption, path) for caption, path in wanted if _as_written(path).exists()]


def forest_rows(sections: dict[str, list[Row]]) -> list[tuple[str, Assessment]]:
    """(label, assessment) of every measured claim (not the descriptions), for the forest plot."""
    return [(f"{row.assessment.claim.id} ({row.data})", row.assessment) for section in sections.values()
            for row in section if row.assessment.measurement is not None and row.assessment.verdict != "described"]


