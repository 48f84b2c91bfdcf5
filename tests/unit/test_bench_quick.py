"""Every benchmark module runs in quick mode (``python -m benchmarks --quick``: tiny sizes, one run,
targets not judged), so that a product change that breaks a benchmark fails ``make test``; and the
runner stops whatever a module left running, failed or not."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

import benchmarks
import benchmarks.__main__ as bench

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module", bench.discover([]))
def test_each_benchmark_module_runs_in_quick_mode(module, tmp_path):
    if module == "bench_parsers":
        from benchmarks import bench_parsers

        if not (bench_parsers.CPU_RUN / "server.log").is_file():  # as the reference-log tests do, said not silent
            pytest.skip(f"reference logs missing: {bench_parsers.CPU_RUN / 'server.log'} (../shared/reference)")
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.pop("SPECPILOT_MODEL_FACTS", None)  # the suite's "off": bench_validate sets its own
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", module],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "benchmark modules that failed" not in out and "quick mode: tiny sizes" in out
    results = int(out.split("==> %s\n" % module, 1)[1].split(" result(s)", 1)[0].strip())
    assert results >= 1, out[-3000:]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("specpilot-", "sp-bench", "bench-"))]


def test_quick_mode_takes_the_quick_values_unless_a_variable_says_otherwise(monkeypatch):
    monkeypatch.delenv(benchmarks.QUICK_ENV, raising=False)
    monkeypatch.delenv("SPECPILOT_BENCH_X", raising=False)
    assert benchmarks.setting("SPECPILOT_BENCH_X", 256, 2) == 256
    monkeypatch.setenv(benchmarks.QUICK_ENV, "1")
    assert benchmarks.quick() and benchmarks.setting("SPECPILOT_BENCH_X", 256, 2) == 2
    monkeypatch.setenv("SPECPILOT_BENCH_X", "7")
    assert benchmarks.setting("SPECPILOT_BENCH_X", 256, 2) == 7


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _fake_module(monkeypatch, run):
    monkeypatch.setenv(benchmarks.QUICK_ENV, "0")  # main(["--quick"]) sets it: restored after the test
    monkeypatch.setattr(bench, "GRACE_S", 0.5)
    monkeypatch.setattr(bench, "SETTLE_S", 0.3)
    fake = types.ModuleType("benchmarks.bench_fake")
    fake.run = run
    monkeypatch.setitem(sys.modules, "benchmarks.bench_fake", fake)
    monkeypatch.setattr(bench, "discover", lambda selection: ["bench_fake"])


@pytest.mark.parametrize("fails", [True, False])
def test_the_processes_a_module_leaves_running_are_stopped_and_fail_it(monkeypatch, capsys, tmp_path, fails):
    """A module that raises (bench_staging once left 7 docker-registry processes) or that returns
    with processes still running: the runner stops them (a child in its own session and a grandchild
    that ignores SIGTERM too) and names the module as failed."""
    started = []

    def run():
        pidfile = tmp_path / "grandchild"
        child = subprocess.Popen(
            ["sh", "-c", "trap '' TERM; sleep 300 & echo $! > %s; wait" % pidfile], start_new_session=True
        )
        started.append(child.pid)
        deadline = time.monotonic() + 10
        while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        started.append(int(pidfile.read_text()))
        comm = Path("/proc/%d/comm" % started[-1])
        while comm.read_text().strip() != "sleep" and time.monotonic() < deadline:
            time.sleep(0.05)  # forked, not yet exec'd
        if fails:
            raise RuntimeError("the benchmark broke")
        return [{"name": "figure", "value": 1.0, "unit": "s", "target": "", "ok": True}]

    _fake_module(monkeypatch, run)
    assert bench.main(["--quick"]) == 1
    captured = capsys.readouterr()
    assert "benchmark modules that failed: bench_fake" in captured.out
    assert "left 2 process(es) running, stopped now: sh x1, sleep x1" in captured.err
    assert ("the benchmark broke" in captured.err) is fails
    assert started and not any(_alive(pid) for pid in started)


def test_a_module_that_stops_what_it_started_passes(monkeypatch, capsys):
    def run():
        subprocess.run(["sleep", "0.01"], check=True)
        return [{"name": "figure", "value": 1.0, "unit": "s", "target": "< 0.5", "ok": False}]

    _fake_module(monkeypatch, run)
    assert bench.main(["--quick"]) == 0  # quick mode: a missed target is not judged
    assert bench.main([]) == 1  # the full run judges it
    assert "left" not in capsys.readouterr().err
