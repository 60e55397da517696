"""How trained embeddings line up with the token statistics (paper Figs. 1-3 and the rebuttal's tables).

The statistics are those of the held-out (test) split (prepare's `heldout_` columns): a model also fits the
noise of its own training labels, so against the training split's statistics its scores line up even when the
labels are shuffled. A token counts when it occurs in training and at least `min_count` times in the held-out
split.

- Curves: E_s^T p and E_s^T v binned by the posterior difference P(1|s) - P(0|s) (K > 2 classes: E_s^T v_k
  by the class-k document frequency, the scale of the rebuttal's tables), equal-width bins between its
  smallest and largest value (the paper's tables) or quantile bins; a bin with fewer than `min_bin_tokens`
  tokens is left out (mean and std NaN, its count kept).
- Rank statistics, per token: E_s^T v with alpha_s (K classes: each v_k with alpha_s^(k), the smallest over
  the classes); on each side of 0, E_s^T p with |posterior difference| (the two arms of the U) and E_s^T v
  with the posterior difference. Each also noise-corrected (`_corrected`): divided by the same correlation of
  the training split's own statistic with the held-out one (its `ceiling`). The held-out statistics are noisy
  measurements (a token seen 10 times has a posterior difference with a standard error above 0.3), so even a
  score that follows the training statistic exactly correlates with them only that much (0.4 to 0.76 on our
  data); the corrected value is about 1 for such a score, about 0 for one that carries nothing of the labels.
- Spread: the mean per-bin std, and the same over the std of all the scores, which does not move with the
  scale of p and v. binned_curves can also bin the same tokens by the training split's statistic (binned_on),
  for the scatter around what the model fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from toksel.data.token_table import TokenTable


@dataclass(frozen=True)
class BinnedCurve:
    centres: np.ndarray
    counts: np.ndarray  # tokens per bin, also of the bins left out
    means: np.ndarray  # NaN for a bin left out (fewer than min_bin_tokens tokens)
    stds: np.ndarray  # population std; NaN for a bin left out

    @property
    def kept(self) -> np.ndarray:
        return np.isfinite(self.means)

    @property
    def mean_std(self) -> float:
        """The spread of the scores around their curve: the mean per-bin std over the kept bins of 2+ tokens."""
        stds = self.stds[self.kept & (self.counts >= 2)]
        return float(np.mean(stds)) if len(stds) else float("nan")

    overall_std: float = float("nan")  # the std of every token's score, binned or not

    @property
    def relative_spread(self) -> float:
        """mean_std over the std of all the scores: the share of their spread the curve leaves, free of the
        scores' scale (|p| and |v| grow with training, and differently with and without trained embeddings).
        0 when every score lies on its bin's mean, about 1 when the bins explain nothing (a flat curve); unlike
        the range of the bin means, the std of all scores stays well away from 0 on a flat, noisy curve."""
        return self.mean_std / self.overall_std if self.overall_std > 0 else float("nan")

    @property
    def argmin_centre(self) -> float:
        """Where the curve has its minimum (the bottom of the U for E_s^T p)."""
        return float(self.centres[np.nanargmin(self.means)]) if self.kept.any() else float("nan")

    def as_frame(self) -> pd.DataFrame:
        return pd.DataFrame({"centre": self.centres, "count": self.counts, "mean": self.means, "std": self.stds})


def bin_edges(x: np.ndarray, bins: int, binning: str = "equal_width") -> np.ndarray:
    """bins + 1 edges over x: equal width between its extremes, or its quantiles (equal token counts)."""
    if binning == "quantile":
        return np.quantile(x, np.linspace(0, 1, bins + 1))
    return np.linspace(x.min(), x.max(), bins + 1)


def binned_curve(x: np.ndarray, y: np.ndarray, bins: int, binning: str = "equal_width",
                 min_bin_tokens: int = 1) -> BinnedCurve:
    edges = bin_edges(x, bins, binning)
    index = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, bins - 1)  # the max goes in the last bin
    counts = np.bincount(index, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.bincount(index, weights=y, minlength=bins) / counts
        stds = np.sqrt(np.bincount(index, weights=(y - means[index]) ** 2, minlength=bins) / counts)
    small = counts < min_bin_tokens
    means[small], stds[small] = np.nan, np.nan
    return BinnedCurve((edges[:-1] + edges[1:]) / 2, counts, means, stds, float(np.std(y)))


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation, the Pearson correlation of the ranks (ties share their mean rank, as in
    scipy.stats.spearmanr, without its checks: the calibration computes tens of thousands); NaN with fewer than
    three tokens or a constant side."""
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    from scipy.stats import rankdata  # here: scipy.stats takes half a second to import, most stages need none

    return float(np.corrcoef(rankdata(a), rankdata(b))[0, 1])


