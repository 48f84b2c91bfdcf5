"""The lab's own KServe CRDs (lab/crds): structural, documented, in agreement with upstream KServe,
and enforcing what a real cluster enforces for the manifests specpilot renders."""

from __future__ import annotations

import copy
import functools
import importlib.util
from pathlib import Path

import pytest
import yaml

from specpilot_lab.apiserver.schema import StructuralSchema

ROOT = Path(__file__).resolve().parents[2]
LAB_CRDS = ROOT / "lab" / "crds"
REFERENCE = ROOT.parent / "shared" / "reference" / "kserve-crds"
QUANTITY = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
FILES = {
    "InferenceService": "serving.kserve.io_inferenceservices.yaml",
    "ServingRuntime": "serving.kserve.io_servingruntimes.yaml",
    "ClusterServingRuntime": "serving.kserve.io_clusterservingruntimes.yaml",
}


@functools.lru_cache(maxsize=None)
def _load(path: Path) -> dict:
    return yaml.load(path.read_text(), Loader=yaml.CSafeLoader)


def lab_crd(kind: str) -> dict:
    return _load(LAB_CRDS / FILES[kind])


def upstream_crd(version: str, kind: str) -> dict:
    path = REFERENCE / version / FILES[kind]
    if not path.exists():
        pytest.skip(f"upstream KServe CRDs not found at {path.parent} (they sit beside the checkout in CI)")
    return _load(path)


def root_schema(crd: dict) -> dict:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def schema(crd: dict, strict: bool = False) -> StructuralSchema:
    return StructuralSchema.from_crd(crd, strict=strict)


def check(crd: dict, obj: dict, strict: bool = True) -> list[str]:
    s = schema(crd, strict=strict)
    obj = copy.deepcopy(obj)
    if not strict:
        s.prune(obj)
    s.apply_defaults(obj)
    return [e.render() for e in s.validate(obj)]


