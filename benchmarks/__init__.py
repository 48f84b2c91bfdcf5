"""specpilot benchmarks: ``python -m benchmarks`` (``make bench``) runs every ``bench_*.py``.

Contract of a benchmark module: ``run() -> list[dict(name, value, unit, target, ok)]``
where ``target`` is a short text (e.g. "< 50") and ``ok`` says whether it is met.

Quick mode (``python -m benchmarks --quick``, what ``make test`` runs: tests/unit/test_bench_quick.py)
sets ``SPECPILOT_BENCH_QUICK=1``: every module runs once at tiny sizes (``setting``'s quick value,
unless the variable is set) and skips what needs a vLLM engine, so that a product change that breaks
a benchmark fails CI; its figures mean nothing and its targets are not judged.
"""

from __future__ import annotations

import os

QUICK_ENV = "SPECPILOT_BENCH_QUICK"


def quick() -> bool:
    """Whether the benchmarks run in quick mode (tiny sizes, one run, targets not judged)."""
    return os.environ.get(QUICK_ENV) == "1"


def setting(name: str, default: int, quick_value: int) -> int:
    """An integer setting of a benchmark: $name when set, else quick_value in quick mode, else default."""
    value = os.environ.get(name)
    if value:
        return int(value)
    return quick_value if quick() else default
