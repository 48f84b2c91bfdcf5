"""The lab controller's LLMInferenceService (KServe v0.20.0's llmisvc controller as a client sees it),
with the stand-in engine: the merged spec (well-known configs, baseRefs), the workload Deployments
(decode; prefill with spec.prefill) whose container main runs KServe's bash template with the
args unchanged, the workload Service, the status (conditions, url, addresses, appliedConfigs), and
the cleanup of a removed workload and of a deleted service (issue 35)."""

from __future__ import annotations

import json
import shlex
import urllib.request

import pytest

from specpilot_lab import seed
from specpilot_lab.processes import LabPaths

pytestmark = [pytest.mark.lab]

API = "serving.kserve.io/v1alpha2"
KIND = "LLMInferenceService"
SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
# KServe's template runs `eval "exec vllm serve ... $@"`: an arg holding JSON is quoted for the shell
SPEC_ARG = shlex.quote("--speculative-config=" + json.dumps(SPEC))


def llmisvc(name: str, **spec) -> dict:
    body = {
        "model": {"uri": "pvc://models/target", "name": "tiny"},
        "template": {"containers": [{"name": "main", "args": ["--max-model-len=512", SPEC_ARG]}]},
        "router": {"route": {}, "gateway": {}},
    }
    body.update(spec)
    return {"apiVersion": API, "kind": KIND, "metadata": {"name": name}, "spec": body}


def conditions(lab, ns: str, name: str) -> dict[str, dict]:
    obj = lab.get(API, KIND, name, ns) or {}
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def wait_ready(lab, ns: str, name: str) -> dict:
    lab.wait(
        lambda: conditions(lab, ns, name).get("Ready", {}).get("status") == "True",
        30,
        f"{name} Ready ({json.dumps(conditions(lab, ns, name))[:600]})",
    )
    return lab.get(API, KIND, name, ns)


def workload_pods(lab, ns: str, name: str, role: str) -> list[dict]:
    sel = f"app.kubernetes.io/name={name},llm-d.ai/role={role}"
    return lab.list("v1", "Pod", ns, label_selector=sel)


def main_container(pod: dict) -> dict:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "main")


def served_models(url: str) -> list[str]:
    with urllib.request.urlopen(url + "/v1/models", timeout=10) as resp:
        return [m["id"] for m in json.loads(resp.read())["data"]]


def test_decode_workload_baserefs_status_and_delete(fake_lab, fake_models):
    lab = fake_lab()
    ns = lab.namespace()
    lab.pvc_with_models(ns, fake_models)
    # a user's config, merged under the service's spec (containers and env by name, args replaced)
    lab.create(
        {
            "apiVersion": API,
            "kind": "LLMInferenceServiceConfig",
            "metadata": {"name": "team-defaults"},
            "spec": {
                "template": {
                    "containers": [
                        {
                            "name": "main",
                            "args": ["--from-config"],
                            "env": [{"name": "FROM_CONFIG", "value": "yes"}],
                            "resources": {"requests": {"cpu": "1"}},
                        }
                    ]
                }
            },
        },
        ns,
    )
    lab.create(llmisvc("lab-llm", baseRefs=[{"name": "team-defaults"}]), ns)
    svc = wait_ready(lab, ns, "lab-llm")
    status = svc["status"]
    assert status["appliedConfigs"] == [
        {"name": "kserve-config-llm-router-route", "namespace": "kserve", "source": "Preset"},
        {"name": "kserve-config-llm-template", "namespace": "kserve", "source": "Preset"},
        {"name": "team-defaults", "namespace": ns, "source": "UserRef"},
    ]
    conds = {t: (c["status"], c.get("severity")) for t, c in conditions(lab, ns, "lab-llm").items()}
    assert conds == {
        "GatewaysReady": ("True", "Info"),
        "HTTPRoutesReady": ("True", "Info"),
        "MainWorkloadReady": ("True", "Info"),
        "PresetsCombined": ("True", "Info"),
        "Ready": ("True", None),
        "RouterReady": ("True", None),
        "WorkloadsReady": ("True", None),
    }
    assert status["observedGeneration"] == svc["metadata"]["generation"]
    assert status["addresses"] == [{"url": status["url"]}]
    assert served_models(status["url"]) == ["tiny"]  # the decode engine answers at status.url

    deploy = lab.get("apps/v1", "Deployment", "lab-llm-kserve", ns)
    labels = {
        "app.kubernetes.io/component": "llminferenceservice-workload",
        "app.kubernetes.io/name": "lab-llm",
        "app.kubernetes.io/part-of": "llminferenceservice",
        "kserve.io/component": "workload",
        "llm-d.ai/role": "both",
    }
    assert deploy["metadata"]["labels"] == labels
    assert deploy["metadata"]["ownerReferences"][0]["kind"] == KIND
    (pod,) = workload_pods(lab, ns, "lab-llm", "both")
    main = main_container(pod)
    assert main["args"] == ["--max-model-len=512", SPEC_ARG]  # the service's args replace the config's
    assert main["command"][:2] == ["/bin/bash", "-c"] and 'exec vllm serve /mnt/models' in main["command"][2]
    assert '--served-model-name "tiny" "publishers/demo/models/tiny"' in main["command"][2]  # the template's variables
    assert {"name": "FROM_CONFIG", "value": "yes"} in main["env"] and {"name": "HOME", "value": "/home"} in main["env"]
    assert main["resources"] == {"requests": {"cpu": "1"}}
    assert {"name": "kserve-pvc-source", "mountPath": "/mnt/models", "readOnly": True, "subPath": "target"} in main[
        "volumeMounts"
    ]
    service = lab.get("v1", "Service", "lab-llm-kserve-workload-svc", ns)
    assert service["spec"]["selector"] == {
        "app.kubernetes.io/name": "lab-llm",
        "app.kubernetes.io/part-of": "llminferenceservice",
        "kserve.io/component": "workload",
    }
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [("http", 8000)]
    # the bash template ran vllm serve with the args as the engine parses them, the JSON intact
    log = lab.pod_log(ns, pod["metadata"]["name"], "main")
    assert "[access-log-detect] vllm version='0.32.0'" in log
    assert "speculative_config=SpeculativeConfig(method='ngram', model=None, num_spec_tokens=3)" in log

    # what `make lab-status` says of an LLMInferenceService service (seed.describe's lines)
    paths = LabPaths(lab.root / "status")
    paths.root.mkdir()
    paths.kubeconfig.symlink_to(lab.emu.kubeconfig)
    lines = seed._llm_lines(paths, seed.Needs(namespace=ns, llm_services=["lab-llm", "not-yet"]))
    assert lines == [
        "inventories/lab: LLMInferenceServiceConfigs in kserve: kserve-config-llm-decode-template, "
        "kserve-config-llm-prefill-template, kserve-config-llm-router-route, kserve-config-llm-scheduler, "
        "kserve-config-llm-template",
        f"inventories/lab: LLMInferenceService {ns}/lab-llm: Ready True, url {status['url']}",
        f"inventories/lab: LLMInferenceService {ns}/not-yet: not deployed (deploy.yml)",
    ]

    # a config the service names that does not exist: PresetsCombined False, the workload left running
    lab.patch(API, KIND, "lab-llm", ns, {"spec": {"baseRefs": [{"name": "missing"}]}})
    lab.wait(
        lambda: conditions(lab, ns, "lab-llm").get("PresetsCombined", {}).get("reason") == "ConfigNotFound",
        20,
        "PresetsCombined ConfigNotFound",
    )
    presets = conditions(lab, ns, "lab-llm")["PresetsCombined"]
    assert presets["message"] == f'LLMInferenceServiceConfig "missing" not found in namespaces [{ns} kserve]'
    assert "appliedConfigs" not in lab.get(API, KIND, "lab-llm", ns)["status"]

    lab.delete(API, KIND, "lab-llm", ns)
    lab.wait(
        lambda: not workload_pods(lab, ns, "lab-llm", "both")
        and lab.get("apps/v1", "Deployment", "lab-llm-kserve", ns) is None
        and lab.get("v1", "Service", "lab-llm-kserve-workload-svc", ns) is None
        and not lab.ctl.runs,
        20,
        "the workload, its Service and its engine gone",
    )