# ============================================================================ files and structure
def test_generated_files_are_up_to_date(tmp_path):
    spec = importlib.util.spec_from_file_location("lab_crds_generate", LAB_CRDS / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.main(["--dest", str(tmp_path)]) == 0
    # every file it writes: the InferenceService ones and the LLMInferenceService ones (llmisvc_crds.py)
    assert {p.name for p in tmp_path.iterdir()} == {p.name for p in LAB_CRDS.glob("*.yaml")}
    for name in (p.name for p in tmp_path.iterdir()):
        assert (tmp_path / name).read_text() == (
            LAB_CRDS / name
        ).read_text(), f"{name}: run lab/crds/generate.py"


@pytest.mark.parametrize("kind", list(FILES))
def test_crd_metadata(kind):
    crd = lab_crd(kind)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1" and crd["kind"] == "CustomResourceDefinition"
    spec = crd["spec"]
    assert spec["group"] == "serving.kserve.io"
    assert (
        spec["names"]["kind"] == kind
        and crd["metadata"]["name"] == f"{spec['names']['plural']}.serving.kserve.io"
    )
    (version,) = spec["versions"]
    assert version["served"] and version["storage"]
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    if kind == "InferenceService":
        assert spec["scope"] == "Namespaced" and spec["names"]["shortNames"] == ["isvc"]
        assert version["name"] == "v1beta1" and version["subresources"] == {"status": {}}
        assert columns == ["URL", "Ready", "Prev", "Latest", "Age"]
    else:
        assert version["name"] == "v1alpha1"
        assert spec["scope"] == ("Cluster" if kind == "ClusterServingRuntime" else "Namespaced")
        assert columns == ["Disabled", "ModelType", "Containers", "Age"]


def _walk(node: dict, path: str):
    yield path, node
    for name, sub in (node.get("properties") or {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("kind", list(FILES))
def test_schemas_are_structural_and_documented(kind):
    root = root_schema(lab_crd(kind))
    assert root["properties"]["metadata"] == {"description": "Standard object metadata.", "type": "object"}
    for path, node in _walk(root, "<root>"):
        for name, sub in (node.get("properties") or {}).items():
            assert sub.get("description"), f"{path}.{name} has no description"
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node and node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        else:
            assert node.get("type") or node.get("x-kubernetes-preserve-unknown-fields"), f"{path} has no type"
        if "properties" in node or "additionalProperties" in node:
            assert node.get("type") == "object", path
            assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), path
        if node.get("x-kubernetes-list-type") == "map":
            item = node["items"]
            for key in node["x-kubernetes-list-map-keys"]:
                assert key in item.get("required", []) or "default" in item["properties"][key], (path, key)
        for forbidden in ("$ref", "definitions", "patternProperties", "dependencies", "uniqueItems"):
            assert forbidden not in node, (path, forbidden)


def _effective(node: dict) -> dict:
    return {
        "type": "int-or-string" if node.get("x-kubernetes-int-or-string") else node.get("type"),
        "format": node.get("format") if node.get("type") == "integer" else None,
        "list": (
            (node.get("x-kubernetes-list-type", "atomic"), tuple(node.get("x-kubernetes-list-map-keys", ())))
            if node.get("type") == "array"
            else None
        ),
        "map": node.get("x-kubernetes-map-type", "granular") if node.get("type") == "object" else None,
    }


def _compare(ours: dict, theirs: dict, path: str, out: list[str]) -> int:
    checked = 1
    a, b = _effective(ours), _effective(theirs)
    if a["type"] != b["type"]:
        out.append(f"{path}: type {a['type']} != upstream {b['type']}")
        return checked
    for key in ("format", "list"):
        if a[key] != b[key]:
            out.append(f"{path}: {key} {a[key]} != upstream {b[key]}")
    if a["map"] != b["map"] and not ours.get("x-kubernetes-preserve-unknown-fields"):
        out.append(f"{path}: map type {a['map']} != upstream {b['map']}")
    if "default" in ours and "default" in theirs and ours["default"] != theirs["default"]:
        out.append(f"{path}: default {ours['default']!r} != upstream {theirs['default']!r}")
    for name, sub in (ours.get("properties") or {}).items():
        if name in (theirs.get("properties") or {}):
            checked += _compare(sub, theirs["properties"][name], f"{path}.{name}", out)
    if isinstance(ours.get("items"), dict) and isinstance(theirs.get("items"), dict):
        checked += _compare(ours["items"], theirs["items"], f"{path}[]", out)
    if isinstance(ours.get("additionalProperties"), dict) and isinstance(
        theirs.get("additionalProperties"), dict
    ):
        checked += _compare(ours["additionalProperties"], theirs["additionalProperties"], f"{path}{{}}", out)
    return checked


@pytest.mark.upstream_crds
@pytest.mark.parametrize("version", ["v0.20.0", "v0.16.0"])
@pytest.mark.parametrize("kind", list(FILES))
def test_field_types_agree_with_upstream(kind, version):
    theirs = root_schema(upstream_crd(version, kind))
    problems: list[str] = []
    checked = _compare(root_schema(lab_crd(kind)), theirs, "", problems)
    assert problems == []
    assert checked > (300 if kind == "InferenceService" else 200)  # the comparison really walked the schema


# ============================================================================ behaviour like a real cluster
def isvc(predictor: dict) -> dict:
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llm", "namespace": "demo"},
        "spec": {"predictor": predictor},
    }


def test_lab_isvc_prunes_defaults_and_validates_like_upstream():
    s = schema(lab_crd("InferenceService"))
    obj = isvc(
        {
            "model": {
                "modelFormat": {"name": "vLLM"},
                "ports": [{"containerPort": 8080}],
                "storageUris": [{"uri": "hf://o/draft"}],
            },
            "storageUris": [{"uri": "hf://o/target"}],
        }
    )
    assert s.prune(obj) == ["spec.predictor.model.storageUris"]
    s.apply_defaults(obj)
    assert s.validate(obj) == []
    assert obj["spec"]["predictor"]["storageUris"] == [{"uri": "hf://o/target", "mountPath": "/mnt/models"}]
    assert obj["spec"]["predictor"]["model"]["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]

    errors = check(
        lab_crd("InferenceService"),
        isvc(
            {
                "model": {
                    "modelFormat": {},
                    "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "many"}},
                },
                "storageUris": [{"uri": "hf://o/t", "mountPath": "relative"}],
                "deploymentStrategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "25%"}},
            }
        ),
        strict=False,
    )
    assert errors == [
        "spec.predictor.model.modelFormat.name: Required value",
        'spec.predictor.model.resources.limits.memory: Invalid value: "many": '
        f"spec.predictor.model.resources.limits.memory in body should match '{QUANTITY}'",
        'spec.predictor.storageUris[0].mountPath: Invalid value: "relative": '
        "spec.predictor.storageUris[0].mountPath in body should match '^/.*'",
    ]
    assert check(
        lab_crd("InferenceService"),
        isvc({"model": {"modelFormat": {"name": "x"}}, "storageUris": []}),
        strict=False,
    ) == [
        "spec.predictor.storageUris: Invalid value: 0: "
        "spec.predictor.storageUris in body should have at least 1 items"
    ]


@pytest.mark.upstream_crds
def test_same_errors_as_upstream_for_the_same_mistakes():
    bad = isvc(
        {
            "model": {
                "modelFormat": {"version": "1"},
                "args": "--not-a-list",
                "resources": {"limits": {"cpu": "x"}},
            },
            "storageUris": [{"uri": "", "mountPath": "rel"}],
            "minReplicas": "1",
            "scaleMetric": "gpu",
            "tolerations": [{"tolerationSeconds": "60"}],
        }
    )
    ours = check(lab_crd("InferenceService"), bad, strict=False)
    theirs = check(upstream_crd("v0.20.0", "InferenceService"), bad, strict=False)
    assert ours == theirs
    assert len(ours) == 8


# ============================================================================ what specpilot renders
def rendered_isvc(with_name: bool = True) -> dict:
    predictor = {
        "minReplicas": 1,
        "maxReplicas": 1,
        "scaleTarget": 4,
        "scaleMetric": "concurrency",
        "containerConcurrency": 8,
        "timeout": 600,
        "canaryTrafficPercent": 100,
        "deploymentStrategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
        },
        "serviceAccountName": "llm-runtime",
        "priorityClassName": "gpu-high",
        "runtimeClassName": "nvidia",
        "shareProcessNamespace": True,
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "spot", "operator": "Equal", "value": "yes", "tolerationSeconds": 300},
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A100"]}
                            ]
                        }
                    ]
                }
            }
        },
        "imagePullSecrets": [{"name": "registry"}],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "fsGroup": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
            {"name": "models", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}},
            {
                "name": "spec",
                "configMap": {"name": "llm-spec", "items": [{"key": "spec.json", "path": "spec.json"}]},
            },
            {"name": "creds", "secret": {"secretName": "hf", "defaultMode": 288}},
        ],
        "labels": {"app.kubernetes.io/part-of": "specpilot"},
        "annotations": {"prometheus.io/scrape": "true"},
        "initContainers": [
            {
                "name": "wait-for-draft",
                "image": "busybox:1.36",
                "command": ["sh", "-c", "until [ -e /mnt/models/draft/config.json ]; do sleep 1; done"],
                "volumeMounts": [{"name": "models", "mountPath": "/mnt/models", "readOnly": True}],
            }
        ],
        "storageUris": [
            {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct", "mountPath": "/mnt/models/target"},
            {"uri": "hf://yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "mountPath": "/mnt/models/draft"},
        ],
        "model": {
            "modelFormat": {"name": "vLLM", "version": "1"},
            "runtime": "specpilot-vllm",
            "protocolVersion": "v2",
            "image": "vllm/vllm-openai:v0.11.0",
            "imagePullPolicy": "IfNotPresent",
            "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
            "args": [
                "--model=/mnt/models/target",
                "--served-model-name=llm",
                "--speculative-config",
                '{"method":"eagle3","model":"/mnt/models/draft","num_speculative_tokens":3}',
                "--gpu-memory-utilization=0.85",
            ],
            "env": [
                {"name": "HF_HOME", "value": "/tmp/hf"},
                {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {
                    "name": "CFG",
                    "valueFrom": {
                        "configMapKeyRef": {"name": "llm-spec", "key": "spec.json", "optional": True}
                    },
                },
            ],
            "envFrom": [
                {"secretRef": {"name": "extra"}},
                {"configMapRef": {"name": "extra"}, "prefix": "X_"},
            ],
            "resources": {
                "limits": {"cpu": "8", "memory": "48Gi", "nvidia.com/gpu": "1"},
                "requests": {"cpu": 4, "memory": "32Gi", "nvidia.com/gpu": 1},
            },
            "ports": [{"containerPort": 8080, "name": "http1", "protocol": "TCP"}],
            "volumeMounts": [
                {"name": "dshm", "mountPath": "/dev/shm"},
                {"name": "spec", "mountPath": "/etc/specpilot", "readOnly": True, "subPath": "spec.json"},
            ],
            "readinessProbe": {
                "httpGet": {"path": "/health", "port": 8080},
                "periodSeconds": 10,
                "failureThreshold": 3,
            },
            "startupProbe": {
                "httpGet": {"path": "/health", "port": "http1", "scheme": "HTTP"},
                "initialDelaySeconds": 10,
                "periodSeconds": 30,
                "failureThreshold": 60,
                "timeoutSeconds": 5,
            },
            "livenessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 20},
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "runAsUser": 1000,
                "readOnlyRootFilesystem": False,
            },
            "workingDir": "/tmp",
        },
    }
    if with_name:
        predictor["name"] = "eagle3"
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": "llm",
            "namespace": "demo",
            "labels": {"app.kubernetes.io/managed-by": "specpilot"},
            "annotations": {
                "serving.kserve.io/deploymentMode": "Standard",
                "serving.kserve.io/autoscalerClass": "none",
            },
        },
        "spec": {"predictor": predictor},
    }


