"""Every report through one path (issue 17): Markdown rendered in Python beside its decisions, written by
module_utils/report/files.py; specpilot.core.report_write (rollback, guard, canary) and canary_report."""

from __future__ import annotations

import json
import os
import re

import pytest
from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks
from ansible_collections.specpilot.core.plugins.module_utils.operate.reports import (
    guard_markdown,
    rollback_markdown,
)
from ansible_collections.specpilot.core.plugins.module_utils.report import files
from ansible_collections.specpilot.core.plugins.module_utils.report.files import write_json_and_markdown
from markdown_cells import unpadded

ROLLBACK = {
    "name": "svc",
    "namespace": "ml",
    "mode": "off",
    "check_mode": False,
    "present": True,
    "skipped": False,
    "changed": True,
    "applied": True,
    "before": {
        "digest": "aaa",
        "args": ["--model=/mnt/models/target", '--speculative-config={"method": "ngram"}'],
        "speculative": ['--speculative-config={"method": "ngram"}'],
        "ready": True,
    },
    "after": {"digest": "bbb", "args": ["--model=/mnt/models/target"], "speculative": []},
    "removed_args": ['--speculative-config={"method": "ngram"}'],
    "added_args": [],
    "gpu_memory_utilization": {"note": "put back to 0.9"},
    "reclaim": None,
    "reclaim_job": None,
    "rollout": {"done": True, "elapsed": 3, "message": "ready"},
    "verification": {"ok": True, "problems": []},
    "smoke": {"verdict": "pass", "message": "no speculative decoding, as expected"},
}


def write(tmp_path, kind, report, check_mode=False, **extra):
    p = dict(kind=kind, report=report, output_dir=str(tmp_path / "out"), basename="svc", plots=True, **extra)
    return fact_tasks.report_write(p, check_mode)


def test_the_rollback_markdown_says_what_changed_and_how_it_was_checked():
    md = unpadded(rollback_markdown(ROLLBACK))
    assert md.startswith("# Rollback of ml/svc (mode off)\n")
    assert "- Result: changed\n" in md and "- Rollout: ready - ready\n" in md
    assert "- Verification: passed\n" in md
    assert "- Engine (smoke): pass - no speculative decoding, as expected\n" in md
    assert "- gpu_memory_utilization: put back to 0.9\n" in md
    assert "| spec digest | `aaa` | `bbb` |" in md
    # a | inside an argument would break the table
    assert '| speculative args | --speculative-config={"method": "ngram"} | none |' in md
    assert 'Removed: `--speculative-config={"method": "ngram"}`' in md and "Added: nothing" in md
    assert md.split("## Args after\n")[1] == "- `--model=/mnt/models/target`\n"
    assert "Draft reclaim" not in md


def test_the_rollback_markdown_of_a_failed_check_a_missing_service_and_a_reclaim():
    failed = dict(
        ROLLBACK, check_mode=True, changed=False, verification={"ok": False, "problems": ["a", "b"]}
    )
    md = unpadded(
        rollback_markdown(
            dict(failed, smoke={"verdict": None, "message": None}, rollout={"done": False, "message": "x"})
        )
    )
    assert "- Result: nothing to change (check mode: nothing written)" in md
    assert "- Verification: FAILED: a; b" in md and "- Engine (smoke): not run\n" in md
    assert "- Rollout: not ready - x" in md
    assert "- Verification: not run" in rollback_markdown(dict(ROLLBACK, verification=None))
    assert rollback_markdown(dict(ROLLBACK, skipped=True)).endswith(
        "Skipped: the InferenceService does not exist.\n"
    )
    reclaim = {
        "draft_path": "/mnt/models/draft",
        "storage_uri_dropped": None,
        "pvc": None,
        "modelcar": {
            "digest": "sha256:old",
            "storage_uri": "oci://r/i@sha256:old",
            "new_digest": "sha256:new",
            "new_storage_uri": "oci://r/i@sha256:new",
            "result": {"image": "r/i", "dropped_layer": {"digest": "sha256:l", "mount": "/models/draft"}},
        },
    }
    md = unpadded(rollback_markdown(dict(ROLLBACK, reclaim=reclaim, reclaim_job=None)))
    assert (
        "- Draft reclaim: draft /mnt/models/draft; storageUris entry dropped: no; PVC: n/a; Modelcar: repointed"
        in md
    )
    assert "| before | `sha256:old` | `oci://r/i@sha256:old` |" in md
    assert "| after | `sha256:new` | `oci://r/i@sha256:new` |" in md
    assert "draft layer `sha256:l` (/models/draft, 0 bytes) no longer referenced" in md


