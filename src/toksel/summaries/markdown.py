"""Markdown tables and missing numbers, written one way for every summary and report."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

MISSING = "n/a"  # a number that is missing or not finite


def number(value: float | None, spec: str = ".3g", missing: str = MISSING) -> str:
    """`value` in `spec`, or `missing` (n/a unless a text says better what is missing)."""
    return missing if value is None or not math.isfinite(value) else format(value, spec)


def escape(text: object) -> str:
    """A cell's text with its pipes escaped, so that they do not split the row."""
    return str(text).replace("|", "\\|")


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """The lines of a Markdown table: the header, its rule, one line per row."""
    return [_line(header), "|" + "---|" * len(header), *(_line(row) for row in rows)]


def _line(cells: Sequence[object]) -> str:
    return "| " + " | ".join(escape(cell) for cell in cells) + " |"