def rendered_runtime(kind: str) -> dict:
    md = {"name": "specpilot-vllm", "labels": {"app.kubernetes.io/managed-by": "specpilot"}}
    if kind == "ServingRuntime":
        md["namespace"] = "demo"
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": kind,
        "metadata": md,
        "spec": {
            "annotations": {"prometheus.kserve.io/port": "8080", "prometheus.kserve.io/path": "/metrics"},
            "labels": {"app": "vllm"},
            "multiModel": False,
            "disabled": False,
            "protocolVersions": ["v2", "v1"],
            "supportedModelFormats": [{"name": "vLLM", "version": "1", "autoSelect": True, "priority": 2}],
            "containers": [
                {
                    "name": "kserve-container",
                    "image": "vllm/vllm-openai:v0.11.0",
                    "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
                    "args": ["--port=8080", "--model=/mnt/models", "--served-model-name={{.Name}}"],
                    "env": [
                        {"name": "HF_HOME", "value": "/tmp"},
                        {"name": "VLLM_CONFIG_ROOT", "value": "/tmp"},
                    ],
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "resources": {
                        "limits": {"cpu": "4", "memory": "16Gi"},
                        "requests": {"cpu": "1", "memory": "8Gi"},
                    },
                    "readinessProbe": {"httpGet": {"path": "/v1/models", "port": 8080}},
                    "startupProbe": {
                        "httpGet": {"path": "/v1/models", "port": 8080},
                        "failureThreshold": 60,
                        "periodSeconds": 30,
                    },
                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                    "securityContext": {"runAsNonRoot": True},
                }
            ],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}],
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 50,
                            "podAffinityTerm": {
                                "topologyKey": "kubernetes.io/hostname",
                                "labelSelector": {"matchLabels": {"app": "vllm"}},
                            },
                        }
                    ]
                }
            },
            "imagePullSecrets": [{"name": "registry"}],
            "builtInAdapter": {
                "serverType": "mlserver",
                "runtimeManagementPort": 8001,
                "memBufferBytes": 134217728,
                "modelLoadingTimeoutMillis": 90000,
            },
            "replicas": 1,
            "grpcDataEndpoint": "port:8001",
            "httpDataEndpoint": "port:8080",
        },
    }


