# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The one way a report writes a Markdown table: :func:`markdown_table`, through tabulate.

Every report of the collection (smoke, benchmark, tuning, schedule, canary, rollback, guard) and the
benchmarks' own tables render theirs here, in GitHub-flavoured Markdown (tabulate's ``github`` format):
a header row, a ``|---|`` rule, one line a row, the columns padded to one width so that the Markdown
reads as a table in a terminal too (it renders the same in a viewer).

The cells are the caller's text: each becomes ``str`` (``None`` an empty cell) and is written as it is,
never read as a number (``disable_numparse``: ``0.50`` stays ``0.50``, ``1.08x [1.04-1.13]`` stays text).
Escaping is the caller's too: a ``|`` inside a cell must come escaped (``\\|``) and line breaks as
``<br>``, as the reports' ``md_escape`` helpers do; :func:`markdown_table` refuses a raw line break, which
would cut the row in two.
"""

from __future__ import annotations

__all__ = ["markdown_table"]


def _cell(value) -> str:
    text = "" if value is None else str(value)
    if "\n" in text or "\r" in text:
        raise ValueError("a Markdown table cell holds a line break (write <br>): %r" % text)
    return text


def markdown_table(headers, rows) -> list:
    """The lines of a GitHub-flavoured Markdown table: the header, its rule, then one line a row.

    ``headers`` is a sequence of column titles, ``rows`` an iterable of sequences of cells, each row as
    long as ``headers``.
    """
    try:
        from tabulate import (
            tabulate,
        )  # requirements.txt; imported here so that a playbook that writes no report never loads it
    except ImportError as exc:  # pragma: no cover - the collection's requirements.txt lists it
        raise ImportError(
            "specpilot.core's reports need the Python package tabulate (the collection's requirements.txt): %s"
            % exc
        ) from exc
    head = [_cell(h) for h in headers]
    body = []
    for row in rows:
        cells = [_cell(c) for c in row]
        if len(cells) != len(head):
            raise ValueError(
                "a Markdown table row has %d cells for %d columns: %r" % (len(cells), len(head), cells)
            )
        body.append(cells)
    return tabulate(body, headers=head, tablefmt="github", disable_numparse=True).splitlines()
