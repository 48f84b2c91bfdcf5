"""PATCH types, server-side apply, PUT preconditions, fieldValidation, dryRun, status subresource."""

from __future__ import annotations

import json

import pytest
from emulator_helpers import install_widget_crd, make_namespace, widget, widgets_path

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
SMP = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"


@pytest.fixture(scope="module")
def emu(emulator_factory):
    e = emulator_factory(crds=[], name="patch")
    install_widget_crd(e)
    return e


def deployment(name: str, containers: list[dict]) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": containers}},
        },
    }


def test_merge_and_json_patch(emu):
    ns = make_namespace(emu)
    emu.request(
        "POST",
        f"/api/v1/namespaces/{ns}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}},
    )
    got = emu.request(
        "PATCH", f"/api/v1/namespaces/{ns}/configmaps/c", {"data": {"a": None, "c": "3"}}, content_type=MERGE
    ).json()
    assert got["data"] == {"b": "2", "c": "3"}
    got = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/c",
        [{"op": "add", "path": "/data/d", "value": "4"}, {"op": "remove", "path": "/data/b"}],
        content_type=JSON_PATCH,
    ).json()
    assert got["data"] == {"c": "3", "d": "4"}
    r = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/c",
        [{"op": "test", "path": "/data/c", "value": "nope"}],
        content_type=JSON_PATCH,
    )
    assert r.status == 422
    r = emu.request("PATCH", f"/api/v1/namespaces/{ns}/configmaps/missing", {"data": {}}, content_type=MERGE)
    assert r.status == 404


def test_strategic_merge_patch_uses_merge_keys(emu):
    ns = make_namespace(emu)
    dep = deployment(
        "d",
        [
            {
                "name": "a",
                "image": "a:1",
                "env": [{"name": "X", "value": "1"}],
                "ports": [{"containerPort": 8080}],
            },
            {"name": "b", "image": "b:1"},
        ],
    )
    dep["spec"]["template"]["spec"]["volumes"] = [{"name": "v1", "emptyDir": {}}]
    emu.request("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", dep)
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "a",
                            "image": "a:2",
                            "env": [{"name": "Y", "value": "2"}],
                            "volumeMounts": [{"name": "v2", "mountPath": "/v2"}],
                        }
                    ],
                    "volumes": [{"name": "v2", "emptyDir": {}}],
                }
            }
        }
    }
    got = emu.request("PATCH", f"/apis/apps/v1/namespaces/{ns}/deployments/d", patch, content_type=SMP).json()
    containers = {c["name"]: c for c in got["spec"]["template"]["spec"]["containers"]}
    assert set(containers) == {"a", "b"}
    assert containers["a"]["image"] == "a:2"
    assert [e["name"] for e in containers["a"]["env"]] == ["Y", "X"]
    assert containers["a"]["ports"][0]["containerPort"] == 8080
    assert {v["name"] for v in got["spec"]["template"]["spec"]["volumes"]} == {"v1", "v2"}
    assert got["metadata"]["generation"] == 2


def test_strategic_merge_patch_on_custom_resources_is_415(emu):
    ns = make_namespace(emu)
    emu.request("POST", widgets_path(ns), widget("w", ns))
    r = emu.request("PATCH", widgets_path(ns, "w"), {"spec": {"size": 2}}, content_type=SMP)
    assert r.status == 415
    assert r.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        "reason": "UnsupportedMediaType",
        "code": 415,
    }


def test_server_side_apply_creates_and_removes_dropped_fields(emu):
    ns = make_namespace(emu)
    path = f"/api/v1/namespaces/{ns}/services/svc?fieldManager=deployer"
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "svc"},
        "spec": {
            "selector": {"app": "x"},
            "ports": [{"name": "http", "port": 80}, {"name": "m", "port": 9090}],
        },
    }
    r = emu.request("PATCH", path, svc, content_type=APPLY)
    assert r.status == 201, r
    assert [p["port"] for p in r.json()["spec"]["ports"]] == [80, 9090]
    svc["spec"]["ports"] = [{"name": "http", "port": 80}]
    r = emu.request("PATCH", path, svc, content_type=APPLY)
    assert r.status == 200 and [p["port"] for p in r.json()["spec"]["ports"]] == [80]
    rv = r.json()["metadata"]["resourceVersion"]
    again = emu.request("PATCH", path, svc, content_type=APPLY).json()
    assert again["metadata"]["resourceVersion"] == rv
    # YAML bodies are fine too
    yaml_body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\ndata:\n  k: v\n"
    r = emu.request(
        "PATCH", f"/api/v1/namespaces/{ns}/configmaps/y?fieldManager=deployer", yaml_body, content_type=APPLY
    )
    assert r.status == 201 and r.json()["data"] == {"k": "v"}