def test_rendered_manifests_validate_strictly_against_the_lab_crds():
    assert check(lab_crd("InferenceService"), rendered_isvc()) == []
    for kind in ("ServingRuntime", "ClusterServingRuntime"):
        assert check(lab_crd(kind), rendered_runtime(kind)) == []


@pytest.mark.upstream_crds
def test_rendered_manifests_validate_strictly_against_upstream():
    assert check(upstream_crd("v0.20.0", "InferenceService"), rendered_isvc()) == []
    assert check(upstream_crd("v0.16.0", "InferenceService"), rendered_isvc(with_name=False)) == []
    for version in ("v0.20.0", "v0.16.0"):
        for kind in ("ServingRuntime", "ClusterServingRuntime"):
            assert check(upstream_crd(version, kind), rendered_runtime(kind)) == [], (version, kind)


@pytest.mark.upstream_crds
def test_strict_check_catches_typos_in_both():
    bad = rendered_isvc()
    bad["spec"]["predictor"]["storageUris"][1]["path"] = "/mnt/models/draft"  # the pre-merge field name
    bad["spec"]["predictor"]["model"]["storageUris"] = [{"uri": "hf://x"}]
    expected = [
        'spec.predictor.model: Invalid value: "storageUris": spec.predictor.model.storageUris in body is a '
        "forbidden property",
        'spec.predictor.storageUris[1]: Invalid value: "path": '
        "spec.predictor.storageUris[1].path in body is a forbidden property",
    ]
    assert check(lab_crd("InferenceService"), bad) == expected
    assert check(upstream_crd("v0.20.0", "InferenceService"), bad) == expected
