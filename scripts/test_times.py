#!/usr/bin/env python3
"""Time the stages of ``make test`` and print where the time went.

Usage:
  test_times.py reset
  test_times.py run NAME -- COMMAND [ARG ...]   run COMMAND, record its wall time, CPU time and
                                                 exit code
  test_times.py parallel NAME=COMMAND ...       run the COMMANDs (shell lines) side by side, each
                                                 recorded as a stage; each one's output goes to
                                                 logs/NAME.log and is printed whole when it ends,
                                                 with a progress line a minute meanwhile
  test_times.py report [--slowest 15]           print the table (stages, molecule scenarios,
                                                 slowest tests from the pytest JUnit files)
  test_times.py durations OUT                   write the seconds of each test file (from the
                                                 JUnit files) to OUT, JSON: what the tests'
                                                 conftest.py reads to hand the longest files out
                                                 first to pytest-xdist's workers

Records go to ``$SPECPILOT_TEST_TIMES`` (default ``.cache/test-times``): ``stages.jsonl`` (one
line a timed command) and ``junit/*.xml`` (the pytest stages write there). A name of the form
``molecule:SCENARIO`` is a molecule scenario, shown under its own heading. The table is printed
even when a stage failed, so a red run still says where its time went. A stage's CPU time is
its process tree's (user + system, from ``wait4``), and ``cores`` is CPU over wall time: how many
of the cores the stage kept busy on average, which is what balancing side-by-side stages needs.
``wait4`` misses what the tree did not wait for (a daemon, an engine reaped by init), so ``busy``
adds the whole machine's share of busy CPU while the stage ran (``/proc/stat``): near 100% means
the cores were full, and running more side by side would only slow each stage down.

Only the standard library: this runs before ``.venv`` exists (the install stage is timed too).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMES = Path(os.environ.get("SPECPILOT_TEST_TIMES", ROOT / ".cache" / "test-times"))
BUDGET_S = 35 * 60  # CONTRIBUTING.md: make test on 2 cores from a clean clone
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # colours in molecule's output


def _stages_file() -> Path:
    return TIMES / "stages.jsonl"


def reset() -> int:
    shutil.rmtree(TIMES, ignore_errors=True)
    (TIMES / "junit").mkdir(parents=True)
    return 0


def machine_cpu() -> tuple[int, int] | None:
    """(busy, all) clock ticks of every core since boot (/proc/stat's first line); None without it."""
    try:
        with open("/proc/stat") as fh:
            ticks = [int(x) for x in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    if len(ticks) < 5:
        return None
    # user nice system idle iowait irq softirq steal (guest time is inside user)
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def _busy(since: tuple[int, int] | None) -> float | None:
    """The machine's share of busy CPU since the machine_cpu() reading since, in percent."""
    now = machine_cpu()
    if since is None or now is None or now[1] <= since[1]:
        return None
    return 100.0 * (now[0] - since[0]) / (now[1] - since[1])


def _record(
    name: str, start: float, rc: int, cpu: float | None = None, machine: tuple[int, int] | None = None
) -> None:
    """Append one stage (wall clock start, seconds, CPU seconds, the machine's busy share, exit
    code) to stages.jsonl."""
    TIMES.mkdir(parents=True, exist_ok=True)
    seconds = time.time() - start
    rec = {"name": name, "start": round(start, 1), "seconds": round(seconds, 1), "rc": rc}
    if cpu is not None:
        rec["cpu"] = round(cpu, 1)
    busy = _busy(machine)
    if busy is not None:
        rec["busy"] = round(busy)
    with _stages_file().open("a") as fh:
        fh.write(json.dumps(rec) + "\n")
    print(f"==> {name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {_clock(seconds)}", flush=True)


def _reap(proc: subprocess.Popen, block: bool) -> tuple[int, float] | None:
    """(exit code, CPU seconds of its whole tree) once proc ended; None while it runs (block=False)."""
    pid, status, usage = os.wait4(proc.pid, 0 if block else os.WNOHANG)
    if pid == 0:
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime


def run(name: str, command: list[str]) -> int:
    """Run command, record it as a stage, return its exit code."""
    print(f"==> [{time.strftime('%H:%M:%S')}] {name}: {' '.join(command)}", flush=True)
    start, machine = time.time(), machine_cpu()
    proc = subprocess.Popen(command)
    try:
        rc, cpu = _reap(proc, block=True)
    except KeyboardInterrupt:
        rc, cpu = 130, None
    _record(name, start, rc, cpu, machine)
    return rc


def _last_line(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - 400))
            tail = fh.read().decode(errors="replace").replace("\r", "\n").strip().splitlines()
    except OSError:
        return ""
    lines = [ANSI.sub("", line).strip(" \u2502*") for line in tail]
    lines = [line for line in lines if line]
    return lines[-1][-100:] if lines else ""


def parallel(stages: list[tuple[str, str]], heartbeat: float = 60.0) -> int:
    """Run (name, shell line) stages side by side; 0 when all passed, else the first failure's code."""
    logs = TIMES / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    running = {}
    for name, line in stages:
        print(
            f"==> [{time.strftime('%H:%M:%S')}] {name} (side by side; output in {logs / name}.log): {line}",
            flush=True,
        )
        fh = (logs / f"{name}.log").open("w")
        proc = subprocess.Popen(line, shell=True, stdout=fh, stderr=subprocess.STDOUT)
        running[name] = (proc, fh, time.time(), machine_cpu())
    status, beat = 0, time.monotonic()
    while running:
        time.sleep(1)
        for name, (proc, fh, start, machine) in list(running.items()):
            ended = _reap(proc, block=False)
            if ended is None:
                continue
            fh.close()
            del running[name]
            print(
                f"\n==> {name}: its output\n" + (logs / f"{name}.log").read_text(errors="replace"), flush=True
            )
            _record(name, start, *ended, machine)
            status = status or ended[0]
        if running and time.monotonic() - beat >= heartbeat:
            beat = time.monotonic()
            for name, (_, _, start, _) in running.items():
                print(
                    f"... [{time.strftime('%H:%M:%S')}] {name} running for {_clock(time.time() - start)}: "
                    f"{_last_line(logs / f'{name}.log')}",
                    flush=True,
                )
    return status


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m:d}:{s:02d}"


