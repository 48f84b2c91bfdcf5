"""scripts/test_times.py: the stage timings make test prints at the end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test_times.py"

JUNIT = """<testsuites><testsuite>
<testcase classname="tests.unit.test_a" name="test_fast" time="0.2"/>
<testcase classname="tests.lab.test_b" name="test_slow" time="42.5"/>
<testcase classname="tests.lab.test_b" name="test_skipped" time="0.0"><skipped message="no venv"/></testcase>
<testcase classname="tests.lab.test_c" name="test_broken" time="7.0"><failure message="boom">Traceback
  line one
E   assert 3 == 4
E    +  where 3 = len(pods)</failure></testcase>
</testsuite></testsuites>"""


def times(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPECPILOT_TEST_TIMES=str(tmp_path / "times"))
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_run_keeps_the_exit_code_and_records_the_stage(tmp_path):
    assert times(tmp_path, "reset").returncode == 0
    ok = times(tmp_path, "run", "lint", "--", sys.executable, "-c", "pass")
    bad = times(tmp_path, "run", "molecule:deploy", "--", sys.executable, "-c", "raise SystemExit(3)")
    assert ok.returncode == 0 and "lint: ok in 0:0" in ok.stdout
    assert bad.returncode == 3 and "molecule:deploy: FAILED (exit 3)" in bad.stdout
    lines = (tmp_path / "times" / "stages.jsonl").read_text().splitlines()
    assert len(lines) == 2 and '"rc": 3' in lines[1]


def test_report_shows_stages_scenarios_slowest_tests_and_the_closing_counts(tmp_path):
    times(tmp_path, "reset")
    times(tmp_path, "run", "test-lab", "--", sys.executable, "-c", "pass")
    times(tmp_path, "run", "molecule:rollback", "--", sys.executable, "-c", "pass")
    (tmp_path / "times" / "junit" / "test-lab.xml").write_text(JUNIT)
    out = times(tmp_path, "report", "--slowest", "2").stdout
    stages = out.split("Stages", 1)[1].split("Molecule scenarios", 1)[0]
    assert "test-lab" in stages and "total" in stages and "rollback" not in stages
    assert "rollback" in out.split("Molecule scenarios", 1)[1]
    slowest = out.split("slowest tests", 1)[1].split("budget:", 1)[0]
    assert slowest.index("test_slow") < slowest.index("test_broken") and "test_fast" not in slowest
    assert "FAILED   tests.lab.test_c::test_broken" in slowest
    assert "to spare" in out
    # pytest cases and molecule scenarios, the last line, in the form CI reads
    assert out.rstrip().splitlines()[-1] == "tests: 3 passed, 1 failed, 1 skipped"


def test_a_red_run_ends_with_what_failed_and_the_end_of_each_failure(tmp_path):
    times(tmp_path, "reset")
    times(tmp_path, "run", "molecule:rollback", "--", sys.executable, "-c", "raise SystemExit(2)")
    (tmp_path / "times" / "junit" / "lane-b.xml").write_text(JUNIT)
    out = times(tmp_path, "report").stdout
    # after the slowest tests, so the last screen of a CI log names what failed and why
    failed = out.split("What failed", 1)[1].split("budget:", 1)[0]
    assert out.index("slowest tests") < out.index("What failed")
    assert "FAILED tests.lab.test_c::test_broken" in failed
    assert "| E   assert 3 == 4" in failed and "| E    +  where 3 = len(pods)" in failed
    assert "test_slow" not in failed and "test_skipped" not in failed
    assert "FAILED molecule scenario rollback" in failed
    assert out.rstrip().splitlines()[-1] == "tests: 2 passed, 2 failed, 1 skipped"


def test_a_green_run_has_no_failure_section(tmp_path):
    times(tmp_path, "reset")
    times(tmp_path, "run", "molecule:rollback", "--", sys.executable, "-c", "pass")
    assert "What failed" not in times(tmp_path, "report").stdout


def test_usage_errors_are_exit_2(tmp_path):
    assert times(tmp_path, "run", "lint").returncode == 2
    assert times(tmp_path, "frobnicate").returncode == 2


def test_parallel_stages_run_side_by_side_and_print_their_output_whole(tmp_path):
    times(tmp_path, "reset")
    py = sys.executable
    res = times(
        tmp_path,
        "parallel",
        f"slow={py} -c \"import time; print('slow line 1'); time.sleep(1.5); print('slow line 2')\"",
        f"broken={py} -c \"import time; print('broken says why'); time.sleep(1.5); raise SystemExit(5)\"",
    )
    assert res.returncode == 5
    out = res.stdout
    # each stage's output comes out in one piece, after it ended, not interleaved
    slow = out.split("==> slow: its output", 1)[1]
    assert slow.index("slow line 1") < slow.index("slow line 2") < slow.index("==> slow: ok")
    assert "broken says why" in out.split("==> broken: its output", 1)[1]
    report = times(tmp_path, "report").stdout
    stages = report.split("Stages", 1)[1].split("budget:", 1)[0]
    assert "slow" in stages and "FAILED (exit 5)" in stages
    # side by side: the wall clock total is about one stage's 1.5 s, not the sum of both (3 s)
    total = re.search(r"total \(wall clock\)\s+(\d+):(\d\d)", stages)
    assert total and int(total.group(1)) * 60 + int(total.group(2)) <= 2, stages


def test_a_stage_records_the_cpu_time_of_its_whole_process_tree(tmp_path):
    """The CPU column is what balancing the lanes needs: a stage that idles shows about 0 cores, one
    whose grandchild burns CPU shows it (wait4 counts the waited-for descendants). Beside it, the
    machine's busy share while the stage ran (/proc/stat), which counts what wait4 cannot."""
    times(tmp_path, "reset")
    py = sys.executable
    burn = "import time; t = time.process_time(); exec('while time.process_time() - t < 0.6: pass')"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"
    times(tmp_path, "run", "burn", "--", py, "-c", child)
    times(tmp_path, "parallel", f'idle={py} -c "import time; time.sleep(1)"')
    recs = {
        r["name"]: r for r in map(json.loads, (tmp_path / "times" / "stages.jsonl").read_text().splitlines())
    }
    assert recs["burn"]["cpu"] >= 0.6
    assert recs["idle"]["cpu"] < 0.5 and recs["idle"]["seconds"] >= 1
    stages = times(tmp_path, "report").stdout.split("Stages", 1)[1].split("budget:", 1)[0]
    assert "cpu (cores)" in stages and re.search(r"idle .*\(0\.\d\)", stages), stages
    # the burn kept one core full for 0.6 s: the machine was busy at least that share of its cores
    share = 100 * recs["burn"]["cpu"] / (recs["burn"]["seconds"] * os.cpu_count())
    assert share * 0.8 <= recs["burn"]["busy"] <= 100, recs["burn"]
    assert "busy" in stages and re.search(r"burn .*\(\d\.\d\)\s+\d+%", stages), stages