def smallest(values: list[float]) -> float:
    """The smallest value; NaN when any is NaN (a side or class that could not be measured decides nothing)."""
    return float("nan") if any(np.isnan(values)) else float(min(values))


def side_rises(score: np.ndarray, x: np.ndarray, against_abs: bool) -> tuple[float, float]:
    """(positive side, negative side): Spearman of the score with |x| (against_abs) or with x, over the tokens
    with x > 0 and over those with x < 0."""
    positive, negative = x > 0, x < 0
    along = np.abs(x) if against_abs else x
    return _spearman(score[positive], along[positive]), _spearman(score[negative], along[negative])


def corrected(rho: float, ceiling: float) -> float:
    """A rank correlation over its ceiling, that of the training statistic itself; NaN without a positive ceiling."""
    return rho / ceiling if np.isfinite(ceiling) and ceiling > 0 else float("nan")


def heldout_tokens(tokens: TokenTable, min_count: int, among: np.ndarray | None = None) -> np.ndarray:
    """The tokens the curves use: occurring in training, `min_count` times or more in the held-out split (and
    in `among`, a bool mask, if given)."""
    kept = tokens.occurring() & (tokens.column("heldout_count") >= min_count)
    return kept if among is None else kept & among


@dataclass(frozen=True)
class CurveSettings:
    bins: int = 20
    binning: str = "equal_width"
    min_bin_tokens: int = 1
    min_count: int = 1  # held-out occurrences a token needs


@dataclass(frozen=True)
class ValueAxis:
    """One output vector's curve: its scores E_s^T v (v_k) over the kept tokens, binned along `x`, ranked against
    the held-out signed frequency `alpha`. Named v{suffix}: v for two classes, v_class_k for K."""

    suffix: str
    x: np.ndarray
    scores: np.ndarray
    alpha: np.ndarray
    alpha_train: np.ndarray  # the training split's signed frequency: the ceiling's score
    x_label: str
    score_label: str


def value_axes(tokens: TokenTable, kept: np.ndarray, score_v: np.ndarray) -> list[ValueAxis]:
    """Two classes: E_s^T v along the held-out posterior difference, ranked against alpha_s. K classes: each
    E_s^T v_k along the held-out class-k document frequency, ranked against alpha_s^(k)."""
    if tokens.binary:
        return [ValueAxis("", tokens.column("heldout_posterior_difference")[kept], score_v[kept],
                          tokens.column("heldout_alpha")[kept], tokens.column("alpha")[kept],
                          "posterior difference (held-out)", "$E_s^T v$")]
    presence, alphas = tokens.per_class("heldout_presence")[:, kept], tokens.per_class("heldout_alpha")[:, kept]
    trained = tokens.per_class("alpha")[:, kept]
    return [ValueAxis(f"_class_{k}", presence[k], score_v[kept, k], alphas[k], trained[k],
                      f"class-{k} document frequency (held-out)", f"$E_s^T v_{{{k}}}$")
            for k in range(tokens.num_classes)]


BINNED_ON = ("heldout", "train")  # which split's statistic the curves' bins are read on


