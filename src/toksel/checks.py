"""Theory checks: a measured number, a stated threshold, and whether the claim holds on this run."""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from toksel.config import EvaluateConfig

COMPARISONS = {">=": operator.ge, "<=": operator.le}


@dataclass(frozen=True)
class Check:
    name: str  # stable metric name
    claim: str  # what the paper says, in words
    value: float | None  # None when the producing stage could not compute it
    comparison: str  # ">=" or "<="
    threshold: float

    @property
    def holds(self) -> bool:
        return self.value is not None and math.isfinite(self.value) and COMPARISONS[self.comparison](
            self.value, self.threshold)

    def as_record(self) -> dict[str, object]:
        """Every field and the verdict (JSON)."""
        return {**dataclasses.asdict(self), "holds": self.holds}

    def as_metrics(self) -> dict[str, float | None]:
        return {f"{self.name}": self.value, f"{self.name}_threshold": self.threshold,
                f"{self.name}_holds": float(self.holds)}


def theory_checks(one_step: dict, gradient_flow: dict, thresholds: EvaluateConfig,
                  synthetic: bool = True, num_classes: int = 2) -> list[Check]:
    """The checks of Lemma 4.1 and Lemma 4.2 on any data; of Lemma 4.4 and Theorem 4.3 on synthetic data,
    whose important tokens are known and whose QP is small enough to solve. For K > 2 classes the Lemma 4.1
    checks are the rebuttal's formula, judged on the worst class."""
    if num_classes == 2:
        slope_claim = "Lemma 4.1: the update along v has slope eta0/2 in alpha_s"
        linear_claim = "Lemma 4.1: the update along v is linear in alpha_s"
    else:
        slope_claim = (f"Lemma 4.1, {num_classes} classes (rebuttal): the update along each v_k has slope eta0 in "
                       "the class-k signed frequency (worst class)")
        linear_claim = "Lemma 4.1, K classes: the update along each v_k is linear in alpha_s^(k) (worst class)"
    checks = [
        Check("lemma41_slope_rel_error", slope_claim, one_step.get("slope_rel_error"), "<=",
              thresholds.max_slope_rel_error),
        Check("lemma41_pearson_r", linear_claim, one_step.get("pearson_r"), ">=", thresholds.min_pearson_r),
        Check("lemma42_p_norm_increasing", "Lemma 4.2: the norm of p_t grows (to infinity) under gradient flow",
              gradient_flow.get("p_norm_increasing_fraction"), ">=", 1.0),
    ]
    if synthetic:
        checks += [
            Check("lemma44_selection_fraction", "Lemma 4.4: p_t selects the important tokens of every sequence",
                  gradient_flow.get("selection_fraction"), ">=", thresholds.min_selection_fraction),
            Check("theorem43_cos_max_margin",
                  "Theorem 4.3: the direction of p_t converges to the max-margin direction",
                  gradient_flow.get("cos_max_margin"), ">=", thresholds.min_cos_max_margin),
        ]
    return checks


def summary_markdown(checks: list[Check], title: str, figures: list[str], notes: Sequence[str] = (),
                     sections: Mapping[str, str] | None = None) -> str:
    """The checks as a table, the notes as a list, then each section (title: Markdown body), then the figures."""
    lines = [f"# {title}", "", "| check | claim | measured | threshold | holds |", "|---|---|---|---|---|"]
    for check in checks:
        value = "not computed" if check.value is None else f"{check.value:.6g}"
        verdict = "yes" if check.holds else "**no**"
        lines.append(f"| `{check.name}` | {check.claim} | {value} | {check.comparison} {check.threshold:g} "
                     f"| {verdict} |")
    held = sum(check.holds for check in checks)
    lines += ["", f"{held} of {len(checks)} checks hold.", "", *[f"- {note}" for note in notes], ""]
    for heading, body in (sections or {}).items():
        lines += [f"## {heading}", "", body, ""]
    lines += [f"![{name}]({name})" for name in figures]
    return "\n".join(lines) + "\n"
