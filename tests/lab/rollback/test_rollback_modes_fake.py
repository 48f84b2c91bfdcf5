"""deploy.yml, smoke.yml and rollback.yml with the legacy deployment mode names (issue 34): lab-draft with
``specpilot_deployment_mode: RawDeployment`` and lab-ngram with ``Serverless`` (the lab controller's Knative
mode: a revision per predictor template), in ONE ansible-playbook run of the three playbooks
(deploy_smoke_rollback.yml), on the stand-in engine.

Rollback used to take the mode from the raw host variable and failed with ``value of deployment_mode must be
one of: Standard, Knative, got: RawDeployment``; it now reads the name, namespace and normalised mode from the
validated plan (the validate role's entry point ``plan``).  A test callback counts the
specpilot.core.spec_validate tasks that ran, per play and host: each of the three playbooks validates a
service once (rollback hands its plan to the smoke check it runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from smoke_lab import ROOT, report

pytestmark = [pytest.mark.lab, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
MODES = {"lab-draft": "RawDeployment", "lab-ngram": "Serverless"}
NORMALISED = {"lab-draft": "Standard", "lab-ngram": "Knative"}
PLAYS = ("Deploy specpilot services", "Smoke-check specpilot services", "Roll back specpilot services")


def test_deploy_smoke_rollback_with_the_legacy_mode_names(fake_rollback_lab, tmp_path):
    lab = fake_rollback_lab
    counts = tmp_path / "validations.json"
    env = dict(
        lab.env(),
        ANSIBLE_CALLBACK_PLUGINS=str(HERE / "callback_plugins"),
        ANSIBLE_CALLBACKS_ENABLED="specpilot.core.preload,count_validations",
        SPECPILOT_TEST_VALIDATIONS=str(counts),
    )
    extra = {
        "modes": MODES,
        "specpilot_env": [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"}],
        "specpilot_smoke_report_dir": str(tmp_path / "smoke"),
        "specpilot_rollback_report_dir": str(tmp_path / "rollback"),
        "specpilot_rollback_wait_delay": 1,
    }
    try:
        run = lab.playbook(HERE / "deploy_smoke_rollback.yml", ",".join(MODES), extra=extra, env=env)
        assert run.rc == 0, run.output[-8000:]
        assert "must be one of" not in run.output
        for svc, mode in NORMALISED.items():
            assert run.recap()[svc]["failed"] == 0
            isvc = lab.isvc(svc)
            # deployed in the normalised mode (KServe 0.20 names), then turned off by the rollback
            assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == mode
            args = isvc["spec"]["predictor"]["model"]["args"]
            assert not [a for a in args if a.startswith("--speculative-config")], args
            smoke = report(tmp_path / "smoke", svc)
            assert smoke["verdict"] == "pass" and smoke["expect"] == "on", smoke["verdict"]
            rolled = json.loads((tmp_path / "rollback" / f"{svc}.json").read_text())
            assert rolled["changed"] and rolled["rollout"]["done"] and rolled["verification"]["ok"], rolled
            assert [a for a in rolled["removed_args"] if a.startswith("--speculative-config")]
            after = report(tmp_path / "smoke", svc, "rollback-smoke")
            assert after["verdict"] == "pass" and after["expect"] == "off"
        # each playbook validated each service once, counted by the action that ran
        seen = json.loads(counts.read_text())
        for play in PLAYS:
            assert seen[play] == {svc: 1 for svc in MODES}, (play, seen)
    finally:
        lab.delete_isvc("lab-ngram")
