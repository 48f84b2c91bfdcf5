"""Issue 40: the guard run as AWX job slices gives what one run gives. The same services in two
namespaces of the API emulator: one guard run over the first, three slices over the second (AWX's
partition: the hosts by name, slice n takes hosts[n-1::3], run at once, each its own ansible-playbook
with --limit). The verdicts, the history each service keeps and the fleet summary that
playbooks/fleet_report.yml merges from the slices' set_stats (as AWX hands them on: dict.update) are
those of the single run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from ansible_collections.specpilot.core.plugins.filter import fleet as fleet_filter

import guard_support as gs
import vllm_pages as vp

pytestmark = [pytest.mark.slow]

SERVICES = ["dropped", "ghost", "gone", "healthy", "idle", "low", "plain"]
SLICES = 3
CALLBACKS = gs.ROOT / "tests" / "data" / "callback"
FLEET_PLAYBOOK = gs.ROOT / "playbooks" / "fleet_report.yml"
# what a guard verdict is; not the namespace, the message (it names the report's path) or the history's times
VERDICT_KEYS = ("host", "name", "status", "action", "streak", "rolled_back", "acceptance_rate",
                "mean_acceptance_length", "per_position", "drafted", "accepted", "findings", "error", "method",
                "num_speculative_tokens", "source", "acceptance_band")


def awx_slices(hosts: list[str], count: int) -> list[list[str]]:
    """awx/main/models/inventory.py Inventory.get_script_data orders the hosts by name and
    get_sliced_hosts gives slice n (1-based) hosts[n - 1::count]."""
    ordered = sorted(hosts)
    return [ordered[n - 1::count] for n in range(1, count + 1)]


def fleet(emu, ns: str) -> gs.MetricsServer:
    metrics = gs.MetricsServer()
    gs.create_namespace(emu, ns)
    for name, traffic in (("healthy", vp.HEALTHY), ("low", vp.LOW), ("idle", vp.IDLE)):
        gs.create_isvc(emu, ns, name, metrics.add(name, traffic))
    gs.create_isvc(emu, ns, "plain", None, speculative=False)
    gs.create_isvc(emu, ns, "dropped", metrics.add("dropped", vp.HEALTHY, spec=False))
    gs.create_isvc(emu, ns, "gone", "http://127.0.0.1:9/nowhere")
    return metrics


def guard(emu, workdir: Path, inventory: Path, *args: str) -> tuple[gs.Run, dict]:
    """One guard job: its report files and its artifacts (what AWX keeps of its set_stats)."""
    canary = workdir / "verdicts" / "canary" / "healthy"
    canary.mkdir(parents=True, exist_ok=True)
    (canary / "report.json").write_text(json.dumps({"outcome": "aborted", "summary": "TTFT +57%",
                                                    "run": {"at": "2026-11-27T10:00:00Z"}}))
    artifacts = workdir / "artifacts.json"
    run = gs.run_guard(emu, workdir, inventory, *args, extra={
        "specpilot_guard_consecutive_readings": 1, "specpilot_guard_fail_on_error": False}, env_extra={
        "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS), "SPECPILOT_TEST_ARTIFACTS": str(artifacts),
        "ANSIBLE_CALLBACKS_ENABLED": "specpilot.core.preload,awx_artifacts"})
    assert run.rc == 0, run.out[-4000:]
    return run, json.loads(artifacts.read_text())


def verdicts(services: list[dict]) -> dict:
    return {s["host"]: {k: s.get(k) for k in VERDICT_KEYS} | {"last": (s.get("latest_verdict") or {}).get("verdict")}
            for s in services}


def fleet_report(tmp_path: Path, inventory: Path, artifacts: dict) -> tuple[subprocess.CompletedProcess, dict]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "artifacts.json").write_text(json.dumps(artifacts))
    env = dict(os.environ, ANSIBLE_CONFIG=str(gs.ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))
    cmd = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory), str(FLEET_PLAYBOOK),
           "-e", "@%s" % (tmp_path / "artifacts.json"), "-e", "specpilot_fleet_report_dir=%s" % (tmp_path / "fleet")]
    proc = subprocess.run(cmd, cwd=gs.ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    report = tmp_path / "fleet" / "fleet.json"
    return proc, (json.loads(report.read_text()) if report.is_file() else {})


def without_namespace(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("namespace", "message")} for r in rows]


def test_three_slices_give_the_verdicts_history_and_fleet_summary_of_one_run(emulator, tmp_path):
    whole_ns, sliced_ns = "fleet-whole", "fleet-sliced"
    servers = [fleet(emulator, whole_ns), fleet(emulator, sliced_ns)]
    try:
        whole_inv = gs.write_inventory(tmp_path / "whole.yml", whole_ns, SERVICES)
        sliced_inv = gs.write_inventory(tmp_path / "sliced.yml", sliced_ns, SERVICES)
        whole, whole_artifacts = guard(emulator, tmp_path / "whole", whole_inv)
        parts = awx_slices(SERVICES, SLICES)
        assert parts == [["dropped", "healthy", "plain"], ["ghost", "idle"], ["gone", "low"]]
        with ThreadPoolExecutor(SLICES) as pool:  # AWX runs the slices at once
            sliced = list(pool.map(lambda n: guard(emulator, tmp_path / f"slice{n}", sliced_inv, "--limit",
                                                   ",".join(parts[n])), range(SLICES)))
    finally:
        for server in servers:
            server.close()

    # each slice reported its own hosts, and together the verdicts of the single run
    assert [sorted(s["host"] for s in run.report["services"]) for run, _ in sliced] == parts
    union = [s for run, _ in sliced for s in run.report["services"]]
    assert verdicts(union) == verdicts(whole.report["services"])
    by = {s["host"]: s for s in union}
    assert (by["low"]["status"], by["low"]["action"]) == ("low", "report")
    assert (by["healthy"]["method"], by["healthy"]["num_speculative_tokens"]) == ("ngram", 3)
    # the cluster state: every service keeps the same history in both namespaces
    for name in SERVICES:
        assert [h["status"] for h in gs.guard_history(emulator, sliced_ns, name)] == \
            [h["status"] for h in gs.guard_history(emulator, whole_ns, name)], name

    # AWX hands the slices' set_stats on merged with dict.update, the last slice to finish last: the shared key
    # keeps one slice, the slices' own keys keep all three
    merged: dict = {}
    for _run, artifacts in reversed(sliced):
        merged.update(artifacts)
    assert sorted(s["host"] for s in merged["specpilot_guard"]["services"]) == parts[0]
    assert len([k for k in merged if k.startswith("specpilot_guard_slice_")]) == SLICES

    proc, summary = fleet_report(tmp_path / "sliced-report", sliced_inv, merged)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # the single run's summary by the same merge (playbooks/fleet_report.yml's filter), without a second playbook run
    whole_summary = json.loads(json.dumps(fleet_filter.fleet_summary(whole_artifacts, "t", SERVICES), default=str))
    assert len(summary["slices"]) == SLICES and len(whole_summary["slices"]) == 1
    assert summary["unreported"] == [] and summary["conflicts"] == []
    assert without_namespace(summary["services"]) == without_namespace(whole_summary["services"])
    assert summary["counts"] == whole_summary["counts"] == {"fail": 4, "warn": 1, "ok": 1, "off": 1}
    # failing first: the canary-aborted healthy service, low (report), the unreadable and the metric-less ones
    assert summary["failing"] == ["low", "healthy", "dropped", "gone"]
    assert [r["host"] for r in summary["services"]][4:] == ["ghost", "idle", "plain"]
    md = (tmp_path / "sliced-report" / "fleet" / "fleet.md").read_text()
    assert "7 services in 3 slice(s): 4 fail, 1 warn, 1 ok, 1 off." in md
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in md.splitlines() if line.startswith("|")]
    assert ["FAIL", "fleet-sliced/healthy", "on", "ngram", "3", "0.800", "healthy / none", "-", "canary aborted",
            "canary aborted"] in rows