def _records() -> list[dict]:
    path = _stages_file()
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _junit_cases(junit_dir: Path):
    """Every <testcase> element of the JUnit files of junit_dir, with its test id."""
    for xml in sorted(junit_dir.glob("*.xml")):
        try:
            tree = ET.parse(xml)
        except ET.ParseError:
            continue
        for case in tree.iter("testcase"):
            yield case, f"{case.get('classname', '')}::{case.get('name', '')}"


def test_cases(junit_dir: Path) -> list[tuple[float, str, str]]:
    """(seconds, test id, outcome) of every test case in the JUnit files of junit_dir."""
    cases = []
    for case, test_id in _junit_cases(junit_dir):
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[tag]
        cases.append((float(case.get("time") or 0.0), test_id, outcome))
    return cases


def failures(junit_dir: Path, lines: int = 6) -> list[tuple[str, list[str]]]:
    """(test id, the last ``lines`` lines of its failure or error text) of each failed test case:
    the end of a pytest traceback is the assertion and its message, which is what a reader of a
    red CI run's last screen needs first."""
    out = []
    for case, test_id in _junit_cases(junit_dir):
        bad = case.find("failure")
        bad = bad if bad is not None else case.find("error")
        if bad is None:
            continue
        text = (bad.text or bad.get("message") or "").rstrip().splitlines()
        out.append((test_id, [t[:160] for t in text[-lines:]]))
    return out


def _failed_lines(junit_dir: Path, scenarios: list[dict]) -> list[str]:
    """The closing section of a red run: what failed, last, so a log's tail shows it."""
    found = failures(junit_dir)
    bad = [r["name"].split(":", 1)[1] for r in scenarios if r["rc"] != 0]
    if not found and not bad:
        return []
    lines = ["What failed (the end of each failure; the stage logs above have the whole of it)"]
    for test_id, text in found:
        lines += [f"  FAILED {test_id}"] + [f"    | {t}" for t in text]
    lines += [f"  FAILED molecule scenario {name} (logs/lane-*.log)" for name in bad]
    return lines + [""]


def file_durations(cases: list[tuple[float, str, str]]) -> dict[str, float]:
    """{tests/.../test_x.py: seconds} summed over the cases (JUnit's classname is the module's dotted
    path, with the class appended for tests in a class)."""
    out: dict[str, float] = {}
    for seconds, test_id, _ in cases:
        parts = test_id.split("::", 1)[0].split(".")
        while parts and not (ROOT / Path(*parts)).with_suffix(".py").is_file():
            parts = parts[:-1]  # a class inside the module
        if parts:
            key = Path(*parts).with_suffix(".py").as_posix()
            out[key] = round(out.get(key, 0.0) + seconds, 1)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def durations(out: Path) -> int:
    found = file_durations(test_cases(TIMES / "junit"))
    if not found:
        print(f"no JUnit files with test cases under {TIMES / 'junit'}: run make test first", file=sys.stderr)
        return 1
    out.write_text(json.dumps(found, indent=1) + "\n")
    print(f"{len(found)} test files, {sum(found.values()):.0f} s in all -> {out}")
    return 0


