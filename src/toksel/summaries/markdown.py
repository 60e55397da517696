"""Markdown tables and missing numbers, written one way for every summary and report."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

MISSING = "n/a"  # a number that is missing or not finite


def number(value: float | None, spec: str = ".3g", missing: str = MISSING) -> str:
    """`value` in `spec`, or `missing` (n/a unless a text says better what is missing)."""
    return missing if value is None or not math.isfinite(value) else format(value, spec)


def escape(text: object) -> str:
    """A cell's text with its pipes escaped, so that they do not split the row."""
    return str(text).replace("|", "\\|")


PUNCTUATION = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>])")  # what Markdown may read as markup


def literal(text: str) -> str:
    """`text` as Markdown shows it, read as it is: every punctuation mark escaped (a `*` or a backquote starts
    nothing, a `|` splits no row)."""
    return PUNCTUATION.sub(r"\\\1", text)


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """The lines of a Markdown table: the header, its rule, one line per row."""
    return [_line(header), "|" + "---|" * len(header), *(_line(row) for row in rows)]


def _line(cells: Sequence[object]) -> str:
    return "| " + " | ".join(escape(cell) for cell in cells) + " |"
