"""Patches and server-side apply like kube-apiserver: strategic merge patch, JSON merge patch,
JSON patch, and the field manager (managedFields, conflicts, removal of dropped fields)."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import pytest
import yaml

from specpilot_lab.apiserver.patch import (
    ApplyConflict,
    PatchError,
    builtin_type_info,
    deduced_type_info,
    json_merge_patch,
    json_patch,
    record_update,
    schema_type_info,
    server_side_apply,
    strategic_merge_patch,
)
from specpilot_lab.apiserver.schema import StructuralSchema

ROOT = Path(__file__).resolve().parents[2]
T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:01:00Z"
T2 = "2026-01-01T00:02:00Z"

DEPLOY = builtin_type_info("apps", "v1", "Deployment")
CONFIGMAP = builtin_type_info("", "v1", "ConfigMap")


def deployment(containers=None, **spec) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "demo", "labels": {"app": "web"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": (
                        containers
                        if containers is not None
                        else [
                            {
                                "name": "a",
                                "image": "a:1",
                                "args": ["--x", "--y"],
                                "env": [{"name": "ONE", "value": "1"}, {"name": "TWO", "value": "2"}],
                                "ports": [{"containerPort": 8080}],
                            },
                            {"name": "b", "image": "b:1"},
                        ]
                    ),
                    "volumes": [{"name": "data", "emptyDir": {}}],
                    "tolerations": [{"key": "gpu", "operator": "Exists"}],
                },
            },
            **spec,
        },
    }


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


def names(items: list) -> list:
    return [i["name"] for i in items]


# ============================================================================ strategic merge patch
def test_smp_merges_containers_by_name_patch_items_first():
    out = strategic_merge_patch(
        deployment(),
        {
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "a", "image": "a:2"}, {"name": "c", "image": "c:1"}]}
                }
            }
        },
        DEPLOY,
    )
    cs = pod_spec(out)["containers"]
    # like the Kubernetes docs example: patched and new items first, the others after
    assert names(cs) == ["a", "c", "b"]
    assert cs[0]["image"] == "a:2" and cs[0]["args"] == ["--x", "--y"]
    assert cs[2] == {"name": "b", "image": "b:1"}


def test_smp_env_merge_and_patch_delete():
    out = strategic_merge_patch(
        deployment(),
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "a",
                                "env": [
                                    {"name": "THREE", "value": "3"},
                                    {"name": "ONE", "$patch": "delete"},
                                    {"name": "TWO", "value": "two"},
                                ],
                            }
                        ]
                    }
                }
            }
        },
        DEPLOY,
    )
    env = pod_spec(out)["containers"][0]["env"]
    assert env == [{"name": "THREE", "value": "3"}, {"name": "TWO", "value": "two"}]
    out = strategic_merge_patch(
        deployment(),
        {"spec": {"template": {"spec": {"containers": [{"name": "b", "$patch": "delete"}]}}}},
        DEPLOY,
    )
    assert names(pod_spec(out)["containers"]) == ["a"]


def test_smp_set_element_order_as_kubectl_sends_it():
    # kubectl apply reorders containers b, a and changes a's image
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
                    "containers": [
                        {
                            "$setElementOrder/env": [{"name": "TWO"}, {"name": "ONE"}],
                            "name": "a",
                            "image": "a:3",
                        }
                    ],
                }
            }
        }
    }
    out = strategic_merge_patch(deployment(), patch, DEPLOY)
    cs = pod_spec(out)["containers"]
    assert names(cs) == ["b", "a"]
    assert cs[1]["image"] == "a:3"
    assert names(cs[1]["env"]) == ["TWO", "ONE"]


def test_smp_retain_keys():
    out = strategic_merge_patch(
        deployment(),
        {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": None}}},
        DEPLOY,
    )
    assert out["spec"]["strategy"] == {"type": "Recreate"}
    # volumes are merge,retainKeys: switching a volume's source drops the old one
    out = strategic_merge_patch(
        deployment(),
        {
            "spec": {
                "template": {
                    "spec": {
                        "volumes": [
                            {
                                "$retainKeys": ["configMap", "name"],
                                "name": "data",
                                "configMap": {"name": "cfg"},
                            }
                        ]
                    }
                }
            }
        },
        DEPLOY,
    )
    assert pod_spec(out)["volumes"] == [{"name": "data", "configMap": {"name": "cfg"}}]
    with pytest.raises(PatchError) as exc:
        strategic_merge_patch(
            deployment(), {"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}}, DEPLOY
        )
    assert (exc.value.code, exc.value.reason, exc.value.message) == (
        400,
        "BadRequest",
        "invalid patch format of retainKeys",
    )


def test_smp_null_deletes_and_lists_without_strategy_are_replaced():
    out = strategic_merge_patch(
        deployment(),
        {
            "metadata": {"labels": {"app": None, "tier": "front"}},
            "spec": {
                "replicas": None,
                "template": {
                    "spec": {
                        "tolerations": [{"key": "cpu", "operator": "Exists"}],
                        "containers": [{"name": "a", "args": ["--z"], "ports": [{"containerPort": 9090}]}],
                    }
                },
            },
        },
        DEPLOY,
    )
    assert out["metadata"]["labels"] == {"tier": "front"}
    assert "replicas" not in out["spec"]
    assert pod_spec(out)["tolerations"] == [{"key": "cpu", "operator": "Exists"}]
    a = pod_spec(out)["containers"][0]
    assert a["args"] == ["--z"]  # args has no patch strategy: replaced
    assert a["ports"] == [{"containerPort": 9090}, {"containerPort": 8080}]  # merged by containerPort


def test_smp_primitive_merge_list_and_delete_from_primitive_list():
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "finalizers": ["a", "b"]}}
    out = strategic_merge_patch(obj, {"metadata": {"finalizers": ["c", "a"]}}, CONFIGMAP)
    assert out["metadata"]["finalizers"] == ["c", "a", "b"]
    out = strategic_merge_patch(obj, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}, CONFIGMAP)
    assert out["metadata"]["finalizers"] == ["b"]


def test_smp_patch_replace_directive():
    out = strategic_merge_patch(
        deployment(),
        {
            "spec": {
                "template": {"spec": {"containers": [{"$patch": "replace"}, {"name": "z", "image": "z:1"}]}}
            }
        },
        DEPLOY,
    )
    assert pod_spec(out)["containers"] == [{"name": "z", "image": "z:1"}]
    out = strategic_merge_patch(
        deployment(), {"spec": {"strategy": {"$patch": "replace", "type": "Recreate"}}}, DEPLOY
    )
    assert out["spec"]["strategy"] == {"type": "Recreate"}


def test_smp_service_ports_merge_by_port():
    svc_info = builtin_type_info("", "v1", "Service")
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"selector": {"app": "a", "tier": "x"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    out = strategic_merge_patch(
        svc,
        {
            "spec": {
                "selector": {"app": "b"},
                "ports": [{"port": 443, "name": "tls"}, {"port": 80, "name": "http"}],
            }
        },
        svc_info,
    )
    assert out["spec"]["ports"] == [
        {"port": 443, "name": "tls"},
        {"port": 80, "targetPort": 8080, "name": "http"},
    ]
    assert out["spec"]["selector"] == {"app": "b", "tier": "x"}


def test_smp_errors_like_the_apiserver():
    with pytest.raises(PatchError) as exc:
        strategic_merge_patch(
            deployment(), {"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}, DEPLOY
        )
    assert exc.value.code == 500 and exc.value.reason == "Unknown"
    assert exc.value.message == "map: map[image:x] does not contain declared merge key: name"
    with pytest.raises(PatchError) as exc:
        strategic_merge_patch(
            deployment(),
            {"spec": {"template": {"spec": {"containers": [{"name": "a", "$patch": "merge"}]}}}},
            DEPLOY,
        )
    assert exc.value.message == "merging lists cannot yet be specified in the patch"
    with pytest.raises(PatchError) as exc:
        strategic_merge_patch(deployment(), {"metadata": {"$deleteFromPrimitiveList": ["x"]}}, DEPLOY)
    assert (exc.value.code, exc.value.message) == (400, "invalid patch format of primitive list")


def test_smp_crd_objects_have_no_merge_keys():
    info = builtin_type_info("apiextensions.k8s.io", "v1", "CustomResourceDefinition")
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "x"},
        "spec": {"names": {"shortNames": ["a", "b"]}, "versions": [{"name": "v1"}, {"name": "v2"}]},
    }
    out = strategic_merge_patch(
        crd, {"spec": {"names": {"shortNames": ["c"]}, "versions": [{"name": "v3"}]}}, info
    )
    assert out["spec"] == {"names": {"shortNames": ["c"]}, "versions": [{"name": "v3"}]}


# ============================================================================ JSON merge patch / JSON patch
def test_json_merge_patch_rfc7386():
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
    out = json_merge_patch(target, {"a": "z", "c": {"f": None, "h": {"i": None, "j": 1}}, "l": [3]})
    assert out == {"a": "z", "c": {"d": "e", "h": {"j": 1}}, "l": [3]}
    assert target == {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}  # not modified
    with pytest.raises(PatchError) as exc:
        json_merge_patch(target, "nope")
    assert exc.value.code == 400


def test_json_patch_ops_and_failures():
    obj = deployment()
    out = json_patch(
        obj,
        [
            {"op": "replace", "path": "/spec/replicas", "value": 3},
            {"op": "add", "path": "/metadata/labels/tier", "value": "web"},
            {"op": "remove", "path": "/spec/template/spec/tolerations"},
            {"op": "test", "path": "/spec/replicas", "value": 3},
        ],
    )
    assert out["spec"]["replicas"] == 3 and out["metadata"]["labels"]["tier"] == "web"
    assert "tolerations" not in pod_spec(out) and "tolerations" in pod_spec(obj)
    with pytest.raises(PatchError) as exc:
        json_patch(obj, [{"op": "test", "path": "/spec/replicas", "value": 2}])
    assert exc.value.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server rejected our request due to an error in our request",
        "reason": "Invalid",
        "details": {},
        "code": 422,
    }
    with pytest.raises(PatchError) as exc:
        json_patch(obj, [{"op": "remove", "path": "/spec/nothing"}])
    assert exc.value.code == 422
    with pytest.raises(PatchError) as exc:
        json_patch(obj, {"op": "remove", "path": "/spec"})
    assert (exc.value.code, exc.value.reason) == (400, "BadRequest")
    assert exc.value.message == "json: cannot unmarshal object into Go value of type jsonpatch.Patch"


# ============================================================================ server-side apply (built-ins)
def configmap(data: dict, labels: dict | None = None) -> dict:
    md = {"name": "cfg", "namespace": "demo"}
    if labels is not None:
        md["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data}


def managed(obj: dict) -> list[dict]:
    return obj["metadata"].get("managedFields", [])


def test_ssa_create_records_fields_v1():
    out = server_side_apply(None, configmap({"a": "1"}, {"app": "x"}), "ops", False, CONFIGMAP, T0)
    assert out["data"] == {"a": "1"} and out["metadata"]["labels"] == {"app": "x"}
    assert managed(out) == [
        {
            "manager": "ops",
            "operation": "Apply",
            "apiVersion": "v1",
            "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:app": {}}}},
        }
    ]
    dep = server_side_apply(None, deployment(), "ops", False, DEPLOY, T0)
    fields = managed(dep)[0]["fieldsV1"]
    container_a = fields["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"a"}']
    assert container_a == {
        ".": {},
        "f:args": {},
        "f:env": {
            'k:{"name":"ONE"}': {".": {}, "f:name": {}, "f:value": {}},
            'k:{"name":"TWO"}': {".": {}, "f:name": {}, "f:value": {}},
        },
        "f:image": {},
        "f:name": {},
        "f:ports": {'k:{"containerPort":8080,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}},
    }
    assert fields["f:spec"]["f:selector"] == {}  # LabelSelector is atomic
    assert fields["f:spec"]["f:template"]["f:spec"]["f:tolerations"] == {}  # atomic list


def test_ssa_reapply_same_config_changes_nothing():
    live = server_side_apply(None, deployment(), "ops", False, DEPLOY, T0)
    again = server_side_apply(live, deployment(), "ops", False, DEPLOY, T1)
    assert again == live  # managedFields included: same set, time untouched


def test_ssa_omitted_list_item_and_field_are_removed():
    live = server_side_apply(None, deployment(), "ops", False, DEPLOY, T0)
    cfg = deployment(
        containers=[
            {
                "name": "a",
                "image": "a:1",
                "args": ["--x", "--y"],
                "env": [{"name": "ONE", "value": "1"}],
                "ports": [{"containerPort": 8080}],
            }
        ]
    )
    del cfg["metadata"]["labels"]
    out = server_side_apply(live, cfg, "ops", False, DEPLOY, T1)
    assert names(pod_spec(out)["containers"]) == ["a"]
    assert pod_spec(out)["containers"][0]["env"] == [{"name": "ONE", "value": "1"}]
    assert "labels" not in out["metadata"]
    assert out["spec"]["template"]["metadata"]["labels"] == {"app": "web"}
    assert managed(out)[0]["time"] == T1
    assert "f:labels" not in managed(out)[0]["fieldsV1"].get("f:metadata", {})


def test_ssa_atomic_args_replaced_whole():
    live = server_side_apply(None, deployment(), "ops", False, DEPLOY, T0)
    cfg = deployment()
    pod_spec(cfg)["containers"][0]["args"] = ["--speculative-config", '{"method":"ngram"}']
    out = server_side_apply(live, cfg, "ops", False, DEPLOY, T1)
    assert pod_spec(out)["containers"][0]["args"] == ["--speculative-config", '{"method":"ngram"}']
    pod_spec(cfg)["containers"][0]["args"] = ["--x"]
    out = server_side_apply(out, cfg, "ops", False, DEPLOY, T2)
    assert pod_spec(out)["containers"][0]["args"] == ["--x"]


def test_ssa_conflict_and_force_moves_ownership():
    live = server_side_apply(None, deployment(), "ops", False, DEPLOY, T0)
    scale = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "demo"},
        "spec": {"replicas": 3},
    }
    with pytest.raises(ApplyConflict) as exc:
        server_side_apply(live, scale, "autoscaler", False, DEPLOY, T1)
    assert exc.value.code == 409
    assert exc.value.message == 'Apply failed with 1 conflict: conflict with "ops": .spec.replicas'
    assert exc.value.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Apply failed with 1 conflict: conflict with "ops": .spec.replicas',
        "reason": "Conflict",
        "details": {
            "causes": [
                {
                    "reason": "FieldManagerConflict",
                    "message": 'conflict with "ops"',
                    "field": ".spec.replicas",
                }
            ]
        },
        "code": 409,
    }
    out = server_side_apply(live, scale, "autoscaler", True, DEPLOY, T1)
    assert out["spec"]["replicas"] == 3
    by_manager = {m["manager"]: m["fieldsV1"] for m in managed(out)}
    assert by_manager["autoscaler"] == {"f:spec": {"f:replicas": {}}}
    assert "f:replicas" not in by_manager["ops"]["f:spec"]
    # ops re-applies its old value: now it conflicts with the autoscaler
    with pytest.raises(ApplyConflict) as exc:
        server_side_apply(out, deployment(), "ops", False, DEPLOY, T2)
    assert exc.value.message == 'Apply failed with 1 conflict: conflict with "autoscaler": .spec.replicas'


def test_ssa_same_value_is_shared_and_survives_one_owner_dropping_it():
    live = server_side_apply(None, configmap({"a": "1", "b": "2"}), "one", False, CONFIGMAP, T0)
    live = server_side_apply(
        live, configmap({"b": "2"}), "two", False, CONFIGMAP, T1
    )  # same value: no conflict
    out = server_side_apply(live, configmap({"a": "1"}), "one", False, CONFIGMAP, T2)
    assert out["data"] == {"a": "1", "b": "2"}  # b is still owned by "two"
    out = server_side_apply(out, configmap({"c": "3"}), "two", False, CONFIGMAP, T2)
    assert out["data"] == {"a": "1", "c": "3"}


def test_ssa_conflict_with_update_manager_and_several_conflicts():
    live = configmap({"a": "1", "b": "2"})
    record_update(None, live, "kubectl-client-side-apply", CONFIGMAP, T0)
    with pytest.raises(ApplyConflict) as exc:
        server_side_apply(live, configmap({"a": "9"}), "ops", False, CONFIGMAP, T1)
    assert exc.value.message == (
        'Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.a'
    )
    with pytest.raises(ApplyConflict) as exc:
        server_side_apply(live, configmap({"a": "9", "b": "8"}), "ops", False, CONFIGMAP, T1)
    assert exc.value.message == (
        'Apply failed with 2 conflicts: conflicts with "kubectl-client-side-apply" using v1:\n'
        "- .data.a\n- .data.b"
    )
    assert [c["field"] for c in exc.value.status()["details"]["causes"]] == [".data.a", ".data.b"]


def test_ssa_rejects_managed_fields_and_duplicate_keys():
    cfg = configmap({"a": "1"})
    cfg["metadata"]["managedFields"] = [{"manager": "x"}]
    with pytest.raises(PatchError) as exc:
        server_side_apply(None, cfg, "ops", False, CONFIGMAP, T0)
    assert (exc.value.code, exc.value.message) == (400, "metadata.managedFields must be nil")
    dup = deployment(containers=[{"name": "a", "image": "1"}, {"name": "a", "image": "2"}])
    with pytest.raises(PatchError) as exc:
        server_side_apply(None, dup, "ops", False, DEPLOY, T0)
    assert exc.value.code == 500
    assert exc.value.message.endswith('.spec.template.spec.containers: duplicate entries for key [name="a"]')


def test_ssa_on_object_without_managed_fields_uses_before_first_apply():
    live = configmap({"a": "1"})
    with pytest.raises(ApplyConflict) as exc:
        server_side_apply(live, configmap({"a": "2"}), "ops", False, CONFIGMAP, T0)
    assert (
        exc.value.message
        == 'Apply failed with 1 conflict: conflict with "before-first-apply" using v1: .data.a'
    )


# ============================================================================ server-side apply (CRs)
@functools.lru_cache(maxsize=None)
def _lab_isvc_schema() -> StructuralSchema:
    crd = yaml.safe_load((ROOT / "lab" / "crds" / "serving.kserve.io_inferenceservices.yaml").read_text())
    return StructuralSchema.from_crd(crd)


def isvc(args: list, uris: list, env: list | None = None) -> dict:
    model = {"modelFormat": {"name": "vLLM"}, "runtime": "vllm", "args": args}
    if env is not None:
        model["env"] = env
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llm", "namespace": "demo"},
        "spec": {"predictor": {"model": model, "storageUris": uris}},
    }


def test_ssa_custom_resource_lists_follow_the_schema():
    info = schema_type_info(_lab_isvc_schema())
    uris = [
        {"uri": "hf://o/target", "mountPath": "/mnt/models/target"},
        {"uri": "hf://o/draft", "mountPath": "/mnt/models/draft"},
    ]
    live = server_side_apply(
        None,
        isvc(["--a", "--speculative-config", "{}"], uris, [{"name": "A", "value": "1"}]),
        "specpilot",
        False,
        info,
        T0,
    )
    fields = managed(live)[0]["fieldsV1"]["f:spec"]["f:predictor"]
    assert fields["f:storageUris"] == {} and fields["f:model"]["f:args"] == {}
    assert fields["f:model"]["f:env"] == {'k:{"name":"A"}': {".": {}, "f:name": {}, "f:value": {}}}
    # another manager adds an env var; the rollback drops the draft and the speculative args
    other = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llm", "namespace": "demo"},
        "spec": {"predictor": {"model": {"env": [{"name": "B", "value": "2"}]}}},
    }
    live = server_side_apply(live, other, "tuner", False, info, T1)
    out = server_side_apply(live, isvc(["--a"], uris[:1], []), "specpilot", False, info, T2)
    model = out["spec"]["predictor"]["model"]
    assert model["args"] == ["--a"]
    assert out["spec"]["predictor"]["storageUris"] == uris[:1]
    assert model["env"] == [{"name": "B", "value": "2"}]  # A dropped, B belongs to "tuner"


# ============================================================================ record_update
def test_record_update_create_update_and_ownership_transfer():
    cm = configmap({"a": "1"}, {"app": "x"})
    record_update(None, cm, "kubectl-create", CONFIGMAP, T0)
    assert managed(cm) == [
        {
            "manager": "kubectl-create",
            "operation": "Update",
            "apiVersion": "v1",
            "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {".": {}, "f:a": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
        }
    ]
    new = copy.deepcopy(cm)
    new["data"]["a"] = "2"
    new["data"]["b"] = "3"
    record_update(cm, new, "editor", CONFIGMAP, T1)
    by = {m["manager"]: m for m in managed(new)}
    assert by["editor"]["fieldsV1"] == {"f:data": {"f:a": {}, "f:b": {}}}
    assert by["editor"]["time"] == T1
    # kubectl-create keeps the data map itself (a member without children serializes as {})
    assert by["kubectl-create"]["fieldsV1"] == {
        "f:data": {},
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
    }
    # the same manager again: one merged entry, new time
    newer = copy.deepcopy(new)
    newer["data"]["c"] = "4"
    record_update(new, newer, "editor", CONFIGMAP, T2)
    editors = [m for m in managed(newer) if m["manager"] == "editor"]
    assert len(editors) == 1 and editors[0]["time"] == T2
    assert editors[0]["fieldsV1"] == {"f:data": {"f:a": {}, "f:b": {}, "f:c": {}}}
    # a no-op write leaves managedFields as they were
    same = copy.deepcopy(newer)
    record_update(newer, same, "someone", CONFIGMAP, T2)
    assert managed(same) == managed(newer)


def test_record_update_takes_fields_from_an_applier():
    live = server_side_apply(None, deployment(), "ops", False, DEPLOY, T0)
    edited = copy.deepcopy(live)
    edited["spec"]["replicas"] = 5
    record_update(live, edited, "kubectl-scale", DEPLOY, T1, subresource="scale")
    by = {m["manager"]: m for m in managed(edited)}
    assert by["kubectl-scale"]["subresource"] == "scale"
    assert by["kubectl-scale"]["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    assert "f:replicas" not in by["ops"]["fieldsV1"]["f:spec"]
    # the applier now conflicts when it applies another value
    with pytest.raises(ApplyConflict) as exc:
        server_side_apply(edited, deployment(), "ops", False, DEPLOY, T2)
    assert exc.value.message == (
        'Apply failed with 1 conflict: conflict with "kubectl-scale" with subresource '
        '"scale" using apps/v1: .spec.replicas'
    )


def test_record_update_deployment_create_markers_like_kubectl_create():
    dep = deployment()
    record_update(None, dep, "kubectl-create", DEPLOY, T0)
    f = managed(dep)[0]["fieldsV1"]["f:spec"]
    # non-pointer structs of the typed object (spec, strategy, template) carry no "." marker
    assert "." not in f and "." not in f["f:strategy"] and "." not in f["f:template"]
    assert f["f:strategy"]["f:rollingUpdate"]["."] == {}
    assert "." not in f["f:template"]["f:spec"]["f:containers"]
    assert f["f:template"]["f:spec"]["f:volumes"]["."] == {}


def test_record_update_reset_and_managed_fields_from_request():
    cm = configmap({"a": "1"})
    record_update(None, cm, "kubectl-create", CONFIGMAP, T0)
    new = copy.deepcopy(cm)
    new["metadata"]["managedFields"] = []
    record_update(cm, new, "editor", CONFIGMAP, T1)
    assert "managedFields" not in new["metadata"]  # [] resets; nothing changed, so nobody owns anything
    new = copy.deepcopy(cm)
    new["metadata"]["managedFields"] = [{"manager": "garbage"}]  # undecodable: the live ones are kept
    new["data"]["a"] = "2"
    record_update(cm, new, "editor", CONFIGMAP, T1)
    assert {m["manager"] for m in managed(new)} == {"kubectl-create", "editor"}


# ============================================================================ type information
def test_builtin_type_info_tables():
    pod = builtin_type_info("", "v1", "Pod")
    assert pod.list_type(("spec", "containers")) == ("map", ("name",))
    assert pod.patch_strategy(("spec", "containers")) == ("merge", "name")
    assert pod.list_type(("spec", "containers", "ports")) == ("map", ("containerPort", "protocol"))
    assert pod.patch_strategy(("spec", "containers", "ports")) == ("merge", "containerPort")
    assert pod.patch_strategy(("spec", "volumes")) == ("merge,retainKeys", "name")
    assert pod.patch_strategy(("spec", "containers", "args")) == (None, None)
    assert pod.list_type(("spec", "tolerations")) == ("atomic", ())
    assert pod.patch_strategy(("status", "conditions")) == ("merge", "type")
    assert pod.list_type(("metadata", "finalizers")) == ("set", ())
    for kind, group in (
        ("ReplicaSet", "apps"),
        ("StatefulSet", "apps"),
        ("DaemonSet", "apps"),
        ("Job", "batch"),
    ):
        info = builtin_type_info(group, "v1", kind)
        assert info.list_type(("spec", "template", "spec", "initContainers", "env")) == ("map", ("name",))
    cron = builtin_type_info("batch", "v1", "CronJob")
    assert cron.patch_strategy(("spec", "jobTemplate", "spec", "template", "spec", "containers")) == (
        "merge",
        "name",
    )
    assert builtin_type_info("example.com", "v1", "Widget") is None
    deduced = deduced_type_info()
    assert deduced.list_type(("spec", "anything")) == ("atomic", ())
    assert deduced.list_type(("metadata", "ownerReferences")) == ("map", ("uid",))


def test_reset_fields_are_neither_owned_nor_conflicting():
    pod_info = builtin_type_info("", "v1", "Pod")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "demo"},
        "spec": {"containers": [{"name": "c", "image": "c:1"}]},
        "status": {"phase": "Running"},
    }
    record_update(None, pod, "kubelet", pod_info, T0, "status", reset_fields=("spec", "metadata"))
    assert managed(pod)[0]["fieldsV1"] == {"f:status": {"f:phase": {}}}  # status: a non-pointer struct
    cfg = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "demo"},
        "spec": {"containers": [{"name": "c", "image": "c:2"}]},
        "status": {"phase": "Failed"},
    }
    out = server_side_apply(pod, cfg, "ops", False, pod_info, T1, reset_fields=("status",))
    by = {m["manager"]: m["fieldsV1"] for m in managed(out)}
    assert "f:status" not in by["ops"] and by["kubelet"] == {"f:status": {"f:phase": {}}}
