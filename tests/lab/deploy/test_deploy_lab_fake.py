"""deploy.yml against the lab controller (KServe + kubelet in this process) with the fake vLLM
server: real pods, rollouts, crash loops and scheduling, in seconds.

The rollout wait sees a new pod replace the old one after a change; an engine that exits crash-loops
and the diagnosis shows its error, exit code and log; a pod asking for more GPUs than the node has
stays Pending and the diagnosis names nvidia.com/gpu.
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


def test_a_change_rolls_out_a_new_pod_and_the_wait_sees_it(lab, tmp_path):
    inv = write_inventory(tmp_path / "inv", "svc-ns", {"svc": {"specpilot_speculative": NGRAM}})
    first = run_deploy(lab.emu, tmp_path, inv)
    assert first.rc == 0, first.out[-5000:]
    pods = _pods(lab)
    assert len(pods) == 1 and pods[0]["status"]["phase"] == "Running"
    old_pod = pods[0]["metadata"]["name"]
    log = lab.pod_log("svc-ns", old_pod, "kserve-container")
    assert "SpeculativeConfig(method='ngram'" in log and "num_spec_tokens=3" in log

    again = run_deploy(lab.emu, tmp_path, inv)
    assert again.rc == 0 and again.recap()["svc"]["changed"] == 0, again.changed_tasks()

    write_inventory(
        tmp_path / "inv", "svc-ns", {"svc": {"specpilot_speculative": dict(NGRAM, num_speculative_tokens=5)}}
    )
    change = run_deploy(lab.emu, tmp_path, inv)
    assert change.rc == 0, change.out[-5000:]
    pods = _pods(lab)
    assert len(pods) == 1 and pods[0]["metadata"]["name"] != old_pod  # one rollout: a new pod
    assert "num_spec_tokens=5" in lab.pod_log("svc-ns", pods[0]["metadata"]["name"], "kserve-container")
    isvc = lab.get_isvc("svc-ns", "svc")
    record = json.loads(isvc["metadata"]["annotations"]["specpilot.io/previous-revision"])
    assert '"num_speculative_tokens":3' in " ".join(record["predictor"]["model"]["args"])


def test_an_engine_that_exits_is_diagnosed_restored_and_on_request_left_for_debugging(lab, tmp_path):
    """Issue 39: a new revision whose engine crash-loops is diagnosed and, by default, the revision it replaced is
    put back at once (the rollback role in restore mode, its rollout wait and the stored spec's check); with
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
    no_probe = ("-e", "specpilot_deploy_fail_fast_restarts=2", "-e", "specpilot_deploy_probe=never",
                "-e", f"specpilot_report_dir={reports}")
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
    assert "is not ready: the pod cannot be scheduled" in out
    assert "Insufficient nvidia.com/gpu" in out
    assert "FailedScheduling" in out
    assert "specpilot_gpu.count" in out
    pods = _pods(lab)
    assert pods and pods[0]["status"]["phase"] == "Pending"
