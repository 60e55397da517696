"""How trained embeddings line up with the token statistics (paper Figs. 2-3 and the rebuttal's tables).

E_s^T p and E_s^T v are binned by the posterior difference P(1|s) - P(0|s) into equal-width bins between its
smallest and largest value (paper.md section 3: 20 bins); each bin reports the mean, the std and the count.
Rank correlations: E_s^T v with alpha_s (monotone), E_s^T p with |alpha_s| (important tokens score high).
K > 2 classes: E_s^T v_k is binned by the class-k signed frequency alpha_s^(k), as in the rebuttal's
multi-class tables, and the v metrics average over the classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from toksel.data.token_table import class_alphas, importance, num_classes, occurring


@dataclass(frozen=True)
class BinnedCurve:
    centres: np.ndarray
    counts: np.ndarray
    means: np.ndarray  # NaN for an empty bin
    stds: np.ndarray  # population std; NaN for an empty bin

    @property
    def mean_std(self) -> float:
        """The spread of the scores around their curve: the mean per-bin std over bins with two tokens or more."""
        return float(np.mean(self.stds[self.counts >= 2]))

    @property
    def relative_spread(self) -> float:
        """mean_std over the range of the bin means: the same spread, free of the scores' scale (|p| and |v|
        grow with training, and differently with and without trained embeddings)."""
        return self.mean_std / float(np.nanmax(self.means) - np.nanmin(self.means))

    @property
    def argmin_centre(self) -> float:
        """Where the curve has its minimum (the bottom of the U for E_s^T p)."""
        return float(self.centres[np.nanargmin(self.means)])

    def as_frame(self) -> pd.DataFrame:
        return pd.DataFrame({"centre": self.centres, "count": self.counts, "mean": self.means, "std": self.stds})


def binned_curve(x: np.ndarray, y: np.ndarray, bins: int) -> BinnedCurve:
    edges = np.linspace(x.min(), x.max(), bins + 1)
    index = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, bins - 1)  # the max goes in the last bin
    counts = np.bincount(index, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.bincount(index, weights=y, minlength=bins) / counts
        stds = np.sqrt(np.bincount(index, weights=(y - means[index]) ** 2, minlength=bins) / counts)
    return BinnedCurve((edges[:-1] + edges[1:]) / 2, counts, means, stds)


def token_curves(tokens: pd.DataFrame, score_p: np.ndarray, score_v: np.ndarray, bins: int,
                 among: np.ndarray | None = None) -> tuple[dict[str, float], dict[str, BinnedCurve]]:
    """Metrics and curves over the tokens that occur in training (and are in `among`, a bool mask, if given).
    score_v: (|S|,), or (|S|, K) for K classes."""
    present = occurring(tokens) if among is None else occurring(tokens) & among
    x = tokens["posterior_difference"].to_numpy()[present]
    p = score_p[present]
    curves = {"p": binned_curve(x, p, bins)}
    metrics = {"spearman_p_abs_alpha": float(spearmanr(p, importance(tokens)[present]).statistic)}
    classes = num_classes(tokens)
    if classes == 2:
        curves["v"] = binned_curve(x, score_v[present], bins)
        metrics["spearman_v_alpha"] = float(spearmanr(score_v[present], tokens["alpha"].to_numpy()[present]).statistic)
    else:
        alphas = class_alphas(tokens)[:, present]
        for k in range(classes):
            curves[f"v_class_{k}"] = binned_curve(alphas[k], score_v[present, k], bins)
            metrics[f"spearman_v_alpha_class_{k}"] = float(spearmanr(score_v[present, k], alphas[k]).statistic)
        metrics["spearman_v_alpha"] = float(np.mean([metrics[f"spearman_v_alpha_class_{k}"] for k in range(classes)]))
    v_curves = [curve for name, curve in curves.items() if name != "p"]
    metrics |= {
        "bin_std_p": curves["p"].mean_std,
        "bin_std_v": float(np.mean([curve.mean_std for curve in v_curves])),
        "bin_spread_p": curves["p"].relative_spread,
        "bin_spread_v": float(np.mean([curve.relative_spread for curve in v_curves])),
        "p_min_location": curves["p"].argmin_centre,
    }
    return metrics, curves
