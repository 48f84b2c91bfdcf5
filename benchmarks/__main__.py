"""Run every benchmarks/bench_*.py module and print one table.

    python -m benchmarks                 # all of them
    python -m benchmarks validate        # only modules whose name contains 'validate'
    python -m benchmarks --quick         # each module once at tiny sizes, targets not judged (make test)

Exit status 1 when a target is missed (not in quick mode) or a module fails. A module fails when it
raises, and when it leaves a process running: after each module, whatever it started and did not
stop (its children and theirs; orphans too, since the runner is their subreaper) is stopped
(SIGTERM, then SIGKILL) and named.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import pkgutil
import signal
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT / "collections", ROOT / "lab"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
GRACE_S = 5.0  # between SIGTERM and SIGKILL
SETTLE_S = 5.0  # for what is already on its way out (a process just sent SIGKILL, a worker shutting down)


def become_subreaper():
    """Orphans of the benchmarks' processes (a daemon that forked away) become this process's
    children, so that stop_leftovers finds them (Linux; elsewhere nothing happens)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _proc_table(zombies=False):
    """{pid: (ppid, command name)} of the live processes (and the zombies with ``zombies``), from /proc."""
    table = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as handle:
                stat = handle.read()
        except OSError:
            continue
        name, rest = stat[stat.find("(") + 1 : stat.rfind(")")], stat[stat.rfind(")") + 2 :].split()
        if rest and (zombies or rest[0] != "Z"):
            table[int(entry)] = (int(rest[1]), name)
    return table


def descendants(root=None):
    """{pid: command name} of every live process below ``root`` (default: this one)."""
    table = _proc_table()
    found, frontier = {}, {os.getpid() if root is None else root}
    while frontier:
        frontier = {pid for pid, (ppid, _n) in table.items() if ppid in frontier and pid not in found}
        found.update((pid, table[pid][1]) for pid in frontier)
    return found


def _reap(pids):
    """Collect the exit status of those of ``pids`` that are this process's dead children (no
    zombie stays behind; other children are left to whoever waits for them)."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def _running(pids):
    """Those of ``pids`` that still run (gone and zombies are not), whoever their parent is now: a process
    whose parent was killed first is reparented while it dies, and is no longer a descendant."""
    table = _proc_table()
    return {pid for pid in pids if pid in table}


def _new(before):
    return {pid: name for pid, name in descendants().items() if pid not in before}


def stop_leftovers(before, grace=None):
    """Stop the processes below this one that were not there in ``before`` and are still running
    SETTLE_S seconds later (SIGTERM, then SIGKILL after ``grace`` seconds, GRACE_S by default);
    their names."""
    grace = GRACE_S if grace is None else grace
    left = _new(before)
    deadline = time.monotonic() + SETTLE_S
    while left and time.monotonic() < deadline:
        _reap(left)
        time.sleep(0.1)
        left = _new(before)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = _running(left)
        for pid in alive:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while alive and time.monotonic() < deadline:
            _reap(alive)
            alive = _running(alive)
            time.sleep(0.05)
        if not alive:
            break
    me = os.getpid()
    _reap(pid for pid, (ppid, _n) in _proc_table(zombies=True).items() if ppid == me and pid not in before)
    return sorted(left.values())


def run_module(name):
    """(rows, problem) of one module; problem is None, a traceback, or the processes it left running
    (stopped here)."""
    before = set(_proc_table(zombies=True))  # every process there was, zombies too: not the module's
    rows, problem = [], None
    try:
        module = importlib.import_module("benchmarks." + name)
        rows = module.run()
    except Exception:  # noqa: BLE001 - one broken module must not hide the others
        problem = traceback.format_exc()
    finally:
        left = stop_leftovers(before)
    if left:
        counts = {n: left.count(n) for n in left}
        problem = (problem or "") + "left %d process(es) running, stopped now: %s" % (
            len(left),
            ", ".join("%s x%d" % item for item in sorted(counts.items())),
        )
    return rows, problem


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
    args = list(argv if argv is not None else sys.argv[1:])
    quick = "--quick" in args
    selection = [a for a in args if a != "--quick"]
    if quick:
        os.environ["SPECPILOT_BENCH_QUICK"] = "1"  # read by the modules when they are imported
    rows, failures = [], []
    for name in discover(selection):
        started = time.perf_counter()
        print("==> %s" % name, flush=True)
        result, problem = run_module(name)
        if problem:
            failures.append(name)
            print(problem, file=sys.stderr, flush=True)
        for row in result:
            rows.append(dict(row, module=name))
        print("    %d result(s) in %.1f s" % (len(result), time.perf_counter() - started), flush=True)
    _table(rows)
    missed = [r["name"] for r in rows if status(r) == "NO"]
    skipped = ["%s (%s)" % (r["name"], r.get("note") or r["unit"]) for r in rows if status(r) == "skipped"]
    if skipped:
        print("\ntargets not measured: %s" % "; ".join(skipped))
    if failures:
        print("\nbenchmark modules that failed: %s" % ", ".join(failures))
    if missed:
        print("\ntargets missed: %s" % ", ".join(missed))
    if quick:
        print("\nquick mode: tiny sizes, one run; the figures mean nothing and the targets are not judged")
        return 1 if failures else 0
    return 1 if failures or missed else 0


def _table(rows):
    if not rows:
        return
    width = max(len(r["name"]) for r in rows)
    uwidth = max(len(str(r["unit"])) for r in rows)
    print()
    print("%-*s  %12s  %-*s  %-16s  %s" % (width, "benchmark", "value", uwidth, "unit", "target", "ok"))
    print("-" * (width + uwidth + 40))
    for r in rows:
        print(
            "%-*s  %12s  %-*s  %-16s  %s"
            % (width, r["name"], _fmt(r["value"]), uwidth, r["unit"], r.get("target") or "-", status(r))
        )


if __name__ == "__main__":
    become_subreaper()
    sys.exit(main())