def test_server_side_apply_conflicts_and_force(emu):
    ns = make_namespace(emu)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "one"}}
    emu.request("PATCH", f"/api/v1/namespaces/{ns}/configmaps/c?fieldManager=first", body, content_type=APPLY)
    body["data"]["k"] = "two"
    r = emu.request(
        "PATCH", f"/api/v1/namespaces/{ns}/configmaps/c?fieldManager=second", body, content_type=APPLY
    )
    assert r.status == 409 and r.json()["reason"] == "Conflict"
    assert 'conflict with "first"' in r.json()["message"]
    r = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/c?fieldManager=second&force=true",
        body,
        content_type=APPLY,
    )
    assert r.status == 200 and r.json()["data"]["k"] == "two"
    r = emu.request("PATCH", f"/api/v1/namespaces/{ns}/configmaps/c", body, content_type=APPLY)
    assert r.status == 400 and "fieldManager is required" in r.json()["message"]


def test_server_side_apply_of_custom_resources(emu):
    ns = make_namespace(emu)
    w = widget("w", ns, tags=["a", "b"])
    r = emu.request("PATCH", widgets_path(ns, "w") + "?fieldManager=me", w, content_type=APPLY)
    assert r.status == 201 and r.json()["spec"]["size"] == 1  # schema default
    del w["spec"]["tags"]
    r = emu.request("PATCH", widgets_path(ns, "w") + "?fieldManager=me", w, content_type=APPLY)
    assert "tags" not in r.json()["spec"]


def test_field_validation(emu):
    ns = make_namespace(emu)
    bad = widget("strict", ns)
    bad["spec"]["colour"] = "typo"
    r = emu.request("POST", widgets_path(ns) + "?fieldValidation=Strict", bad)
    assert r.status == 400 and r.json()["reason"] == "BadRequest"
    assert r.json()["message"] == 'strict decoding error: unknown field "spec.colour"'
    r = emu.request("POST", widgets_path(ns), bad)
    assert r.status == 201 and "colour" not in r.json()["spec"]
    assert r.header_all("Warning") == ['299 - "unknown field \\"spec.colour\\""']
    bad["metadata"]["name"] = "ignored"
    r = emu.request("POST", widgets_path(ns) + "?fieldValidation=Ignore", bad)
    assert r.status == 201 and not r.header_all("Warning")
    # built-in kinds drop unknown top-level fields the same way
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "dta": {"a": "b"}}
    r = emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps?fieldValidation=Strict", cm)
    assert r.status == 400 and 'unknown field "dta"' in r.json()["message"]


def test_schema_validation_errors_are_422_with_field_paths(emu):
    ns = make_namespace(emu)
    bad = widget("bad", ns, size=11, label="Nope")
    bad["spec"]["color"] = "purple"
    r = emu.request("POST", widgets_path(ns), bad)
    assert r.status == 422
    body = r.json()
    assert body["reason"] == "Invalid" and body["details"]["group"] == "lab.specpilot.dev"
    fields = {c["field"] for c in body["details"]["causes"]}
    assert {"spec.color", "spec.size", "spec.label"} <= fields
    assert body["message"].startswith('Widget.lab.specpilot.dev "bad" is invalid: [')
    missing = widget("missing", ns)
    del missing["spec"]["color"]
    r = emu.request("POST", widgets_path(ns), missing)
    assert r.status == 422 and "spec.color: Required value" in r.json()["message"]


def test_preserve_unknown_fields_are_kept(emu):
    ns = make_namespace(emu)
    w = widget("keep", ns, extra={"anything": {"goes": [1, 2]}})
    got = emu.request("POST", widgets_path(ns), w).json()
    assert got["spec"]["extra"] == {"anything": {"goes": [1, 2]}}


def test_dry_run_on_every_write_stores_nothing(emu):
    ns = make_namespace(emu)
    base = f"/api/v1/namespaces/{ns}/configmaps"
    emu.request(
        "POST",
        base,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "real"}, "data": {"k": "v"}},
    )
    rv = emu.request("GET", base).json()["metadata"]["resourceVersion"]
    mark = emu.control.mark()
    r = emu.request(
        "POST", base + "?dryRun=All", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dry"}}
    )
    assert r.status == 201 and r.json()["metadata"]["uid"]
    r = emu.request(
        "POST",
        base + "?dryRun=All",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}},
    )
    assert r.status == 422  # full validation
    cur = emu.request("GET", f"{base}/real").json()
    cur["data"]["k"] = "changed"
    assert emu.request("PUT", f"{base}/real?dryRun=All", cur).json()["data"]["k"] == "changed"
    assert (
        emu.request("PATCH", f"{base}/real?dryRun=All", {"data": {"k": "p"}}, content_type=MERGE).json()[
            "data"
        ]["k"]
        == "p"
    )
    r = emu.request(
        "PATCH",
        f"{base}/new?dryRun=All&fieldManager=x",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new"}},
        content_type=APPLY,
    )
    assert r.status == 201
    assert emu.request("DELETE", f"{base}/real?dryRun=All").status == 200
    assert emu.request("DELETE", f"{base}/real", {"dryRun": ["All"]}).status == 200
    assert emu.request("DELETE", f"{base}?dryRun=All").status == 200
    assert emu.request("DELETE", f"/api/v1/namespaces/{ns}?dryRun=All").status == 200
    assert emu.request("GET", base).json()["metadata"]["resourceVersion"] == rv
    assert emu.request("GET", f"{base}/real").json()["data"] == {"k": "v"}
    assert emu.request("GET", f"{base}/dry").status == 404
    assert emu.request("GET", f"/api/v1/namespaces/{ns}").json()["status"]["phase"] == "Active"
    logged = [e for e in emu.control.requests(since=mark) if e["verb"] != "get" and e["verb"] != "list"]
    assert logged and all(e["dry_run"] for e in logged) and not any(e["mutated"] for e in logged)