def test_prefill_workload_added_and_removed(fake_lab, fake_models):
    lab = fake_lab()
    ns = lab.namespace()
    lab.pvc_with_models(ns, fake_models)
    prefill = {"template": {"containers": [{"name": "main", "args": ["--max-model-len=512"]}]}}
    lab.create(llmisvc("pd", prefill=prefill), ns)
    status = wait_ready(lab, ns, "pd")["status"]
    assert [c["name"] for c in status["appliedConfigs"]] == [
        "kserve-config-llm-router-route",
        "kserve-config-llm-prefill-template",
        "kserve-config-llm-decode-template",
    ]
    assert conditions(lab, ns, "pd")["PrefillWorkloadReady"]["status"] == "True"
    decode = lab.get("apps/v1", "Deployment", "pd-kserve", ns)
    pre = lab.get("apps/v1", "Deployment", "pd-kserve-prefill", ns)
    assert decode["metadata"]["labels"]["llm-d.ai/role"] == "decode"
    assert pre["metadata"]["labels"] == {
        "app.kubernetes.io/component": "llminferenceservice-workload-prefill",
        "app.kubernetes.io/name": "pd",
        "app.kubernetes.io/part-of": "llminferenceservice",
        "kserve.io/component": "workload",
        "llm-d.ai/role": "prefill",
    }
    (dpod,) = workload_pods(lab, ns, "pd", "decode")
    (ppod,) = workload_pods(lab, ns, "pd", "prefill")
    assert main_container(dpod)["args"] == ["--max-model-len=512", SPEC_ARG]
    assert main_container(ppod)["args"] == ["--max-model-len=512"]  # as the spec gives them
    assert "--port 8001" in main_container(dpod)["command"][2] and "--port 8000" in main_container(ppod)["command"][2]
    assert "speculative_config=SpeculativeConfig(method='ngram'" in lab.pod_log(ns, dpod["metadata"]["name"], "main")
    assert "speculative_config=None" in lab.pod_log(ns, ppod["metadata"]["name"], "main")
    assert served_models(status["url"]) == ["tiny"]

    # removing spec.prefill changes the main workload's llm-d.ai/role (decode -> both), part of its
    # Deployment's selector, which the API refuses to change: KServe's reconcile stops there
    lab.patch(API, KIND, "pd", ns, {"spec": {"prefill": None}})
    main = lab.wait(
        lambda: (c := conditions(lab, ns, "pd").get("MainWorkloadReady", {})).get("status") == "False" and c,
        30,
        "MainWorkloadReady False",
    )
    assert main["reason"] == "ReconcileSingleNodeWorkloadError"
    assert main["message"].startswith(
        f'failed to reconcile main workload: failed to get defaults for v1.Deployment {ns}/pd-kserve: Deployment.apps '
        '"pd-kserve" is invalid: spec.selector: Invalid value: '
    ) and main["message"].endswith("field is immutable")
    assert conditions(lab, ns, "pd")["Ready"]["reason"] == "ReconcileSingleNodeWorkloadError"
    assert lab.get("apps/v1", "Deployment", "pd-kserve-prefill", ns) is not None
