"""deploy.yml with resource LLMInferenceService (issue 35), against the lab's API server with KServe's upstream
v0.20.0 CRDs (the LLMInferenceService one from ../shared, never committed) and a stand-in for KServe's llmisvc
controller (what kserve v0.20.0 pkg/controller/v1alpha2/llmisvc/workload_single_node.go writes: the decode
Deployment <name>-kserve, the prefill one <name>-kserve-prefill, their pods, the conditions, status.url).

One service with prefill/decode disaggregation and a draft on the PVC: the server-side apply (after the strict CRD
check and the server-side dry run) puts the speculative config in the decode workload's container main only, the
draft as a second volume; the wait holds until the decode Deployment runs those args, the prefill one is
available, Ready and status.url; a second deploy changes nothing.  The stand-in
holds the rollout until the test releases it, so the wait is seen waiting for the decode Deployment."""

from __future__ import annotations

import copy
import threading

import pytest

from deploy_helpers import DRAFT, FakeKServe, create_namespace, get, run_deploy, write_inventory
from ansible_collections.specpilot.core.plugins.module_utils.service import live, llmisvc, spec_flags
from specpilot_lab.testing import UPSTREAM_CRDS

pytestmark = pytest.mark.slow

LLM = ("serving.kserve.io/v1alpha2", "LLMInferenceService")
UPSTREAM_LLM = UPSTREAM_CRDS / "llmisvc" / "serving.kserve.io_llminferenceservices.yaml"
NS = "deploy-llm"