def test_durations_sums_each_test_file_for_the_workers_order(tmp_path):
    """durations OUT: seconds per test file (a class's cases count for its module), longest first;
    tests/conftest.py hands files out to pytest-xdist's workers in that order."""
    times(tmp_path, "reset")
    assert times(tmp_path, "durations", str(tmp_path / "none.json")).returncode == 1  # no JUnit yet
    (tmp_path / "times" / "junit" / "test-unit.xml").write_text("""<testsuites><testsuite>
<testcase classname="tests.unit.test_molecule_queue" name="test_a" time="1.5"/>
<testcase classname="tests.unit.test_test_times" name="test_b" time="2.0"/>
<testcase classname="tests.unit.test_test_times.TestInAClass" name="test_c" time="3.25"/>
<testcase classname="tests.gone.test_removed" name="test_d" time="9.0"/>
</testsuite></testsuites>""")
    out = tmp_path / "durations.json"
    proc = times(tmp_path, "durations", str(out))
    assert proc.returncode == 0 and "2 test files" in proc.stdout, proc.stdout + proc.stderr
    found = json.loads(out.read_text())
    assert list(found.items()) == [
        ("tests/unit/test_test_times.py", 5.2),
        ("tests/unit/test_molecule_queue.py", 1.5),
    ]


def test_workers_get_the_longest_files_first_each_file_kept_whole(monkeypatch, tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "tests_conftest", SCRIPT.parents[1] / "tests" / "conftest.py"
    )
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    (tmp_path / "d.json").write_text(
        json.dumps({"tests/lab/test_long.py": 300, "tests/unit/test_mid.py": 20})
    )
    monkeypatch.setattr(conftest, "FILE_DURATIONS", str(tmp_path / "d.json"))

    class Item:
        def __init__(self, rel, name):
            self.path, self.name = SCRIPT.parents[1] / rel, name

    names = ["tests/unit/test_new.py", "tests/unit/test_mid.py", "tests/lab/test_long.py"]
    items = [Item(rel, "%s-%d" % (rel.rsplit("/", 1)[1], i)) for rel in names for i in range(2)]
    conftest.longest_files_first(items)
    assert [i.name for i in items] == [
        "test_long.py-0",
        "test_long.py-1",
        "test_mid.py-0",
        "test_mid.py-1",
        "test_new.py-0",  # not listed: last, in collection order
        "test_new.py-1",
    ]