def test_the_guard_markdown_has_a_row_and_a_section_per_service():
    service = {
        "namespace": "ml",
        "name": "low",
        "status": "low",
        "acceptance_rate": 0.2,
        "mean_acceptance_length": 1.6,
        "per_position": [0.5, 0.1, 0.0],
        "drafted": 30,
        "streak": 1,
        "consecutive_readings": 3,
        "action": "watch",
        "rolled_back": False,
        "message": "acceptance is low",
        "findings": ["one finding"],
        "history": [{"status": "ok", "rate": 0.7}, {"status": "idle", "rate": None}],
    }
    idle = dict(
        service,
        name="idle",
        status="idle",
        acceptance_rate=None,
        mean_acceptance_length=None,
        per_position=[],
        drafted=None,
        findings=[],
        history=[],
        rolled_back=True,
        action="rollback",
        latest_verdict={
            "kind": "canary",
            "verdict": "aborted",
            "summary": "TTFT +57%",
            "at": "2026-11-25T09:00:00Z",
            "path": "/r/canary/idle/report.json",
        },
    )
    report = {
        "generated_at": "2026-11-26T00:00:00Z",
        "mode": "scrape",
        "auto_rollback": True,
        "services": [service, idle],
        "thresholds": {
            "min_acceptance_rate": 0.5,
            "warn_acceptance_rate": 0.65,
            "min_draft_tokens": 100,
            "consecutive_readings": 3,
        },
    }
    md = unpadded(guard_markdown(report))
    assert "2026-11-26T00:00:00Z, mode scrape, auto-rollback on:" in md
    # issue 39: the column says what the guard judged (acceptance), and the latest benchmark/canary verdict
    assert "| service | judged | acceptance |" in md and "The guard judges acceptance only" in md
    assert "| ml/low | acceptance low | 0.200 | 1.60 | 0.5 / 0.1 / 0.0 | 30 | 1/3 | watch | - |" in md
    assert (
        "| ml/idle | idle | - | - | - | - | 1/3 | rollback (rolled back) | canary aborted (2026-11-25T09:00:00Z) |"
        in md
    )
    assert (
        "\n## ml/low\n\nacceptance is low\n\n- one finding\n\nLast readings, oldest first: ok 0.7, idle.\n"
        in md
    )
    assert md.count("## ml/") == 2 and "Band:" not in md
    # issue 38: the reading against the acceptance smoke recorded on the same vLLM release
    recorded = dict(service, recorded={"text": "live acceptance 0.200 against the record of vLLM 0.32.0 (smoke, t at "
                                               "temperature 0.0): position 0 0.50 (recorded 0.95)"})
    md = guard_markdown(dict(report, services=[recorded]))
    assert "\nRecorded (smoke, the same vLLM release): live acceptance 0.200 against the record of vLLM 0.32.0" in md


def test_report_write_writes_once_and_never_counts_as_a_change(tmp_path):
    first = write(tmp_path, "rollback", ROLLBACK)
    assert first["changed"] is False and first["written"] is True
    saved = json.loads((tmp_path / "out" / "svc.json").read_text())
    assert saved == dict(ROLLBACK, run=saved["run"])
    assert (tmp_path / "out" / "svc.md").read_text().startswith(rollback_markdown(ROLLBACK))
    assert first["paths"] == {
        "json": str(tmp_path / "out" / "svc.json"),
        "markdown": str(tmp_path / "out" / "svc.md"),
        "history": first["paths"]["history"],
        "latest": str(tmp_path / "out" / "history" / "svc" / "latest"),
        "plots": [],
    }
    mtime = (tmp_path / "out" / "svc.md").stat().st_mtime_ns
    again = write(tmp_path, "rollback", ROLLBACK)
    assert again["written"] is False and (tmp_path / "out" / "svc.md").stat().st_mtime_ns == mtime
    assert write(tmp_path, "rollback", dict(ROLLBACK, changed=False))["written"] is True


