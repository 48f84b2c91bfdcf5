"""The reports' one Markdown table writer (module_utils/report/tables.py, tabulate's github format)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown_cells import cells, unpadded

from ansible_collections.specpilot.core.plugins.module_utils.report.tables import markdown_table

ROOT = Path(__file__).resolve().parents[2]


def test_a_table_is_a_header_a_rule_and_one_line_a_row_with_the_columns_lined_up():
    lines = markdown_table(
        ("level", "decision", "TPOT p50", "note"),
        [("qps=1", "**keep**", "1.08x [1.04-1.13]", None), ("qps=16", "**rollback**", "0.50", "a \\| b")],
    )
    assert len(lines) == 4 and set(lines[1]) == {"|", "-"}
    assert len({len(line) for line in lines}) == 1  # padded: the columns line up in a terminal
    assert [line.index("|", 2) for line in lines] == [lines[0].index("|", 2)] * 4
    # every cell as written: no number parsed (0.50 stays 0.50), an escaped pipe stays one cell, None is empty
    assert [cells(line) for line in lines[2:]] == [
        ["qps=1", "**keep**", "1.08x [1.04-1.13]", ""],
        ["qps=16", "**rollback**", "0.50", "a \\| b"],
    ]
    assert unpadded("\n".join(lines)) == (
        "| level | decision | TPOT p50 | note |\n|---|---|---|---|\n"
        "| qps=1 | **keep** | 1.08x [1.04-1.13] | |\n| qps=16 | **rollback** | 0.50 | a \\| b |"
    )


def test_numbers_are_written_as_str_writes_them_and_a_table_without_rows_keeps_its_header():
    assert cells(markdown_table(("n", "x"), [(3, 0.1)])[2]) == ["3", "0.1"]
    head, rule = markdown_table(("a", "b"), [])
    assert cells(head) == ["a", "b"] and unpadded(rule) == "|---|---|"


def test_a_cell_with_a_line_break_or_a_row_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match="line break"):
        markdown_table(("a",), [("x\ny",)])
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        markdown_table(("a", "b", "c"), [("x", "y")])


def test_no_report_writes_a_table_by_hand():
    """Every Markdown table of the collection and the benchmarks goes through markdown_table."""
    rule = re.compile(r"""["']\|-{3}""")
    files = list((ROOT / "collections").rglob("*.py")) + list((ROOT / "benchmarks").rglob("*.py"))
    by_hand = [str(f.relative_to(ROOT)) for f in files if rule.search(f.read_text(encoding="utf-8"))]
    assert by_hand == []
