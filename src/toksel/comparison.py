"""Full training next to the paper: accuracy with trained, untrained and one-step-frozen embeddings, and how
tightly the trained scores follow their binned curves (paper.md section 5, "Scalars")."""

from __future__ import annotations

import math

from toksel.config import EMBEDDINGS

# The paper's numbers (rebuttal): dataset not named; "test error" read as the test loss.
PAPER = {
    ("test_accuracy", "trained"): "about 0.95",
    ("test_accuracy", "untrained"): "about 0.72",
    ("test_loss", "trained"): "about 0.1",
    ("test_loss", "untrained"): "about 0.6",
    "bin_std_v_ratio": "about 8",
    "bin_std_p_ratio": "about 6",
}

ROWS = (  # metric, what it is (a Markdown table cell: | escaped)
    ("test_accuracy", "test accuracy"),
    ("test_loss", "test loss"),
    ("spearman_v_alpha", "Spearman of E_s^T v with alpha_s"),
    ("spearman_p_abs_alpha", "Spearman of E_s^T p with \\|alpha_s\\|"),
    ("bin_std_v", "mean per-bin std of E_s^T v"),
    ("bin_std_p", "mean per-bin std of E_s^T p"),
    ("bin_spread_v", "mean per-bin std of E_s^T v / range of its bin means"),
    ("bin_spread_p", "mean per-bin std of E_s^T p / range of its bin means"),
    ("p_min_location", "posterior difference where the E_s^T p curve is lowest"),
    ("test_attention_important_mass", "attention mass on the important tokens (test)"),
    ("test_argmax_important_fraction", "sequences whose top token is important (test)"),
    ("test_attention_entropy", "attention entropy over positions (test)"),
    ("epochs", "epochs trained"),
    ("seconds", "seconds"),
)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0 or not math.isfinite(numerator / denominator):
        return None
    return numerator / denominator


def training_comparison(runs: dict[str, dict]) -> tuple[str, dict[str, float | None]]:
    """Markdown table of the three training runs (keyed by EMBEDDINGS) with the paper's values, and the
    metrics evaluate records: accuracy per run and the bin-std ratios full training / one step."""
    def number(value: float | None) -> str:
        return "not computed" if value is None else f"{value:.4g}"

    def cell(variant: str, metric: str) -> str:
        return number(runs[variant].get(metric)) if runs[variant] else "not run"

    lines = ["| quantity | trained | untrained | one step, frozen | paper |", "|---|---|---|---|---|"]
    for metric, label in ROWS:
        paper = "; ".join(f"{PAPER[(metric, variant)]} ({variant})" for variant in EMBEDDINGS
                          if (metric, variant) in PAPER) or ""
        lines.append(f"| {label} | " + " | ".join(cell(variant, metric) for variant in EMBEDDINGS) + f" | {paper} |")
    ratios = {f"{name}_ratio": _ratio(runs["trained"].get(name), runs["one_step"].get(name))
              for name in ("bin_std_v", "bin_std_p", "bin_spread_v", "bin_spread_p")}
    lines += ["", "Per-bin std, full training over one step then frozen: "
              f"E_s^T v {number(ratios['bin_std_v_ratio'])} (paper {PAPER['bin_std_v_ratio']}), "
              f"E_s^T p {number(ratios['bin_std_p_ratio'])} (paper {PAPER['bin_std_p_ratio']}); relative to the "
              f"range of the bin means (free of the scale of v and p): E_s^T v {number(ratios['bin_spread_v_ratio'])}"
              f", E_s^T p {number(ratios['bin_spread_p_ratio'])}."]
    metrics = {f"accuracy_{variant}": runs[variant].get("test_accuracy") for variant in EMBEDDINGS}
    return "\n".join(lines), {**metrics, **ratios}


VARIANT_ROWS = (  # the ablation runs of one dataset, side by side
    ("test_accuracy", "test accuracy"),
    ("test_loss", "test loss"),
    ("best_train_loss", "train loss (best model)"),
    ("spearman_v_alpha", "Spearman of E_s^T v with alpha_s"),
    ("spearman_p_abs_alpha", "Spearman of the <cls> score with \\|alpha_s\\|"),
    ("p_min_location", "posterior difference where the <cls> score curve is lowest"),
    ("bin_spread_p", "mean per-bin std of the <cls> score / range of its bin means"),
    ("test_attention_important_mass", "attention mass on the important tokens (test)"),
    ("test_argmax_important_fraction", "sequences whose top token is important (test)"),
    ("padding_fraction", "padding in the training batches"),
    ("epochs", "epochs trained"),
    ("seconds", "seconds"),
)


def variants_comparison(runs: dict[str, dict]) -> str:
    """Markdown table with one column per model variant (its metrics.json)."""
    lines = ["| quantity | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
    for metric, label in VARIANT_ROWS:
        values = (runs[variant].get(metric) for variant in runs)
        lines.append(f"| {label} | " + " | ".join("not computed" if value is None else f"{value:.4g}"
                                                  for value in values) + " |")
    return "\n".join(lines)
