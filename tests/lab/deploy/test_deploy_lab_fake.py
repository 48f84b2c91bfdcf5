"""deploy.yml against the lab controller (KServe + kubelet in this process) with the fake vLLM
server: real pods, rollouts, crash loops and scheduling, in seconds.

An engine that exits crash-loops and the diagnosis shows its error, exit code and log; a pod asking for
more GPUs than the node has stays Pending, the diagnosis names nvidia.com/gpu and the lock is released
(this case was also the molecule scenario deploy_failures's mol-pending, which ran it twice; it is here only).

A change's rollout (first deploy, a rerun that changes nothing, then num_speculative_tokens 3 -> 5: exactly
one new pod, the new args in its engine log, the previous revision recorded) is the molecule scenario
``deploy`` (converge, idempotence, side_effect), on the lab's stand-in engine; it was a test here too,
three deploy.yml runs that proved nothing the scenario does not.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "emulator" / "deploy"))
from deploy_helpers import NGRAM, Run, run_deploy, write_inventory  # noqa: E402

pytestmark = [pytest.mark.lab, pytest.mark.slow]

PVC = "specpilot-lab-models"


@pytest.fixture
def lab(fake_lab, fake_models):
    lab = fake_lab()
    lab.namespace("svc-ns")
    lab.pvc_with_models("svc-ns", fake_models, name=PVC)
    return lab


def _pods(lab):
    return [p for p in lab.pods("svc-ns", "svc") if not p["metadata"].get("deletionTimestamp")]


def test_an_engine_that_exits_is_diagnosed_restored_and_on_request_left_for_debugging(lab, tmp_path):
    """Issue 39: a new revision whose engine crash-loops is diagnosed and, by default, the revision it replaced is
    put back at once (the rollback role in restore mode, its rollout wait, the stored spec's check and the smoke
    check of the restored revision); with
    specpilot_deploy_restore_on_failure=false the failed revision stays for debugging and the failure prints the
    exact command that restores it."""
    inv = write_inventory(tmp_path / "inv", "svc-ns", {"svc": {"specpilot_speculative": NGRAM}})
    assert run_deploy(lab.emu, tmp_path, inv).rc == 0
    good = lab.get_isvc("svc-ns", "svc")
    good_digest = good["metadata"]["annotations"]["specpilot.io/spec-digest"]
    good_args = good["spec"]["predictor"]["model"]["args"]
    # a target directory that is not on the PVC: the engine exits at start (without the probe, which would
    # refuse the spec before any change: tests/lab/deploy/test_probe_lab_fake.py)
    write_inventory(
        tmp_path / "inv",
        "svc-ns",
        {
            "svc": {
                "specpilot_speculative": NGRAM,
                "specpilot_target": {"subdir": "missing", "params_b": 0.000657, "dtype": "float32"},
            }
        },
    )
    reports = tmp_path / "reports"
    # (the restore's smoke check does not wait for metrics lines this fake server never logs)
    no_probe = ("-e", "specpilot_deploy_fail_fast_restarts=2", "-e", "specpilot_deploy_probe=never",
                "-e", f"specpilot_report_dir={reports}", "-e", "specpilot_smoke_log_wait_seconds=0")
    run = run_deploy(lab.emu, tmp_path, inv, *no_probe)
    assert run.rc != 0
    out = run.out
    words = " ".join(out.split())
    assert "svc (namespace svc-ns) is not ready: the engine keeps crashing" in out
    assert "exit code 1" in out
    assert "does not appear to have a file named config.json" in out  # the engine's own error, from its log
    assert "svc: FAILED" in out.split("TASK [Summary of every service]", 1)[1]
    assert f"specpilot put the revision this deploy replaced back (digest {good_digest}, rollout ready" in words, (
        out[-5000:])
    restored = lab.get_isvc("svc-ns", "svc")
    assert restored["metadata"]["annotations"]["specpilot.io/spec-digest"] == good_digest
    assert restored["spec"]["predictor"]["model"]["args"] == good_args
    rollback = json.loads((reports / "rollback" / "svc.json").read_text())
    assert rollback["mode"] == "restore" and rollback["changed"] and rollback["rollout"]["done"], rollback
    # the restored revision's engine is smoke-checked against that revision (its args, target and ngram
    # config), not against the failed spec (whose target directory is missing: its args would be "missing" in the pod);
    # the failure message carries the verdict.  This test's minimal fake server logs no "Application startup
    # complete." nor metrics lines: the engine-start check is the only one it cannot pass (the stand-in engine
    # passes them all: tests/lab/rollback/test_rollback_lab_fake.py)
    assert rollback["smoke"]["judged_config"] == NGRAM, rollback["smoke"]
    assert "Smoke check of the restored revision: svc: " in words, out[-5000:]
    smoke_report = json.loads((reports / "smoke" / "svc" / "rollback-smoke.json").read_text())
    smoke = {c["id"]: c for c in smoke_report["checks"]}
    assert [k for k, c in smoke.items() if c["status"] == "fail"] == ["engine_start"], smoke
    for check in ("isvc_args", "pod_args", "engine_config", "probes"):
        assert smoke[check]["status"] == "pass", smoke[check]
    assert "/mnt/models/missing" not in json.dumps(smoke)
    assert lab.get("coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", "svc-ns") is None

    # the same broken spec, left for debugging: the failure gives the exact command that puts it back
    keep = Run(lab.emu, tmp_path, inv, *no_probe, "-e", "specpilot_deploy_restore_on_failure=false").wait(600)
    assert keep.rc != 0
    restore = (
        f"to put it back, run: ansible-playbook -i {inv} {Path(__file__).resolve().parents[3] / 'playbooks'}"
        "/rollback.yml --limit svc -e specpilot_rollback_mode=restore"
    )
    assert restore in " ".join(keep.out.split()), keep.out[-4000:]
    assert "specpilot put the revision" not in keep.out
    isvc = lab.get_isvc("svc-ns", "svc")
    assert isvc["metadata"]["annotations"]["specpilot.io/spec-digest"] != good_digest  # the failed one stays
    record = json.loads(isvc["metadata"]["annotations"]["specpilot.io/previous-revision"])
    assert record["digest"] == good_digest and record["ready"] is True
    assert lab.get("coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", "svc-ns") is None


def test_a_pod_that_needs_more_gpus_than_the_node_has_is_diagnosed(lab, tmp_path):
    inv = write_inventory(
        tmp_path / "inv",
        "svc-ns",
        {"svc": {"specpilot_speculative": NGRAM, "specpilot_gpu": {"count": 2, "memory_gib": 24}}},
    )
    run = run_deploy(lab.emu, tmp_path, inv, "-e", "specpilot_deploy_pending_grace=3")
    assert run.rc != 0
    out = run.out
    assert "svc (namespace svc-ns) is not ready: the pod cannot be scheduled" in out
    assert "Insufficient nvidia.com/gpu" in out
    assert "FailedScheduling" in out
    assert "specpilot_gpu.count" in out
    pods = _pods(lab)
    assert pods and pods[0]["status"]["phase"] == "Pending"
    # nothing of the failed deploy is left half done: its lock is released (molecule deploy_failures's verify)
    assert lab.get("coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", "svc-ns") is None
