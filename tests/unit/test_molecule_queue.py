"""scripts/molecule_queue.py: the molecule scenarios make test's two lanes share."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "molecule_queue.py"


def queue(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_every_scenario_once_the_named_ones_first_then_empty(tmp_path):
    mol = tmp_path / "molecule"
    for name in ("zeta", "alpha", "slow", "shared_files"):
        (mol / name).mkdir(parents=True)
    for name in ("zeta", "alpha", "slow"):
        (mol / name / "molecule.yml").write_text("---\n")
    q = tmp_path / "q"
    assert queue("init", str(q), str(mol), "slow", "gone").returncode == 0
    taken = []
    while (out := queue("next", str(q))).returncode == 0:
        taken.append(out.stdout.strip())
    assert out.returncode == 1 and taken == ["slow", "alpha", "zeta"]


def test_two_lanes_taking_at_once_never_get_the_same_scenario(tmp_path):
    mol = tmp_path / "molecule"
    names = [f"s{i:02d}" for i in range(24)]
    for name in names:
        (mol / name).mkdir(parents=True)
        (mol / name / "molecule.yml").write_text("---\n")
    q = tmp_path / "q"
    queue("init", str(q), str(mol))

    def lane(_):
        got = []
        while (out := queue("next", str(q))).returncode == 0:
            got.append(out.stdout.strip())
        return got

    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(lane, range(2))
    assert sorted(a + b) == names and not set(a) & set(b)


def test_usage_is_refused():
    assert queue("pop").returncode == 2