def binned_curves(tokens: TokenTable, score_p: np.ndarray, score_v: np.ndarray, settings: CurveSettings,
                  among: np.ndarray | None = None, binned_on: str = "heldout") -> dict[str, BinnedCurve]:
    """The binned curves over the held-out tokens: p along the posterior difference, v (each v_k) along its axis.

    binned_on="train": the same tokens, binned by the training split's statistic instead (the posterior difference;
    K classes: each v_k by the class-k signed frequency alpha^(k), the table holding no training document
    frequency). A model fits its training labels, so this scatter leaves out the held-out statistics' own noise:
    it says how tightly the scores follow what the model saw, not whether that carries to new data."""
    if binned_on not in BINNED_ON:
        raise ValueError(f"binned_on must be one of {BINNED_ON}, not {binned_on!r}")
    kept = heldout_tokens(tokens, settings.min_count, among)

    def curve(along: np.ndarray, values: np.ndarray) -> BinnedCurve:
        return binned_curve(along, values, settings.bins, settings.binning, settings.min_bin_tokens)

    axes = value_axes(tokens, kept, score_v)
    if binned_on == "heldout":
        p_axis, v_axes = tokens.column("heldout_posterior_difference")[kept], [axis.x for axis in axes]
    else:
        p_axis = tokens.column("posterior_difference")[kept]
        v_axes = [p_axis] if tokens.binary else [axis.alpha_train for axis in axes]
    curves = {"p": curve(p_axis, score_p[kept])}
    return curves | {f"v{axis.suffix}": curve(x, axis.scores) for axis, x in zip(axes, v_axes, strict=True)}


SPREADS = ("bin_spread_v", "bin_spread_p", "bin_std_v", "bin_std_p")  # what `spreads` reads: scale-free, then raw
TRAIN_BINNED = "train_binned_"  # the same spreads' prefix where the curves are binned by the training statistics


def spreads(curves: dict[str, BinnedCurve]) -> dict[str, float]:
    """The scatter around the curves: the mean per-bin std (raw) and the same over the std of all the scores
    (scale-free), for p and, averaged over the classes, v."""
    v_curves = [curve for name, curve in curves.items() if name != "p"]
    return {"bin_std_p": curves["p"].mean_std, "bin_std_v": float(np.mean([curve.mean_std for curve in v_curves])),
            "bin_spread_p": curves["p"].relative_spread,
            "bin_spread_v": float(np.mean([curve.relative_spread for curve in v_curves]))}


def token_curves(tokens: TokenTable, score_p: np.ndarray, score_v: np.ndarray, settings: CurveSettings,
                 among: np.ndarray | None = None) -> tuple[dict[str, float], dict[str, BinnedCurve]]:
    """Metrics and curves over the held-out tokens. score_v: (|S|,), or (|S|, K) for K classes."""
    kept = heldout_tokens(tokens, settings.min_count, among)
    x = tokens.column("heldout_posterior_difference")[kept]
    x_train = tokens.column("posterior_difference")[kept]
    p = score_p[kept]
    curves = binned_curves(tokens, score_p, score_v, settings, among)
    metrics: dict[str, float] = {"tokens_used": float(kept.sum())}

    def sides(name: str, score: np.ndarray, against_abs: bool) -> None:
        """<name>_positive / _negative, their ceilings and corrected values, and the corrected smaller side."""
        own = np.abs(x_train) if against_abs else x_train  # the training split's statistic as the score
        rises, ceilings = side_rises(score, x, against_abs), side_rises(own, x, against_abs)
        for side, rise, ceiling in zip(("positive", "negative"), rises, ceilings, strict=True):
            metrics.update({f"{name}_{side}": rise, f"{name}_{side}_ceiling": ceiling,
                            f"{name}_{side}_corrected": corrected(rise, ceiling)})
        metrics[f"{name}_corrected"] = smallest([metrics[f"{name}_{side}_corrected"] for side in ("positive",
                                                                                                   "negative")])

    sides("u_rise", p, against_abs=True)
    metrics["u_rise"] = smallest([metrics["u_rise_positive"], metrics["u_rise_negative"]])
    axes = value_axes(tokens, kept, score_v)
    for axis in axes:
        rho, ceiling = _spearman(axis.scores, axis.alpha), _spearman(axis.alpha_train, axis.alpha)
        metrics |= {f"spearman_v_alpha{axis.suffix}": rho, f"spearman_v_alpha{axis.suffix}_ceiling": ceiling,
                    f"spearman_v_alpha{axis.suffix}_corrected": corrected(rho, ceiling)}
    if tokens.binary:  # the two sides of the posterior difference, which only two classes have
        sides("v_rise", axes[0].scores, against_abs=False)
    else:
        for name in ("spearman_v_alpha", "spearman_v_alpha_corrected"):
            metrics[name] = smallest([metrics[name.replace("spearman_v_alpha", f"spearman_v_alpha{axis.suffix}")]
                                      for axis in axes])
    metrics |= {**spreads(curves), "p_min_location": curves["p"].argmin_centre}
    return metrics, curves