def test_each_run_keeps_its_record_and_latest_points_at_the_newest(tmp_path):
    """Issue 39: a second rollback replaced the first one's report with "nothing to change". Each run that
    found something new has its own time-stamped record, ``latest`` links to the newest, the old paths hold
    a copy of it, and every record names its run: id, time, version, the command that reproduces it."""
    first = write(tmp_path, "rollback", ROLLBACK)["paths"]
    second = write(tmp_path, "rollback", dict(ROLLBACK, changed=False))["paths"]
    out = tmp_path / "out"
    records = sorted(p for p in (out / "history" / "svc").iterdir() if p.name != "latest")
    assert [str(p) for p in records] == sorted([first["history"], second["history"]])
    assert json.loads((records[0] / "svc.json").read_text())["changed"] is True
    assert json.loads((records[1] / "svc.json").read_text())["changed"] is False
    assert os.readlink(out / "history" / "svc" / "latest") == records[1].name
    assert (out / "svc.json").read_bytes() == (records[1] / "svc.json").read_bytes()
    run = json.loads((out / "svc.json").read_text())["run"]
    assert set(run) == {"id", "at", "version", "command", "directory"}
    assert re.match(r"^\d+\.\d+\.\d+", run["version"]), run  # the collection's galaxy.yml
    md = (out / "svc.md").read_text()
    assert "Run `%s` at %s, specpilot %s." % (run["id"], run["at"], run["version"]) in md
    assert "Reproduce: not known (not run by ansible-playbook)" in md  # pytest is not ansible-playbook
    # the newest KEEP records are kept
    for i in range(files.KEEP + 2):
        write(tmp_path, "rollback", dict(ROLLBACK, removed_args=["--x=%d" % i]))
    assert len([p for p in (out / "history" / "svc").iterdir() if p.name != "latest"]) == files.KEEP


def test_the_command_line_is_kept_with_its_secrets_masked(monkeypatch):
    hf = "hf_" + "a1B2" * 9  # a credential's shape, whatever its variable is called
    argv = [
        "/usr/bin/ansible-playbook",
        "-i",
        "inv",
        "playbooks/rollback.yml",
        "-e",
        "specpilot_k8s_api_key=abc123",
        "-e",
        '{"token": "xyz"}',
        "-e",
        # the canary's k change, as its report printed it on 2026-11-29 before: "...tokens": *** (a name with
        # "token" in a word is not a secret; the reproduce command needs the value)
        '{"specpilot_override_num_speculative_tokens": 2, "max_tokens": 64, "note": "%s"}' % hf,
        "--limit",
        "svc",
    ]
    monkeypatch.setattr(files, "_proc", lambda pid, what: None)  # no /proc: sys.argv is the run's
    monkeypatch.setattr(files.sys, "argv", argv)
    run = files.provenance(now=1_800_000_000.0)
    assert run["command"] == (
        "ansible-playbook -i inv playbooks/rollback.yml -e 'specpilot_k8s_api_key=***' -e "
        '\'{"token": "***"}\' -e \'{"specpilot_override_num_speculative_tokens": 2, "max_tokens": 64, "note": '
        '"***"}\' --limit svc'
    )
    assert run["at"] == "2027-01-15T08:00:00Z" and "abc123" not in json.dumps(run) and hf not in json.dumps(run)


def test_report_write_in_check_mode_writes_nothing(tmp_path):
    out = write(tmp_path, "rollback", ROLLBACK, check_mode=True)
    assert out["paths"] == {} and not (tmp_path / "out").exists()