def counts(cases: list[tuple[float, str, str]], scenarios: list[dict]) -> dict[str, int]:
    """passed / failed / skipped over the pytest cases and the molecule scenarios."""
    out = {"passed": 0, "failed": 0, "skipped": 0}
    for _, _, outcome in cases:
        out[{"passed": "passed", "skipped": "skipped"}.get(outcome, "failed")] += 1
    for r in scenarios:
        out["passed" if r["rc"] == 0 else "failed"] += 1
    return out


def _table(title: str, rows: list[tuple[str, str, str]], cpu: list[str] | None = None) -> list[str]:
    if not rows:
        return []
    width = max(len(r[0]) for r in rows)
    cpu = cpu or [""] * len(rows)
    cw = max([len(c) for c in cpu] + [0])
    head = f"  {'cpu (cores) busy':>{cw}}" if cw else ""
    lines = [f"{title}", f"  {'':{width}}  {'wall':>7}{head}  result"]
    lines += [
        f"  {name:{width}}  {wall:>7}" + (f"  {c:>{cw}}" if cw else "") + f"  {result}"
        for (name, wall, result), c in zip(rows, cpu)
    ]
    return lines + [""]


def _cpu(r: dict) -> str:
    """``CPU (cores) busy`` of a record: its CPU time, the cores it kept busy on average, and the
    machine's share of busy CPU meanwhile (whoever used it)."""
    if r.get("cpu") is None:
        return ""
    busy = f"{r['busy']:>4}%" if r.get("busy") is not None else "    ?"
    return f"{_clock(r['cpu'])} ({r['cpu'] / max(r['seconds'], 0.1):.1f}) {busy}"


def report(count: int) -> int:
    records = _records()
    stages = [r for r in records if not r["name"].startswith("molecule:")]
    scenarios = [r for r in records if r["name"].startswith("molecule:")]

    # every record has its wall-clock start (_record): side-by-side stages overlap, so the total is
    # first start to last end, not the sum
    t0 = min((r["start"] for r in stages), default=0.0)
    total = max((r["start"] + r["seconds"] for r in stages), default=0.0) - t0

    def result(r: dict) -> str:
        return "ok" if r["rc"] == 0 else f"FAILED (exit {r['rc']})"

    lines = ["", "=" * 78, "make test: where the time went", ""]
    lines += _table(
        "Stages (start offset; side-by-side stages share one)",
        [(f"{r['name']:<14} at {_clock(r['start'] - t0)}", _clock(r["seconds"]), result(r)) for r in stages]
        + [("total (wall clock)", _clock(total), "")],
        [_cpu(r) for r in stages] + [""],
    )
    lines += _table(
        "Molecule scenarios (inside the lanes)",
        [(r["name"].split(":", 1)[1], _clock(r["seconds"]), result(r)) for r in scenarios],
        [_cpu(r) for r in scenarios],
    )
    cases = test_cases(TIMES / "junit")
    slow = sorted(cases, reverse=True)[:count]
    if slow:
        lines.append(
            f"The {len(slow)} slowest tests (pytest durations, setup included in the first test of a fixture)"
        )
        lines += [f"  {s:7.1f}s  {outcome:7}  {test_id}" for s, test_id, outcome in slow]
        lines.append("")
    lines += _failed_lines(TIMES / "junit", scenarios)
    over = total - BUDGET_S
    lines.append(
        f"budget: {_clock(BUDGET_S)} on 2 cores from a clean clone; this run {_clock(total)}"
        + (f", OVER by {_clock(over)}" if over > 0 else f", {_clock(-over)} to spare")
    )
    lines.append("=" * 78)
    n = counts(cases, scenarios)
    # the plain closing line CI reads: pytest cases and molecule scenarios together
    lines.append(f"tests: {n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped")
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
    if cmd == "parallel":
        pairs = [arg.split("=", 1) for arg in rest]
        if not pairs or any(len(p) != 2 or not p[0] for p in pairs):
            print("usage: test_times.py parallel NAME=COMMAND ...", file=sys.stderr)
            return 2
        return parallel([(name, line) for name, line in pairs])
    if cmd == "report":
        count = int(rest[1]) if len(rest) == 2 and rest[0] == "--slowest" else 15
        return report(count)
    if cmd == "durations" and len(rest) == 1:
        return durations(Path(rest[0]))
    print(f"unknown command {cmd!r}: reset, run, parallel, report or durations OUT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
