"""playbooks/rollback.yml with the draft reclaim, end to end through the lab (emulator + lab
controller: real pods and rollouts, the lab PVC's files) with the smoke tests' stand-in engine,
which logs and exports what vLLM 0.32 does: check mode writes nothing; off with the reclaim asked
but not confirmed leaves the model data; confirmed, the Job deletes the draft only; again, nothing
to do.

deploy -> off -> again (changed=0, same pod) -> restore (byte for byte, a new pod with the n-gram
config, the restore's own smoke check) is the molecule scenario ``rollback`` (the way users test
the role); the API-level cases (check-mode diff, a held lock, API faults, option B) are
tests/emulator/rollback/test_rollback_role.py.
"""

from __future__ import annotations

import json

import pytest
from smoke_lab import ROOT, report

pytestmark = [pytest.mark.lab, pytest.mark.slow]

ROLLBACK = ROOT / "playbooks" / "rollback.yml"
ENV = {"specpilot_env": [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"}]}


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


def test_restore_is_smoke_checked_against_the_restored_revision(fake_rollback_lab, tmp_path):
    """lab-ngram deployed at k=3, redeployed at k=2 (the spec still says k=2), then ``rollback.yml -e
    specpilot_rollback_mode=restore``: the revision k=3 comes back and the restore's own smoke check passes,
    judging the engine against the restored revision's config (k=3), not the spec's (k=2), which failed it
    before (rollback_smoke_plan)."""
    lab = fake_rollback_lab
    svc = "lab-ngram"
    k3 = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    k2 = dict(k3, num_speculative_tokens=2)
    try:
        lab.deploy(svc, extra=dict(ENV, specpilot_speculative=k3))
        first = lab.wait_single_ready_pod(svc, 120)["metadata"]["name"]
        lab.deploy(svc, extra=dict(ENV, specpilot_speculative=k2))
        second = lab.wait_single_ready_pod(svc, 120, not_pod=first)["metadata"]["name"]
        assert "num_spec_tokens=2" in lab.engine_log(second)

        extra = dict(
            ENV,
            specpilot_speculative=k2,
            specpilot_rollback_mode="restore",
            specpilot_rollback_report_dir=str(tmp_path / "restore"),
            specpilot_smoke_report_dir=str(tmp_path / "restore"),
            specpilot_rollback_wait_delay=1,
        )
        run = lab.playbook(ROLLBACK, svc, extra=extra)
        assert run.rc == 0, run.output[-8000:]
        pod = lab.wait_single_ready_pod(svc, 120, not_pod=second)["metadata"]["name"]
        assert "num_spec_tokens=3" in lab.engine_log(pod)
        rolled = json.loads((tmp_path / "restore" / f"{svc}.json").read_text())
        assert rolled["mode"] == "restore" and rolled["changed"] and rolled["rollout"]["done"], rolled
        assert rolled["smoke"]["verdict"] == "pass", rolled["smoke"]
        # the report says which config the smoke check judged: the restored one
        assert rolled["smoke"]["judged_config"]["num_speculative_tokens"] == 3, rolled["smoke"]
        markdown = (tmp_path / "restore" / f"{svc}.md").read_text()
        assert "Smoke judged against: the restored revision's speculative config" in markdown
        smoke = report(tmp_path / "restore", svc, "rollback-smoke")
        assert smoke["verdict"] == "pass" and smoke["expect"] == "on", smoke
        assert smoke["plan"]["speculative_config"]["num_speculative_tokens"] == 3
        engine = next(c for c in smoke["checks"] if c["id"] == "engine_config")
        assert engine["status"] == "pass" and "num_spec_tokens=3" in engine["message"], engine
    finally:
        lab.delete_isvc(svc)