def test_report_write_refuses_what_it_cannot_render_or_name(tmp_path):
    with pytest.raises(
        fact_tasks.TaskFailure, match="'thresholds' is missing or malformed for a guard report"
    ):
        write(tmp_path, "guard", {"services": []})
    with pytest.raises(fact_tasks.TaskFailure, match="basename must be a plain file name stem"):
        fact_tasks.report_write(
            dict(kind="rollback", report=ROLLBACK, output_dir=str(tmp_path), basename="../x", plots=True)
        )
    assert not (tmp_path / "out").exists()


def test_canary_report_is_report_write_of_kind_canary(tmp_path):
    report = {
        "service": "svc",
        "namespace": "ml",
        "outcome": "aborted",
        "summary": "too slow",
        "canary_name": "svc-canary",
        "speculative_config": None,
        "steps_planned": [10],
        "window_s": 60,
        "min_requests": 20,
        "min_acceptance": 0.5,
        "steps": [],
    }
    out = fact_tasks.canary_report({"report": report, "output_dir": str(tmp_path), "plots": True})
    assert out["paths"]["markdown"] == str(tmp_path / "report.md")
    assert (tmp_path / "report.md").read_text().startswith("# Canary of ml/svc\n\n**ABORTED** - too slow")


def test_one_writer_for_every_report(tmp_path):
    """The JSON every report writes: sorted keys, two spaces, a final newline, text for what JSON cannot hold."""
    import datetime

    paths, written = write_json_and_markdown(
        str(tmp_path / "d"), "r", {"b": 1, "a": datetime.date(2026, 1, 2)}, "# r\n"
    )
    text = (tmp_path / "d" / "r.json").read_text()
    assert (
        written
        and text.startswith('{\n  "a": "2026-01-02",\n  "b": 1,\n  "run": {\n')
        and text.endswith("}\n")
    )
    assert write_json_and_markdown(str(tmp_path / "d"), "r", {"a": "2026-01-02", "b": 1}, "# r\n") == (
        paths,
        False,
    )


def _arm(p50, p99, acceptance=None):
    figures = {
        f: {"p50_ms": p50 * k, "p99_ms": p99 * k} for f, k in (("ttft", 10), ("tpot", 1), ("e2e", 100))
    }
    return {
        "requests": 120,
        "failed": 0,
        "figures": figures,
        "acceptance": {"draft_acceptance_rate": acceptance},
    }


def test_the_canary_report_draws_both_arms_per_step(tmp_path):
    pytest.importorskip("matplotlib")
    steps = [
        {
            "traffic_percent": pct,
            "decision": "promote-step",
            "reasons": ["faster"],
            "window_s": 60,
            "extensions": 0,
            "arms": {"baseline": _arm(20, 40), "canary": _arm(12, 30, 0.8)},
            "ratios": {},
        }
        for pct in (50, 100)
    ]
    report = {
        "service": "svc",
        "namespace": "ml",
        "outcome": "promoted",
        "summary": "promoted",
        "canary_name": "c",
        "speculative_config": None,
        "steps_planned": [50, 100],
        "window_s": 60,
        "min_requests": 20,
        "min_acceptance": 0.5,
        "steps": steps,
    }
    out = fact_tasks.canary_report({"report": report, "output_dir": str(tmp_path), "plots": True})
    png = tmp_path / "latency.png"
    assert out["paths"]["plots"] == [str(png)] and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (tmp_path / "report.md").read_text()
    assert "![Latency of both arms per step](latency.png)" in md
    assert json.loads((tmp_path / "report.json").read_text())["plots"] == [
        {"file": "latency.png", "title": "Latency of both arms per step"}
    ]
    # an abort before any window measured: no plot, no link
    empty = dict(report, outcome="aborted", steps=[dict(steps[0], arms={})])
    out = fact_tasks.canary_report({"report": empty, "output_dir": str(tmp_path / "e"), "plots": True})
    assert out["paths"]["plots"] == [] and "![" not in (tmp_path / "e" / "report.md").read_text()
    # plots off
    out = fact_tasks.canary_report(
        {"report": dict(report), "output_dir": str(tmp_path / "off"), "plots": False}
    )
    assert out["paths"]["plots"] == [] and not (tmp_path / "off" / "latency.png").exists()
