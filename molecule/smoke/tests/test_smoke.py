"""molecule verify for the smoke scenario, with testinfra: the smoke report, the InferenceService through
kubectl, and the engine process the lab runs for it, its arguments read from the process table as an
operator would on a node."""

import json
import os

NAMESPACE = "specpilot-lab"
SERVICE = "lab-ngram"
# the machine itself (the inventory's localhost); the platform "lab" is only molecule's name for the lab
testinfra_hosts = ["ansible://localhost"]


def report(host):
    path = os.path.join(os.environ["SPECPILOT_SMOKE_REPORT_DIR"], SERVICE, "smoke.json")
    return json.loads(host.file(path).content_string)


def isvc(host):
    out = host.check_output(
        "kubectl --kubeconfig %s -n %s get inferenceservice %s -o json",
        os.environ["K8S_AUTH_KUBECONFIG"],
        NAMESPACE,
        SERVICE,
    )
    return json.loads(out)


def test_the_smoke_passed_on_the_running_ngram_engine(host):
    rep = report(host)
    assert rep["verdict"] == "pass", rep["message"]
    assert rep["engine"]["speculative_config"]["method"] == "ngram"
    assert rep["engine"]["speculative_config"]["num_spec_tokens"] == 3
    assert rep["figures"]["acceptance_rate"] > 0.8 and rep["figures"]["metrics"]["num_draft_tokens"] > 0
    assert {c["id"]: c for c in rep["checks"]}["log_cross_check"]["status"] == "pass"
    assert len(rep["plots"]) == 1


def test_the_report_files_are_there(host):
    for name in ("smoke.md", "smoke-acceptance.png"):
        assert host.file(os.path.join(os.environ["SPECPILOT_SMOKE_REPORT_DIR"], SERVICE, name)).is_file


def test_the_engine_process_runs_the_speculative_arguments_the_service_declares(host):
    args = isvc(host)["spec"]["predictor"]["model"]["args"]
    declared = [a for a in args if a.startswith("--speculative-config=")]
    assert len(declared) == 1
    engines = [p for p in host.process.filter() if "--speculative-config=" in (p.args or "")]
    assert engines, "no engine process with --speculative-config"
    assert any(declared[0].split("=", 1)[1] in p.args for p in engines), [p.args for p in engines]
