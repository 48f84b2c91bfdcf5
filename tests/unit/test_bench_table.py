"""make bench's table (benchmarks/__main__.py): a target that was not measured says skipped, not yes."""

from __future__ import annotations

import sys
import types

import benchmarks.__main__ as bench


def test_a_skipped_target_says_skipped_and_is_neither_met_nor_missed(monkeypatch, capsys):
    rows = [
        {"name": "met", "value": 1.0, "unit": "s", "target": "<= 2", "ok": True},
        {"name": "missed", "value": 3.0, "unit": "s", "target": "<= 2", "ok": False},
        {"name": "podman", "value": "skipped", "unit": "podman not installed", "target": ">= 3", "ok": True},
        {"name": "figure", "value": 0.5, "unit": "s", "target": "", "ok": True},
    ]
    fake = types.ModuleType("benchmarks.bench_fake")
    fake.run = lambda: rows
    monkeypatch.setitem(sys.modules, "benchmarks.bench_fake", fake)
    monkeypatch.setattr(bench, "discover", lambda selection: ["bench_fake"])
    assert bench.main([]) == 1  # one target missed
    out = capsys.readouterr().out
    table = {
        line.split()[0]: line.split()[-1] for line in out.splitlines() if line[:1] in "mpf" and "  " in line
    }
    assert table == {"met": "yes", "missed": "NO", "podman": "skipped", "figure": "-"}
    assert "targets missed: missed" in out and "targets not measured: podman (podman not installed)" in out
    assert [bench.status(r) for r in rows] == ["yes", "NO", "skipped", "-"]
