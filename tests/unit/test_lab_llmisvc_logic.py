"""KServe's LLMInferenceService decisions as the lab controller makes them (lab/specpilot_lab/controller/llmisvc.py):
names, which well-known configs a spec asks for, the merge, the Go template variables, the workloads, the conditions."""

from __future__ import annotations

import pytest

from specpilot_lab.controller import llmisvc, llmisvc_configs


def svc(name: str = "lab-llm", ns: str = "demo", **spec) -> dict:
    return {
        "apiVersion": "serving.kserve.io/v1alpha2",
        "kind": "LLMInferenceService",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"model": {"uri": "pvc://models/target"}, **spec},
    }


def configs(extra: dict | None = None):
    known = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in llmisvc_configs.well_known()}
    known.update(extra or {})
    return lambda ns, name: known.get((ns, name))


def test_child_names_as_kmeta_makes_them():
    assert llmisvc.main_deployment_name("lab-llm") == "lab-llm-kserve"
    assert llmisvc.prefill_deployment_name("lab-llm") == "lab-llm-kserve-prefill"
    assert llmisvc.workload_service_name("lab-llm") == "lab-llm-kserve-workload-svc"
    long = "x" * 60
    name = llmisvc.child_name(long, "-kserve-workload-svc")
    assert len(name) == 63 and name.endswith("-kserve-workload-svc") and name != llmisvc.child_name("y" * 60, "-kserve-workload-svc")


@pytest.mark.parametrize(
    "spec, refs",
    [
        ({}, ["kserve-config-llm-template"]),
        ({"prefill": {}}, ["kserve-config-llm-prefill-template", "kserve-config-llm-decode-template"]),
        ({"worker": {}}, ["kserve-config-llm-worker-data-parallel"]),
        ({"router": {"route": {}, "gateway": {}}}, ["kserve-config-llm-router-route", "kserve-config-llm-template"]),
        (
            {"router": {"scheduler": {}, "route": {"http": {"refs": [{"name": "mine"}]}}}},
            ["kserve-config-llm-scheduler", "kserve-config-llm-template"],
        ),
    ],
)
def test_well_known_refs(spec, refs):
    assert llmisvc.well_known_refs(spec) == refs


def test_merge_by_name_args_replaced_and_variables_substituted():
    team = {
        "metadata": {"name": "team", "namespace": "demo"},
        "spec": {"template": {"containers": [{"name": "main", "args": ["--from-config"], "env": [{"name": "A", "value": "1"}]}]}},
    }
    s = svc(
        parallelism={"tensor": 2},
        baseRefs=[{"name": "team"}],
        template={"containers": [{"name": "main", "args": ["--max-model-len=512"], "env": [{"name": "B", "value": "2"}]}]},
    )
    merged, applied = llmisvc.combine(s, configs({("demo", "team"): team}))
    assert applied == [
        {"name": "kserve-config-llm-template", "namespace": "kserve", "source": "Preset"},
        {"name": "team", "namespace": "demo", "source": "UserRef"},
    ]
    (main,) = merged["template"]["containers"]
    assert main["args"] == ["--max-model-len=512"]
    assert {e["name"] for e in main["env"]} == {"HOME", "VLLM_LOGGING_LEVEL", "HF_HUB_CACHE", "A", "B"}
    script = main["command"][2]
    assert main["command"][0] == "/bin/bash" and main["command"][3] == "--"
    assert '--served-model-name "lab-llm" "publishers/demo/models/lab-llm"' in script  # the name defaults
    # ``{{-`` trims the JSON text's whitespace, where the script's newlines are escaped (as in Go)
    assert "--port 8000 \\\n  ${ACCESS_LOG_ARGS} \\\n --tensor-parallel-size 2 \\\n" in script
    assert merged["model"] == {"uri": "pvc://models/target", "name": "lab-llm"}


def test_missing_config_and_template_errors():
    with pytest.raises(llmisvc.ConfigNotFound, match=r'"nope" not found in namespaces \[demo kserve\]'):
        llmisvc.combine(svc(baseRefs=[{"name": "nope"}]), configs())
    bad = {"metadata": {"name": "bad", "namespace": "kserve"}, "spec": {"labels": {"x": "{{ .Spec.Nope.Deeper }}"}}}
    with pytest.raises(llmisvc.CombineError, match="nil pointer evaluating Spec.Nope.Deeper"):
        llmisvc.combine(svc(baseRefs=[{"name": "bad"}]), configs({("kserve", "bad"): bad}))
    assert llmisvc.replace_variables({"x": "{{ ChildName .ObjectMeta.Name `-sa` }}"}, svc()) == {"x": "lab-llm-sa"}
    assert llmisvc.replace_variables({"x": "{{ if .GlobalConfig.EnableTLS }}tls{{ else }}plain{{ end }}"}, svc()) == {
        "x": "plain"
    }


def test_workloads_labels_model_mount_and_service():
    s = svc(prefill={"template": {"containers": [{"name": "main"}]}})
    merged, _ = llmisvc.combine(s, configs())
    decode, prefill = llmisvc.workload(s, merged, False), llmisvc.workload(s, merged, True)
    assert decode["metadata"]["name"] == "lab-llm-kserve" and decode["metadata"]["labels"]["llm-d.ai/role"] == "decode"
    assert prefill["metadata"]["labels"]["app.kubernetes.io/component"] == "llminferenceservice-workload-prefill"
    pod = decode["spec"]["template"]["spec"]
    assert {"name": "kserve-pvc-source", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}} in pod["volumes"]
    assert "--port 8001" in pod["containers"][0]["command"][2]
    assert llmisvc.workload(svc(), llmisvc.combine(svc(), configs())[0], True) is None
    service = llmisvc.workload_service(s, merged)
    assert service["spec"]["selector"] == llmisvc.workload_selector("lab-llm")
    assert llmisvc.owner_of(decode["spec"]["template"]["metadata"]["labels"]) == "lab-llm"


def test_conditions_as_the_living_condition_set():
    def deploy(available: str, progressing: str = "True") -> dict:
        return {"status": {"conditions": [
            {"type": "Progressing", "status": progressing, "reason": "ProgressDeadlineExceeded", "message": "slow"},
            {"type": "Available", "status": available, "reason": "MinimumReplicasUnavailable", "message": "none"},
        ]}}

    assert llmisvc.deployment_condition("MainWorkloadReady", deploy("True"))["status"] == "True"
    down = llmisvc.deployment_condition("MainWorkloadReady", deploy("False"))
    assert (down["reason"], down["message"]) == ("MinimumReplicasUnavailable", "none")
    conds = llmisvc.readiness([llmisvc.condition("PresetsCombined", True), down] + llmisvc.router_conditions({"router": {"route": {}}}))
    by = {c["type"]: c for c in conds}
    assert [c["type"] for c in conds] == sorted(by)
    assert by["Ready"]["status"] == "False" and by["Ready"]["reason"] == "MinimumReplicasUnavailable"
    assert "severity" not in by["Ready"] and by["MainWorkloadReady"]["severity"] == "Info"
    assert by["RouterReady"]["status"] == "True" and by["WorkloadsReady"]["status"] == "False"
