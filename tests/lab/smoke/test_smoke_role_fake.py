"""playbooks/smoke.yml end to end through the lab (emulator + controller), with a stand-in engine
that logs and exports what vLLM 0.32 does and accepts drafts at a chosen rate: the verdicts, the
report, set_stats, check mode, the off mode after a rollback, and the failure paths. Fast: the
real engine is in test_smoke_role_vllm.py."""

from __future__ import annotations

import json
import urllib.request

import pytest
from ansible_collections.specpilot.core.plugins.module_utils.operate import fleet
from smoke_lab import NAMESPACE, checks, fake_env, report

pytestmark = [pytest.mark.lab, pytest.mark.slow]

SERVICE = "lab-ngram"


def configure(lab, **config) -> None:
    """Change the running fake engine's behaviour (no rollout)."""
    url = lab.isvc(SERVICE)["status"]["url"] + "/fake/config"
    req = urllib.request.Request(
        url, data=json.dumps(config).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def redeploy(lab, extra: dict | None = None, without_speculative: bool = False) -> dict:
    old = [p["metadata"]["name"] for p in lab.pods(SERVICE)]
    lab.deploy(SERVICE, extra=extra, without_speculative=without_speculative)
    return lab.wait_single_ready_pod(SERVICE, 90, not_pod=old[0] if old else None)


def test_pass_report_stats_and_check_mode(fake_smoke_lab, tmp_path):
    lab = fake_smoke_lab
    redeploy(lab, fake_env(FAKE_ACCEPTANCE="0.95,0.9,0.85"))
    run = lab.smoke(SERVICE, tmp_path)
    assert run.rc == 0, run.output
    rep = report(tmp_path, SERVICE)
    assert rep["verdict"] == "pass" and rep["expect"] == "on"
    c = checks(rep)
    assert c["isvc_args"]["status"] == "pass" and c["pod_args"]["status"] == "pass"
    assert (
        c["engine_config"]["message"] == "SpeculativeConfig(method='ngram', model=None, num_spec_tokens=3) "
        "matches the plan"
    )
    assert c["log_cross_check"]["status"] == "pass" and "exactly" in c["log_cross_check"]["message"]
    assert rep["access"]["mode"] == "url" and rep["access"]["url"].startswith("http://127.0.0.1:")
    assert rep["request"]["max_tokens"] == 64  # from the lab spec's smoke settings
    assert rep["figures"]["acceptance_rate"] == pytest.approx(0.9, abs=0.02)
    # the band of what the probes read, at the lab spec's production temperature (specpilot_workload: 0)
    band = rep["acceptance_band"]
    assert band["band"] == "likely_helps" and band["production_temperature"] == 0.0 and band["at_production"]
    assert (tmp_path / SERVICE / "smoke.md").read_text().startswith("# Smoke check: lab-ngram - PASS")
    assert (tmp_path / SERVICE / "smoke-acceptance.png").read_bytes()[:4] == b"\x89PNG"
    assert "specpilot_smoke_results" in run.output and "verdict: pass" in run.output  # set_stats
    # issue 40: and under the slice's own key, which a sliced job's artifacts keep for the fleet report
    assert fleet.slice_key("smoke", [SERVICE]) in run.output
    assert run.recap()[SERVICE]["changed"] == 0 and run.recap()[SERVICE]["failed"] == 0

    check_dir = tmp_path / "check"
    checked = lab.smoke(SERVICE, check_dir, "--check")
    assert checked.rc == 0, checked.output
    assert report(check_dir, SERVICE)["verdict"] == "pass"
    assert checked.recap()[SERVICE]["changed"] == 0
    # issue 38: check mode records no acceptance, and says so (the smoke role's entry point record)
    assert "check mode: the acceptance smoke measured is not recorded in ConfigMap lab-ngram-specpilot-acceptance" in " ".join(
        checked.output.split())


def test_borderline_acceptance_warns_and_can_fail(fake_smoke_lab, tmp_path):
    lab = fake_smoke_lab
    configure(lab, acceptance=[0.75, 0.55, 0.4])
    run = lab.smoke(SERVICE, tmp_path)
    assert run.rc == 0, run.output
    rep = report(tmp_path, SERVICE)
    assert rep["verdict"] == "warn" and checks(rep)["acceptance"]["status"] == "warn"
    strict = lab.smoke(SERVICE, tmp_path / "strict", extra={"specpilot_smoke_fail_on_warn": True})
    assert strict.rc == 2 and "lab-ngram: WARN - Acceptance rate: draft acceptance rate 0.57" in strict.output


def test_low_acceptance_fails_with_the_acceptance_message(fake_smoke_lab, tmp_path):
    lab = fake_smoke_lab
    configure(lab, acceptance=[0.2, 0.02, 0.0])
    run = lab.smoke(SERVICE, tmp_path)
    assert run.rc == 2, run.output
    assert (
        "lab-ngram: FAIL - Acceptance rate: draft acceptance rate 0.07 (from /metrics) is below the minimum "
        "0.50: speculative decoding adds latency on this workload" in run.output
    )
    rep = report(tmp_path, SERVICE)  # written before the host failed
    assert rep["verdict"] == "fail"
    assert [c["id"] for c in rep["checks"] if c["status"] == "fail"] == ["acceptance"]
    assert checks(rep)["per_position"]["status"] == "warn"
    assert any("collapses to near zero by slot 2" in s for s in rep["interpretation"])
    # the spec's own threshold (smoke.min_acceptance_rate) is honoured
    lenient = lab.smoke(
        SERVICE,
        tmp_path / "lenient",
        extra={"specpilot_smoke": {"prompts": ["x y x y"], "max_tokens": 64, "min_acceptance_rate": 0.05}},
    )
    assert lenient.rc == 0 and report(tmp_path / "lenient", SERVICE)["verdict"] == "warn"


def test_planned_but_no_spec_metrics_fails(fake_smoke_lab, tmp_path):
    lab = fake_smoke_lab
    configure(lab, no_spec_metrics=True)
    run = lab.smoke(SERVICE, tmp_path)
    assert run.rc == 2
    c = checks(report(tmp_path, SERVICE))
    assert c["spec_metrics"]["status"] == "fail"
    assert (
        "speculative decoding was planned (ngram) but /metrics has no vllm:spec_decode_* series"
        in c["spec_metrics"]["message"]
    )


def test_rollback_passes_only_in_off_mode(fake_smoke_lab, tmp_path):
    lab = fake_smoke_lab
    redeploy(lab, fake_env(), without_speculative=True)
    off = lab.smoke(SERVICE, tmp_path / "off", extra={"specpilot_smoke_expect": "off"})
    assert off.rc == 0, off.output
    rep = report(tmp_path / "off", SERVICE)
    assert rep["verdict"] == "pass" and rep["expect"] == "off"
    assert checks(rep)["engine_config"]["message"].startswith("speculative_config=None")
    assert not (tmp_path / "off" / SERVICE / "smoke-acceptance.png").exists()

    on = lab.smoke(SERVICE, tmp_path / "on")
    assert on.rc == 2
    failed = {c["id"] for c in report(tmp_path / "on", SERVICE)["checks"] if c["status"] == "fail"}
    assert {"isvc_args", "pod_args", "engine_config", "spec_metrics", "acceptance"} <= failed


def test_exec_route_probes_from_inside_the_pod(fake_smoke_lab, tmp_path):
    """The in-cluster route: k8s_exec into the predictor pod (the lab serves pods/exec over WebSocket,
    podexec.py), the probes sent by the pod's own Python. The lab's pods share this machine's network,
    so the engine listens on a port of its own rather than 8080: specpilot_smoke_exec_url names it, as
    it would name any port a runtime serves on."""
    lab = fake_smoke_lab
    lab.deploy(SERVICE)  # with speculative decoding, whatever the tests before left (the rollout is waited for)
    pod = lab.wait_single_ready_pod(SERVICE, 90)
    port = lab.ctl.runs[(NAMESPACE, pod["metadata"]["name"])].port
    url = "http://127.0.0.1:%d" % port
    run = lab.smoke(
        SERVICE, tmp_path, extra={"specpilot_smoke_access": "exec", "specpilot_smoke_exec_url": url}
    )
    rep = report(tmp_path, SERVICE)
    assert run.rc == 0, (checks(rep)["probes"], run.output[-3000:])
    assert rep["access"]["mode"] == "exec" and rep["access"]["url"] == url
    assert checks(rep)["probes"]["status"] == "pass", checks(rep)["probes"]
    # at the default URL nothing answers in the lab: the report says what the pod's Python met
    run = lab.smoke(SERVICE, tmp_path / "default", extra={"specpilot_smoke_access": "exec"})
    assert run.rc == 2
    message = checks(report(tmp_path / "default", SERVICE))["probes"]["message"]
    assert message == "8 of 8 failed: URLError: [Errno 111] Connection refused", message


def test_missing_service_fails_with_a_report(fake_smoke_lab, tmp_path):
    run = fake_smoke_lab.smoke("lab-draft", tmp_path, extra={"specpilot_smoke_ready_timeout": 0})
    assert run.rc == 2
    rep = report(tmp_path, "lab-draft")
    c = checks(rep)
    assert c["inferenceservice"]["message"] == "InferenceService specpilot-lab/lab-draft not found"
    assert c["probes"]["message"] == "no probe requests were sent: the InferenceService does not exist"
    assert json.dumps(rep)  # a complete report all the same
