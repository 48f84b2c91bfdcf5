"""KServe's rules as the lab controller applies them: webhook, runtime selection, container
merge, placeholders, storage, path and command mapping, scheduling filters."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from specpilot_lab.controller import kserve, mapping, scheduling


def isvc(predictor: dict, name: str = "tiny", ns: str = "demo", **meta) -> dict:
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": ns, **meta},
        "spec": {"predictor": predictor},
    }


def runtime(name: str, formats: list[dict], **spec) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "supportedModelFormats": formats,
            "containers": [{"name": "kserve-container", "image": "x"}],
            **spec,
        },
    }


# ---------------------------------------------------------------- webhook
def test_webhook_storage_uri_and_storage_uris():
    with pytest.raises(kserve.SpecError) as exc:
        kserve.validate_webhook(
            isvc(
                {
                    "model": {"storageUri": "pvc://a/"},
                    "storageUris": [{"uri": "pvc://b", "mountPath": "/mnt/b"}],
                }
            )
        )
    assert (
        exc.value.webhook and exc.value.message == "Setting both StorageURI and StorageURIs is not supported."
    )
    assert exc.value.status_message.startswith(
        'admission webhook "inferenceservice.kserve-webhook-server.validator"'
    )


@pytest.mark.parametrize(
    "entries, message",
    [
        ([{"uri": "", "mountPath": "/mnt/a"}], "storage URI cannot be empty"),
        ([{"uri": "s3://a", "mountPath": "/"}], "storage path cannot be empty"),
        ([{"uri": "s3://a", "mountPath": "rel/a"}], "storage path must be absolute: rel/a"),
        (
            [{"uri": "s3://a", "mountPath": "/mnt/../etc"}],
            "storage path cannot contain '..' for security reasons: /mnt/../etc",
        ),
        (
            [{"uri": "s3://a", "mountPath": "/a/x"}, {"uri": "s3://b", "mountPath": "/b/y"}],
            "storage paths must have a common parent directory. Current paths: [/a/x /b/y] have no common parent "
            "beyond root",
        ),
        (
            [
                {"uri": "s3://a", "mountPath": "/m/x"},
                {"uri": "s3://b", "mountPath": "/m/y"},
                {"uri": "pvc://c", "mountPath": "/p"},
                {"uri": "pvc://d", "mountPath": "/p"},
            ],
            "PVC storage paths must be unique",
        ),
    ],
)
def test_webhook_storage_uris_rules(entries, message):
    assert kserve.validate_storage_uris(entries) == message


def test_webhook_accepts_valid_and_keeps_kserve_quirks():
    kserve.validate_webhook(isvc({"model": {"storageUri": "pvc://a/"}}))
    ok = [
        {"uri": "s3://a", "mountPath": "/mnt/models/target"},
        {"uri": "s3://b", "mountPath": "/mnt/models/draft"},
    ]
    assert kserve.validate_storage_uris(ok) is None
    # duplicate PVC paths pass when there is at most one non-PVC entry (KServe returns early)
    assert (
        kserve.validate_storage_uris(
            [{"uri": "pvc://c", "mountPath": "/p"}, {"uri": "pvc://d", "mountPath": "/p"}]
        )
        is None
    )
    assert kserve.find_common_parent_path(["/mnt/models/target", "/mnt/models/draft"]) == "/mnt/models"


# ---------------------------------------------------------------- runtimes
def test_runtime_by_name_prefers_the_namespace():
    ns_rt = runtime("vllm", [{"name": "vLLM"}])
    cl_rt = runtime("vllm", [{"name": "vLLM"}])
    kind, rt = kserve.select_runtime(
        isvc({"model": {"modelFormat": {"name": "vLLM"}, "runtime": "vllm"}}), [ns_rt], [cl_rt]
    )
    assert kind == "ServingRuntime" and rt is ns_rt
    kind, rt = kserve.select_runtime(
        isvc({"model": {"modelFormat": {"name": "vLLM"}, "runtime": "vllm"}}), [], [cl_rt]
    )
    assert kind == "ClusterServingRuntime"


def test_runtime_by_name_errors():
    with pytest.raises(kserve.SpecError) as exc:
        kserve.select_runtime(isvc({"model": {"modelFormat": {"name": "vLLM"}, "runtime": "nope"}}), [], [])
    assert exc.value.reason == "RuntimeNotRecognized"
    with pytest.raises(kserve.SpecError) as exc:
        kserve.select_runtime(
            isvc({"model": {"modelFormat": {"name": "sklearn"}, "runtime": "vllm"}}),
            [runtime("vllm", [{"name": "vLLM"}])],
            [],
        )
    assert exc.value.reason == "NoSupportingRuntime"
    with pytest.raises(kserve.SpecError) as exc:
        kserve.select_runtime(
            isvc({"model": {"modelFormat": {"name": "vLLM"}, "runtime": "off"}}),
            [runtime("off", [{"name": "vLLM"}], disabled=True)],
            [],
        )
    assert exc.value.reason == "RuntimeDisabled"


def test_runtime_auto_select_priority_and_scope():
    low = runtime("low", [{"name": "vLLM", "autoSelect": True, "priority": 1}])
    high = runtime("high", [{"name": "vllm", "autoSelect": True, "priority": 5}])
    manual = runtime("manual", [{"name": "vLLM"}])
    spec = isvc({"model": {"modelFormat": {"name": "vLLM"}}})
    assert kserve.select_runtime(spec, [], [low, high, manual])[1] is high
    assert kserve.select_runtime(spec, [low], [high])[1] is low  # namespace runtimes first
    with pytest.raises(kserve.SpecError) as exc:
        kserve.select_runtime(spec, [manual], [])
    assert str(exc.value) == "no runtime found to support predictor with model type: {vLLM <nil>}"


# ---------------------------------------------------------------- merge
def test_merge_container_appends_args_merges_env_replaces_command():
    rt = {
        "name": "kserve-container",
        "image": "vllm",
        "command": ["python", "-m", "x"],
        "args": ["--port=8080", "--model=/mnt/models"],
        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        "resources": {"limits": {"cpu": "2", "memory": "4Gi"}},
    }
    model = {
        "modelFormat": {"name": "vLLM"},
        "runtime": "r",
        "storageUri": "pvc://m/",
        "args": ["--model=/mnt/models/target"],
        "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    out = kserve.merge_container(rt, model)
    assert out["args"] == ["--port=8080", "--model=/mnt/models", "--model=/mnt/models/target"]
    assert out["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "3"},
        {"name": "C", "value": "4"},
    ]
    assert out["command"] == ["python", "-m", "x"]
    assert out["resources"]["limits"] == {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
    assert "storageUri" not in out and "modelFormat" not in out and out["name"] == "kserve-container"
    out = kserve.merge_container(rt, {"command": ["vllm", "serve"]})
    assert out["command"] == ["vllm", "serve"] and out["args"] == rt["args"]


def test_placeholders():
    meta = {"name": "tiny", "namespace": "demo", "labels": {"team": "a"}, "annotations": {"x/y": "z"}}
    c = {
        "args": [
            "--served-model-name={{.Name}}",
            "{{ .Namespace }}",
            "{{.Labels.team}}",
            "{{.Annotations.x/y}}",
        ]
    }
    assert kserve.replace_placeholders(c, meta)["args"] == ["--served-model-name=tiny", "demo", "a", "z"]


# ---------------------------------------------------------------- storage
def test_storage_uri_pvc_honours_sub_path_and_storage_uris_mount_the_whole_claim():
    m = kserve.resolve_storage(isvc({"model": {"storageUri": "pvc://models/v1/target"}}))
    assert [(x.kind, x.claim, x.sub_path, x.mount_path) for x in m] == [
        ("pvc", "models", "v1/target", "/mnt/models")
    ]
    m = kserve.resolve_storage(
        isvc(
            {
                "model": {},
                "storageUris": [
                    {"uri": "pvc://models/target", "mountPath": "/mnt/models/target"},
                    {"uri": "oci://reg/img:v1", "mountPath": "/mnt/draft/model"},
                ],
            }
        )
    )
    assert (m[0].kind, m[0].claim, m[0].sub_path, m[0].mount_path) == (
        "pvc",
        "models",
        "",
        "/mnt/models/target",
    )
    assert (m[1].kind, m[1].image, m[1].mount_path) == ("oci", "reg/img:v1", "/mnt/draft/model")
    rw = kserve.resolve_storage(
        isvc({"model": {"storageUri": "pvc://m/"}}, annotations={"storage.kserve.io/readonly": "false"})
    )
    assert rw[0].read_only is False


def test_pod_template_modelcar_and_pvc():
    obj = isvc({"model": {"storageUri": "oci://reg/models:v1"}})
    rt = runtime("r", [{"name": "vLLM"}])
    c = kserve.merge_container(kserve.runtime_container(rt), {})
    t = kserve.pod_template(obj, "ClusterServingRuntime", rt, c, kserve.resolve_storage(obj))
    spec = t["spec"]
    assert [x["name"] for x in spec["containers"]] == ["kserve-container", "modelcar"]
    assert spec["initContainers"][0]["name"] == "modelcar-init" and spec["shareProcessNamespace"] is True
    assert spec["containers"][1]["args"][2] == "ln -sf /proc/$$$$/root/models /mnt/models && sleep infinity"
    assert {"name": "MODEL_INIT_MODE", "value": "async"} in spec["containers"][0]["env"]
    assert t["metadata"]["labels"]["serving.kserve.io/inferenceservice"] == "tiny"
    assert t["metadata"]["labels"]["component"] == "predictor"


# ---------------------------------------------------------------- mapping
def test_map_text_and_command():
    mounts = {"/mnt/models": Path("/lab/pvc"), "/tmp": Path("/lab/run/tmp")}
    assert mapping.map_text('{"model": "/mnt/models/draft"}', mounts) == '{"model": "/lab/pvc/draft"}'
    assert mapping.map_text("--model=/mnt/models", mounts) == "--model=/lab/pvc"
    assert mapping.map_text("/mnt/modelsx /x/mnt/models", mounts) == "/mnt/modelsx /x/mnt/models"
    py = Path("/v/bin/python")
    prefix, args = mapping.engine_argv(
        {"command": ["python3", "-m", "vllm.entrypoints.openai.api_server"], "args": ["--port=$(PORT)"]},
        py,
        {"PORT": "8080"},
    )
    assert prefix == [str(py), "-m", "vllm.entrypoints.openai.api_server"] and args == ["--port=8080"]
    assert mapping.engine_argv({"command": ["vllm", "serve", "/mnt/models"], "args": ["--x"]}, py, {})[1] == [
        "--model",
        "/mnt/models",
        "--x",
    ]
    assert mapping.engine_argv({"args": ["--model=/m"]}, py, {})[1] == ["--model=/m"]
    with pytest.raises(mapping.CommandError):
        mapping.engine_argv({"command": ["python", "-m", "huggingfaceserver"]}, py, {})
    out = mapping.local_args(["--port=8080", "--model=/mnt/models"], mounts, 4321)
    assert out == ["--model=/lab/pvc", "--host", "127.0.0.1", "--port", "4321"]
    assert mapping.expand_vars("$$(X) $(X) $(Y)", {"X": "1"}) == "$(X) 1 $(Y)"


# ---------------------------------------------------------------- scheduling
def node(gpus=1, labels=None, taints=None):
    return scheduling.node_object("lab-node", gpus, labels or {}, taints or [], "32", "256Gi")


def pod(gpus=0, **spec):
    c = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}
    return {"containers": [c], **spec}


def test_quantities():
    assert scheduling.quantity("500m") == Decimal("0.5")
    assert scheduling.quantity("4Gi") == 4 * 2**30
    assert scheduling.quantity("1e3") == 1000


def test_fit_gpu_selector_taints_affinity():
    assert scheduling.fit(pod(1), node(1), []) is None
    msg = scheduling.fit(pod(2), node(1), [])
    assert msg == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are available: "
        "1 No preemption victims found for incoming pod."
    )
    assert "Insufficient nvidia.com/gpu" in scheduling.fit(pod(1), node(1), [{"spec": pod(1)}])
    assert "node affinity/selector" in scheduling.fit(pod(nodeSelector={"a": "b"}), node(), [])
    assert scheduling.fit(pod(nodeSelector={"a": "b"}), node(labels={"a": "b"}), []) is None
    taint = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert "untolerated taint {nvidia.com/gpu: present}" in scheduling.fit(pod(), node(taints=taint), [])
    tol = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert scheduling.fit(pod(tolerations=tol), node(taints=taint), []) is None
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["H100"]}]}
                ]
            }
        }
    }
    assert "node affinity" in scheduling.fit(pod(affinity=aff), node(labels={"gpu": "A10"}), [])
    assert scheduling.fit(pod(affinity=aff), node(labels={"gpu": "H100"}), []) is None
    assert "Insufficient cpu" in scheduling.fit(
        {"containers": [{"resources": {"requests": {"cpu": "64"}}}]}, node(), []
    )


def test_node_options_parse():
    assert scheduling.parse_labels("a=b, c=d") == {"a": "b", "c": "d"}
    assert scheduling.parse_taints("k=v:NoSchedule,x:NoExecute") == [
        {"key": "k", "value": "v", "effect": "NoSchedule"},
        {"key": "x", "effect": "NoExecute"},
    ]
    n = node(2, {"x": "y"})
    assert n["status"]["capacity"]["nvidia.com/gpu"] == "2" and n["metadata"]["labels"]["x"] == "y"
    assert "nvidia.com/gpu" not in node(0)["status"]["capacity"]
