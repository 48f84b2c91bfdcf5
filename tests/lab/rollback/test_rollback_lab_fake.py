"""playbooks/rollback.yml end to end through the lab (emulator + lab controller: real pods and
rollouts) with the smoke tests' stand-in engine, which logs and exports what vLLM 0.32 does:
deploy (ngram) -> rollback off (new pod, engine log speculative_config=None, smoke expect off
passes) -> rollback again (changed=0, same pod) -> restore (recorded predictor, byte for byte;
new pod with the n-gram config) -> smoke passes again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from smoke_lab import ROOT, report

pytestmark = [pytest.mark.lab, pytest.mark.slow]

SERVICE = "lab-ngram"
ROLLBACK = ROOT / "playbooks" / "rollback.yml"
ENV = {"specpilot_env": [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"}]}


def _rollback(lab, tmp: Path, *args, **extra):
    e = dict(
        ENV,
        specpilot_rollback_report_dir=str(tmp / "rollback"),
        specpilot_smoke_report_dir=str(tmp / "smoke"),
        specpilot_rollback_wait_delay=1,
        **extra,
    )
    return lab.playbook(ROLLBACK, SERVICE, *args, extra=e)


def test_deploy_rollback_again_restore(fake_rollback_lab, tmp_path):
    lab = fake_rollback_lab
    lab.deploy(SERVICE, extra=ENV)
    on_pod = lab.wait_single_ready_pod(SERVICE, 120)["metadata"]["name"]
    on = lab.isvc(SERVICE)
    assert "SpeculativeConfig(method='ngram'" in lab.engine_log(on_pod)

    off = _rollback(lab, tmp_path / "1")
    assert off.rc == 0, off.output[-6000:]
    pods = lab.live_pods(SERVICE)
    assert len(pods) == 1 and pods[0] != on_pod  # the engine restarted
    assert "speculative_config=None" in lab.engine_log(pods[0])
    rep = json.loads((tmp_path / "1" / "rollback" / f"{SERVICE}.json").read_text())
    assert rep["changed"] and rep["verification"]["ok"] and rep["smoke"]["verdict"] == "pass", rep
    smoke = report(tmp_path / "1" / "smoke", SERVICE, "rollback-smoke")
    assert smoke["expect"] == "off" and smoke["verdict"] == "pass"
    args = lab.isvc(SERVICE)["spec"]["predictor"]["model"]["args"]
    assert not [a for a in args if "speculative" in a]

    again = _rollback(lab, tmp_path / "2")
    assert again.rc == 0, again.output[-6000:]
    assert again.recap()[SERVICE]["changed"] == 0
    assert lab.live_pods(SERVICE) == pods  # no restart

    restore = _rollback(lab, tmp_path / "3", specpilot_rollback_mode="restore")
    assert restore.rc == 0, restore.output[-6000:]
    restored = lab.isvc(SERVICE)
    assert json.dumps(restored["spec"]["predictor"], sort_keys=True) == json.dumps(
        on["spec"]["predictor"], sort_keys=True
    )
    new = lab.live_pods(SERVICE)
    assert len(new) == 1 and new[0] != pods[0]
    assert "SpeculativeConfig(method='ngram'" in lab.engine_log(new[0])
    smoke_on = lab.smoke(SERVICE, tmp_path / "4", extra=ENV)
    assert smoke_on.rc == 0, smoke_on.output[-4000:]


def test_draft_service_off_then_reclaim_only_when_confirmed(fake_rollback_lab, tmp_path):
    lab = fake_rollback_lab
    svc = "lab-draft"
    pvc_dir = lab.root / "lab" / "pvcs" / "specpilot-lab" / "specpilot-lab-models"
    lab.deploy(svc, extra=ENV)
    on_pod = lab.wait_single_ready_pod(svc, 120)["metadata"]["name"]
    before = lab.isvc(svc)
    assert (pvc_dir / "draft" / "config.json").exists()

    def run(tag, *args, **extra):
        e = dict(
            ENV,
            specpilot_rollback_report_dir=str(tmp_path / tag),
            specpilot_smoke_report_dir=str(tmp_path / tag),
            specpilot_rollback_wait_delay=1,
            specpilot_rollback_reclaim_draft=True,
            **extra,
        )
        return lab.playbook(ROLLBACK, svc, *args, extra=e)

    # check mode, even confirmed: nothing written, the model data untouched
    checked = run("check", "--check", "--diff", specpilot_rollback_confirm_reclaim=True)
    assert checked.rc == 0, checked.output[-6000:]
    assert lab.isvc(svc)["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert (pvc_dir / "draft" / "config.json").exists()

    # off with reclaim but not confirmed: the engine restarts without the draft, the data stays
    off = run("off")
    assert off.rc == 0, off.output[-6000:]
    pods = lab.live_pods(svc)
    assert len(pods) == 1 and pods[0] != on_pod
    assert "speculative_config=None" in lab.engine_log(pods[0])
    assert (pvc_dir / "draft" / "config.json").exists()
    assert "left untouched" in off.output
    rep_off = json.loads((tmp_path / "off" / f"{svc}.json").read_text())
    assert rep_off["changed"] and rep_off["rollout"]["done"] and rep_off["verification"]["ok"]
    assert len([a for a in rep_off["removed_args"] if a.startswith("--speculative-config")]) == 1
    assert rep_off["reclaim"]["pvc"]["subpath"].endswith("draft") and rep_off["reclaim_job"] is None

    # confirmed: the Job deletes the draft sub-directory (found from the record), never the target or the PVC
    reclaim = run("reclaim", specpilot_rollback_confirm_reclaim=True)
    assert reclaim.rc == 0, reclaim.output[-6000:]
    assert not (pvc_dir / "draft").exists() and (pvc_dir / "target" / "config.json").exists()
    assert lab.get("v1", "PersistentVolumeClaim", "specpilot-lab-models", "specpilot-lab") is not None
    rep = json.loads((tmp_path / "reclaim" / f"{svc}.json").read_text())
    assert rep["reclaim"]["pvc"]["subpath"].endswith("draft") and not rep["changed"]
    assert rep["reclaim_job"] is not None

    # a rollback of a service whose draft was reclaimed: nothing to do
    again = run("again", specpilot_rollback_confirm_reclaim=True)
    assert again.rc == 0, again.output[-6000:]
    assert again.recap()[svc]["changed"] == 0
