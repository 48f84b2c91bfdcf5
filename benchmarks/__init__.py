"""specpilot benchmarks: ``python -m benchmarks`` (``make bench``) runs every ``bench_*.py``.

Contract of a benchmark module: ``run() -> list[dict(name, value, unit, target, ok)]``
where ``target`` is a short text (e.g. "< 50") and ``ok`` says whether it is met.
"""
