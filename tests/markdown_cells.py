"""The cells of the reports' Markdown tables, without the padding that lines their columns up.

The reports write their tables through ``module_utils/report/tables.py`` (tabulate's ``github`` format), which
pads every cell to its column's width. A test that asserts a row asserts its cells: :func:`unpadded` gives the
Markdown back with each table line written with one space around each cell (``| a | b |``; an empty one ``| |``;
the rule ``|---|---|``),
so that ``"| qps=1 | yes | **keep** |" in unpadded(md)`` holds whatever the widths.
"""

from __future__ import annotations

import re

_SPLIT = re.compile(r"(?<!\\)\|")  # a cell's escaped \| is no column boundary


def cells(line: str) -> list[str]:
    """The stripped cells of one table line ``| a | b |``."""
    return [c.strip() for c in _SPLIT.split(line.strip())[1:-1]]


def unpadded_line(line: str) -> str:
    if not (line.startswith("|") and line.rstrip().endswith("|")):
        return line
    row = cells(line)
    if row and all(c and set(c) <= set("-:") for c in row):
        return "|" + "|".join("---" for _ in row) + "|"
    return "|" + "|".join(" %s " % c if c else " " for c in row) + "|"


def unpadded(markdown: str) -> str:
    """The Markdown with every table line's padding taken out (other lines unchanged)."""
    return "\n".join(unpadded_line(line) for line in markdown.split("\n"))
