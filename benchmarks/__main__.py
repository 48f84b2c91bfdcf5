"""Run every benchmarks/bench_*.py module and print one table.

    python -m benchmarks                 # all of them
    python -m benchmarks validate        # only modules whose name contains 'validate'

Exit status 1 when a target is missed or a module fails.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT / "collections", ROOT / "lab"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


def discover(selection):
    names = sorted(
        m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name.startswith("bench_")
    )
    return [n for n in names if not selection or any(s in n for s in selection)]


def _fmt(value):
    if isinstance(value, float):
        return "%.3g" % value if abs(value) < 1000 else "%.0f" % value
    return str(value)


def status(row):
    """The table's last column: ``skipped`` for a target that was not measured (its value says
    skipped, its unit why), ``yes`` / ``NO`` for a target met or missed, ``-`` for a figure with
    no target."""
    if row["value"] == "skipped":
        return "skipped"
    if not row.get("target"):
        return "-"
    return "yes" if row["ok"] else "NO"


def main(argv=None):
    selection = list(argv if argv is not None else sys.argv[1:])
    rows, failures = [], []
    for name in discover(selection):
        started = time.perf_counter()
        print("==> %s" % name, flush=True)
        try:
            module = importlib.import_module("benchmarks." + name)
            result = module.run()
        except Exception:  # noqa: BLE001 - one broken module must not hide the others
            failures.append(name)
            traceback.print_exc()
            continue
        for row in result:
            rows.append(dict(row, module=name))
        print("    %d result(s) in %.1f s" % (len(result), time.perf_counter() - started), flush=True)
    if rows:
        width = max(len(r["name"]) for r in rows)
        uwidth = max(len(str(r["unit"])) for r in rows)
        print()
        print("%-*s  %12s  %-*s  %-16s  %s" % (width, "benchmark", "value", uwidth, "unit", "target", "ok"))
        print("-" * (width + uwidth + 40))
        for r in rows:
            print(
                "%-*s  %12s  %-*s  %-16s  %s"
                % (
                    width,
                    r["name"],
                    _fmt(r["value"]),
                    uwidth,
                    r["unit"],
                    r.get("target") or "-",
                    status(r),
                )
            )
    missed = [r["name"] for r in rows if status(r) == "NO"]
    skipped = ["%s (%s)" % (r["name"], r.get("note") or r["unit"]) for r in rows if status(r) == "skipped"]
    if skipped:
        print("\ntargets not measured: %s" % "; ".join(skipped))
    if failures:
        print("\nbenchmark modules that failed: %s" % ", ".join(failures))
    if missed:
        print("\ntargets missed: %s" % ", ".join(missed))
    return 1 if failures or missed else 0


if __name__ == "__main__":
    sys.exit(main())