class FakeLLMKServe(FakeKServe):
    """KServe's llmisvc controller and a kubelet, as far as deploy can tell, for every LLMInferenceService of
    the namespace: each workload's Deployment gets spec.template (spec.prefill.template) as its pod template,
    pods that run, Available; then WorkloadsReady, RouterReady, Ready and status.url."""

    def __init__(self, emu, namespace, release):
        super().__init__(emu, namespace)
        self.release = release
        self.seen_waiting = False

    def reconcile_all(self) -> None:
        for obj in self.res(*LLM).get(namespace=self.ns).to_dict()["items"]:
            self.reconcile_llm(obj)

    def _workload(self, obj, suffix, template, component, ready):
        name = obj["metadata"]["name"]
        dname = name + suffix
        labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": component,
                  "app.kubernetes.io/part-of": "llminferenceservice"}
        tmpl = {"metadata": {"labels": labels}, "spec": copy.deepcopy(template)}
        dep_api = self.res("apps/v1", "Deployment")
        try:
            dep = dep_api.get(name=dname, namespace=self.ns).to_dict()
        except Exception:  # noqa: BLE001
            dep = dep_api.create(namespace=self.ns, body={
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": dname, "labels": labels},
                "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": tmpl}}).to_dict()
        if dep["spec"]["template"] != tmpl:
            dep["spec"]["template"] = tmpl
            dep.pop("status", None)
            dep = dep_api.replace(namespace=self.ns, body=dep).to_dict()
        gen = dep["metadata"]["generation"]
        if not ready:
            return False
        pod_name = "%s-%d" % (dname, gen)
        pod_api = self.res("v1", "Pod")
        pods = pod_api.get(namespace=self.ns, label_selector="app.kubernetes.io/name=%s,app.kubernetes.io/component=%s"
                           % (name, component)).to_dict()["items"]
        for pod in pods:
            if pod["metadata"]["name"] != pod_name:
                pod_api.delete(name=pod["metadata"]["name"], namespace=self.ns)
        if pod_name not in {p["metadata"]["name"] for p in pods}:
            pod_api.create(namespace=self.ns, body={"apiVersion": "v1", "kind": "Pod",
                                                    "metadata": {"name": pod_name, "labels": labels},
                                                    "spec": copy.deepcopy(template)})
            self._status("v1", "Pod", pod_name, {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0,
                                       "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]})
        self._status("apps/v1", "Deployment", dname, {"observedGeneration": gen, "replicas": 1,
                                                      "updatedReplicas": 1, "availableReplicas": 1, "readyReplicas": 1})
        return True

    def reconcile_llm(self, obj) -> None:
        spec = obj["spec"]
        ready = self.release.is_set()
        if not ready:
            self.seen_waiting = True
        done = self._workload(obj, "-kserve", spec["template"], "llminferenceservice-workload", ready)
        if spec.get("prefill"):
            done = self._workload(obj, "-kserve-prefill", spec["prefill"]["template"],
                                  "llminferenceservice-workload-prefill", ready) and done
        status = "True" if done else "False"
        conds = [{"type": t, "status": status} for t in ("WorkloadsReady", "RouterReady", "Ready")]
        self._status(*LLM, obj["metadata"]["name"], {
            "conditions": conds, "observedGeneration": obj["metadata"]["generation"],
            **({"url": "http://%s.%s.example" % (obj["metadata"]["name"], self.ns)} if done else {})})


@pytest.fixture(scope="module")
def upstream_llm(emulator_factory):
    if not UPSTREAM_LLM.is_file():
        pytest.skip("upstream LLMInferenceService CRD not found at %s" % UPSTREAM_LLM)
    return emulator_factory(crds=[str(UPSTREAM_CRDS), str(UPSTREAM_LLM)], name="deploy-llm-upstream")


def test_deploy_puts_speculative_decoding_in_the_decode_workload_and_waits_for_it(upstream_llm, tmp_path):
    emu = upstream_llm
    create_namespace(emu, NS)
    service = {
        "specpilot_resource": "LLMInferenceService",
        "specpilot_llm": {"prefill": {"replicas": 1}},
        "specpilot_speculative": {"method": "draft_model", "num_speculative_tokens": 3},
        "specpilot_draft": DRAFT,
        "specpilot_acknowledged_warnings": ["draft-ratio", "async-scheduling-disabled"],
        "specpilot_deploy_probe": "never",
    }
    inv = write_inventory(tmp_path / "inv", NS, {"llm-pd": service})
    release = threading.Event()
    with FakeLLMKServe(emu, NS, release) as fake:
        first = run_deploy_released(emu, tmp_path, inv, release, fake)
        assert first.rc == 0, first.out[-6000:]
        second = run_deploy(emu, tmp_path / "again", inv)
        deployed = get(emu, *LLM, "llm-pd", NS)
        rollbacks = [rollback(emu, tmp_path / ("rb%d" % i), inv, mode) for i, mode in enumerate(("off", "off"))]
        off = get(emu, *LLM, "llm-pd", NS)
        restored = rollback(emu, tmp_path / "rb-restore", inv, "restore")
    assert second.rc == 0, second.out[-6000:]
    assert second.recap()["llm-pd"]["changed"] == 0, second.changed_tasks()
    obj = deployed
    view = live.view(obj)
    assert isinstance(view, live.LLMInferenceServiceView) and view.speculative
    config = [a for a in view.args if spec_flags.is_speculative(a)]
    assert config == ['--speculative-config={"method":"draft_model","model":"/mnt/draft","num_speculative_tokens":3}']
    assert view.prefill_args is not None and not spec_flags.speculative_args(view.prefill_args)
    assert obj["spec"]["model"]["uri"] == "pvc://specpilot-lab-models/target"
    main = next(c for c in obj["spec"]["template"]["containers"] if c["name"] == llmisvc.CONTAINER)
    assert main["volumeMounts"] == [{"name": "specpilot-draft", "mountPath": "/mnt/draft", "readOnly": True,
                                     "subPath": "draft"}]
    # the decode Deployment runs what was applied; the record of the revision is on the object
    dep = get(emu, "apps/v1", "Deployment", "llm-pd-kserve", NS)
    assert next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "main")["args"] == main["args"]
    assert obj["status"]["url"] == "http://llm-pd.%s.example" % NS
    # the wait waited (the stand-in held the rollout until the object was applied); the deploy's own dry run
    # took the object
    assert "] progressing [" in first.out and "waiting: " in first.out
    assert "ok: [llm-pd] => (item=LLMInferenceService/llm-pd)" in first.out


def run_deploy_released(emu, tmp_path, inv, release, fake):
    """deploy.yml while the stand-in holds the rollout; released once the run has applied the object and the
    stand-in has seen it (the wait then has something to wait for)."""
    from deploy_helpers import Run, wait_for

    run = Run(emu, tmp_path / "first", inv)
    wait_for(lambda: get(emu, *LLM, "llm-pd", NS) is not None and fake.seen_waiting or not run.running(),
             timeout=240, what="the LLMInferenceService applied")
    release.set()
    return run.wait(600)
    _check_rollbacks(emu, deployed, off, rollbacks, restored)


def rollback(emu, tmp, inv, mode):
    from deploy_helpers import Run

    return Run(emu, tmp, inv, "-e", "specpilot_rollback_mode=%s" % mode, "-e", "specpilot_rollback_smoke=false",
               playbook="playbooks/rollback.yml").wait(600)


def _check_rollbacks(emu, deployed, off, rollbacks, restored):
    """rollback.yml off removes the speculative config from the decode workload (prefill and the rest kept),
    and waits for the decode Deployment to run without it; a second off changes nothing; restore puts the
    recorded spec back."""
    first, second = rollbacks
    assert first.rc == 0, first.out[-6000:]
    assert first.recap()["llm-pd"]["changed"] >= 1
    view = live.view(off)
    assert not view.speculative and view.args == live.view(deployed).prefill_args
    assert off["spec"]["prefill"] == deployed["spec"]["prefill"]
    dep = get(emu, "apps/v1", "Deployment", "llm-pd-kserve", NS)
    main = next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "main")
    assert not spec_flags.speculative_args(llmisvc.engine_words(main["args"]))
    assert second.rc == 0, second.out[-6000:]
    assert second.recap()["llm-pd"]["changed"] == 0, second.changed_tasks()
    assert restored.rc == 0, restored.out[-6000:]
    back = get(emu, *LLM, "llm-pd", NS)
    assert back["spec"] == deployed["spec"] and live.view(back).speculative


def test_canary_refuses_an_llminferenceservice_before_any_write(upstream_llm, tmp_path):
    """canary.yml on an LLMInferenceService fails saying why (no traffic-split field), and writes nothing."""
    from deploy_helpers import Run

    emu = upstream_llm
    service = {"specpilot_resource": "LLMInferenceService", "specpilot_speculative": {"method": "ngram",
               "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}}
    inv = write_inventory(tmp_path / "inv", "canary-llm", {"llm-canary": service})
    mark = emu.control.mark()
    run = Run(emu, tmp_path, inv, playbook="playbooks/canary.yml").wait(300)
    assert run.rc != 0
    assert "canary-llm/llm-canary: an LLMInferenceService has no traffic-split field" in run.out
    assert emu.control.writes(since=mark, include_dry_run=True) == []
