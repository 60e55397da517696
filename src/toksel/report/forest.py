"""The report's forest plot (verdicts.png): every claim's interval and its control's against its threshold.

The report alone draws it: kept apart from toksel.figures.plots, whose figures the training stages draw too, so
that an edit to it reruns the report only.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.lines  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

from toksel.claims.catalogue import Assessment  # noqa: E402

VERDICT_COLOURS = {"holds": "#1a9850", "fails": "#d73027", "inconclusive": "#fdae61", "exploratory": "#4575b4",
                   "transient": "#74add1", "not computed": "#999999"}
# A control is coloured by whether it behaved: failing is what a near miss without the effect must do.
CONTROL_COLOURS = {True: "#1a9850", False: "#d73027", None: "#999999"}
CONTROL_LABELS = {True: "control: fails, as it must", False: "control: holds, it must fail",
                  None: "control: inconclusive"}


def _margin(value: float, item: Assessment) -> float:
    """How far a value lies on the claim's side of its threshold, in units of the threshold (>0: the claim's); for
    a size claim, how far inside its band, in units of the band's half width."""
    if item.band is not None:
        low, high = item.band
        half = (high - low) / 2
        return (half - abs(value - (low + high) / 2)) / half
    comparison, threshold = item.claim.comparison, item.threshold
    scale = abs(threshold) or 1.0
    return (value - threshold) / scale if comparison == ">=" else (threshold - value) / scale


def verdicts_figure(rows: list[tuple[str, Assessment]]) -> plt.Figure:
    """A forest plot: per claim (label, Assessment), its interval and its control's as margins past the threshold
    (the claim's side to the right, in units of the threshold; symmetric log axis); the claim coloured by its
    verdict, its control (hollow) by whether it behaved."""
    figure, axis = plt.subplots(figsize=(9, 0.28 * len(rows) + 1.6))
    for position, (_, item) in enumerate(rows):
        y = len(rows) - 1 - position
        for interval, colour, offset, filled in (
                (item.interval, VERDICT_COLOURS.get(item.verdict, "#999999"), 0.12, True),
                (item.control_interval, CONTROL_COLOURS[item.control_behaved], -0.12, False)):
            if interval is None or interval.n == 0:
                continue
            centre = _margin(interval.mean, item)
            if interval.exists:
                ends = sorted(_margin(end, item) for end in (interval.low, interval.high))
                if item.band is not None and interval.low <= sum(item.band) / 2 <= interval.high:
                    ends[1] = 1.0  # the interval holds the band's centre, the farthest point inside it
                axis.plot(ends, [y + offset] * 2, color=colour, lw=2.2 if filled else 1.2, ls="-" if filled else "--")
            axis.plot(centre, y + offset, "o", color=colour, ms=5, mfc=colour if filled else "white")
    axis.axvline(0, color="black", lw=1)
    axis.set_xscale("symlog", linthresh=0.01)
    axis.set_yticks(range(len(rows)), [label for label, _ in reversed(rows)], fontsize=7)
    axis.set_ylim(-0.7, len(rows) - 0.3)
    axis.set_xlabel("past the threshold, in units of it (right: the claim's side)")
    handles = [matplotlib.lines.Line2D([], [], color=colour, marker="o", lw=2, label=f"ours: {verdict}")
               for verdict, colour in VERDICT_COLOURS.items() if verdict != "not computed"]
    handles += [matplotlib.lines.Line2D([], [], color=CONTROL_COLOURS[behaved], marker="o", mfc="white", lw=1.2,
                                        ls="--", label=label) for behaved, label in CONTROL_LABELS.items()]
    # Beside the axes, where it hides no row.
    axis.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axis.grid(alpha=0.3, axis="x")
    axis.set_title("Every claim: the 95 % interval of its mean over the seeds against its threshold", fontsize=10)
    figure.tight_layout()
    return figure