def test_status_subresource_semantics(emu):
    ns = make_namespace(emu)
    w = widget("s", ns)
    w["status"] = {"phase": "Ignored"}
    got = emu.request("POST", widgets_path(ns), w).json()
    assert "status" not in got  # create ignores status
    got = emu.request(
        "PATCH",
        widgets_path(ns, "s") + "/status",
        {"spec": {"size": 9}, "status": {"phase": "Ready"}},
        content_type=MERGE,
    ).json()
    assert got["status"] == {"phase": "Ready"} and got["spec"]["size"] == 1  # /status ignores spec
    got = emu.request(
        "PATCH",
        widgets_path(ns, "s"),
        {"spec": {"size": 2}, "status": {"phase": "Hacked"}},
        content_type=MERGE,
    ).json()
    assert got["status"] == {"phase": "Ready"} and got["spec"]["size"] == 2  # main ignores status
    cur = emu.request("GET", widgets_path(ns, "s")).json()
    cur["status"] = {"phase": "ViaPut"}
    cur["spec"]["size"] = 3
    got = emu.request("PUT", widgets_path(ns, "s") + "/status", cur).json()
    assert got["status"]["phase"] == "ViaPut" and got["spec"]["size"] == 2
    r = emu.request("PATCH", widgets_path(ns, "s") + "/status", {"status": {"phase": 5}}, content_type=MERGE)
    assert r.status == 422 and "status.phase" in r.text  # still validated
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    emu.request("POST", f"/api/v1/namespaces/{ns}/pods", pod)
    got = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/p/status",
        {"status": {"phase": "Running", "podIP": "10.0.0.5"}},
        content_type=SMP,
    ).json()
    assert got["status"]["phase"] == "Running"
    got = emu.request(
        "PATCH", f"/api/v1/namespaces/{ns}/pods/p", {"status": {"phase": "Failed"}}, content_type=MERGE
    ).json()
    assert got["status"]["phase"] == "Running"


def test_scale_subresource(emu):
    ns = make_namespace(emu)
    emu.request(
        "POST", f"/apis/apps/v1/namespaces/{ns}/deployments", deployment("d", [{"name": "c", "image": "i"}])
    )
    scale = emu.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/d/scale").json()
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 1
    r = emu.request(
        "PATCH",
        f"/apis/apps/v1/namespaces/{ns}/deployments/d/scale",
        {"spec": {"replicas": 3}},
        content_type=MERGE,
    )
    assert r.status == 200 and r.json()["spec"]["replicas"] == 3
    assert emu.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/d").json()["spec"]["replicas"] == 3


def test_unsupported_patch_type_and_bad_bodies(emu):
    ns = make_namespace(emu)
    emu.request(
        "POST",
        f"/api/v1/namespaces/{ns}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
    )
    r = emu.request(
        "PATCH", f"/api/v1/namespaces/{ns}/configmaps/c", {"data": {}}, content_type="text/x-nope"
    )
    assert r.status == 415
    r = emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", b"{not json")
    assert r.status == 400
    r = emu.request("PATCH", f"/api/v1/namespaces/{ns}/configmaps/c", json.dumps([1]), content_type=MERGE)
    assert r.status == 400


def test_dynamic_client_paths(emu):
    """What kubernetes.core does through the dynamic client: SSA, merge patch, deletecollection."""
    ns = make_namespace(emu)
    dyn = emu.dynamic_client()
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "ssa", "namespace": ns, "labels": {"group": "g"}},
        "data": {"a": "1"},
    }
    out = cms.server_side_apply(body=body, name="ssa", namespace=ns, field_manager="specpilot")
    assert out.data.a == "1"
    out = cms.patch(
        body={"data": {"b": "2"}}, name="ssa", namespace=ns, content_type="application/merge-patch+json"
    )
    assert dict(out.data) == {"a": "1", "b": "2"}
    cms.create(
        body={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "other", "labels": {"group": "g"}},
        },
        namespace=ns,
    )
    cms.create(body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keep"}}, namespace=ns)
    assert len(cms.get(namespace=ns, label_selector="group=g").items) == 2
    gone = cms.delete(namespace=ns, label_selector="group=g")
    assert gone.kind == "ConfigMapList" and {i.metadata.name for i in gone.items} == {"ssa", "other"}
    assert [i.metadata.name for i in cms.get(namespace=ns).items] == ["keep"]
