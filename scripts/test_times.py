#!/usr/bin/env python3
"""Time the stages of ``make test`` and print where the time went.

Usage:
  test_times.py reset
  test_times.py run NAME -- COMMAND [ARG ...]   run COMMAND, record its wall time and exit code
  test_times.py report [--slowest 15]           print the table (stages, molecule scenarios,
                                                 slowest tests from the pytest JUnit files)

Records go to ``$SPECPILOT_TEST_TIMES`` (default ``.cache/test-times``): ``stages.jsonl`` (one
line a timed command) and ``junit/*.xml`` (the pytest stages write there). A name of the form
``molecule:SCENARIO`` is a molecule scenario, shown under its own heading. The table is printed
even when a stage failed, so a red run still says where its time went.

Only the standard library: this runs before ``.venv`` exists (the install stage is timed too).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMES = Path(os.environ.get("SPECPILOT_TEST_TIMES", ROOT / ".cache" / "test-times"))
BUDGET_S = 35 * 60  # CONTRIBUTING.md: make test on 2 cores from a clean clone


def _stages_file() -> Path:
    return TIMES / "stages.jsonl"


def reset() -> int:
    shutil.rmtree(TIMES, ignore_errors=True)
    (TIMES / "junit").mkdir(parents=True)
    return 0


def run(name: str, command: list[str]) -> int:
    """Run command, append {name, seconds, rc} to stages.jsonl, return its exit code."""
    TIMES.mkdir(parents=True, exist_ok=True)
    print(f"==> [{time.strftime('%H:%M:%S')}] {name}: {' '.join(command)}", flush=True)
    t0 = time.monotonic()
    try:
        rc = subprocess.call(command)
    except KeyboardInterrupt:
        rc = 130
    seconds = time.monotonic() - t0
    with _stages_file().open("a") as fh:
        fh.write(json.dumps({"name": name, "seconds": round(seconds, 1), "rc": rc}) + "\n")
    print(f"==> {name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {_clock(seconds)}", flush=True)
    return rc


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m:d}:{s:02d}"


def _records() -> list[dict]:
    path = _stages_file()
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def slowest_tests(junit_dir: Path, count: int) -> list[tuple[float, str, str]]:
    """(seconds, test id, outcome) of the slowest test cases in every JUnit file of junit_dir."""
    cases = []
    for xml in sorted(junit_dir.glob("*.xml")):
        try:
            tree = ET.parse(xml)
        except ET.ParseError:
            continue
        for case in tree.iter("testcase"):
            outcome = "passed"
            for tag in ("failure", "error", "skipped"):
                if case.find(tag) is not None:
                    outcome = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[tag]
            test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
            cases.append((float(case.get("time") or 0.0), test_id, outcome))
    cases.sort(reverse=True)
    return cases[:count]


def _table(title: str, rows: list[tuple[str, str, str]]) -> list[str]:
    if not rows:
        return []
    width = max(len(r[0]) for r in rows)
    lines = [f"{title}", f"  {'':{width}}  {'wall':>7}  result"]
    lines += [f"  {name:{width}}  {wall:>7}  {result}" for name, wall, result in rows]
    return lines + [""]


def report(count: int) -> int:
    records = _records()
    stages = [r for r in records if not r["name"].startswith("molecule:")]
    scenarios = [r for r in records if r["name"].startswith("molecule:")]

    def row(r: dict) -> tuple[str, str, str]:
        return (r["name"], _clock(r["seconds"]), "ok" if r["rc"] == 0 else f"FAILED (exit {r['rc']})")

    total = sum(r["seconds"] for r in stages)
    lines = ["", "=" * 78, "make test: where the time went", ""]
    lines += _table("Stages", [row(r) for r in stages] + [("total", _clock(total), "")])
    lines += _table(
        "Molecule scenarios (inside the molecule stage)",
        [(r["name"].split(":", 1)[1], _clock(r["seconds"]), row(r)[2]) for r in scenarios],
    )
    slow = slowest_tests(TIMES / "junit", count)
    if slow:
        lines.append(f"The {len(slow)} slowest tests (pytest durations, setup included in the first test of a fixture)")
        lines += [f"  {s:7.1f}s  {outcome:7}  {test_id}" for s, test_id, outcome in slow]
        lines.append("")
    over = total - BUDGET_S
    lines.append(
        f"budget: {_clock(BUDGET_S)} on 2 cores from a clean clone; this run {_clock(total)}"
        + (f", OVER by {_clock(over)}" if over > 0 else f", {_clock(-over)} to spare")
    )
    lines.append("=" * 78)
    print("\n".join(lines), flush=True)
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "reset":
        return reset()
    if cmd == "run":
        if len(rest) < 3 or rest[1] != "--":
            print("usage: test_times.py run NAME -- COMMAND [ARG ...]", file=sys.stderr)
            return 2
        return run(rest[0], rest[2:])
    if cmd == "report":
        count = int(rest[1]) if len(rest) == 2 and rest[0] == "--slowest" else 15
        return report(count)
    print(f"unknown command {cmd!r}: reset, run or report", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
