"""Discovery, version, health and OpenAPI endpoints."""

from __future__ import annotations

import pytest
from emulator_helpers import WIDGET_CRD, WIDGET_GROUP, install_widget_crd, wait_for


@pytest.fixture(scope="module")
def bare(emulator_factory):
    """One emulator without CRDs for the read-only tests of this module."""
    return emulator_factory(crds=[], name="discovery")


AGGREGATED_ACCEPT = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
    "application/json"
)


def _resources(emu, path: str) -> dict:
    r = emu.request("GET", path)
    assert r.status == 200, r
    doc = r.json()
    assert doc["kind"] == "APIResourceList"
    return {res["name"]: res for res in doc["resources"]}


def test_version_reports_a_real_looking_1_31(bare):
    v = bare.request("GET", "/version").json()
    assert v["major"] == "1" and v["minor"] == "31"
    assert v["gitVersion"].startswith("v1.31.")
    assert {"gitCommit", "buildDate", "goVersion", "platform"} <= set(v)


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/livez"])
def test_health_endpoints(bare, path):
    r = bare.request("GET", path, accept="*/*")
    assert r.status == 200 and r.text == "ok"


def test_core_v1_resources(bare):
    assert bare.request("GET", "/api").json()["versions"] == ["v1"]
    res = _resources(bare, "/api/v1")
    for name in (
        "namespaces",
        "configmaps",
        "secrets",
        "pods",
        "pods/log",
        "pods/status",
        "services",
        "serviceaccounts",
        "events",
        "persistentvolumeclaims",
        "nodes",
        "nodes/status",
        "endpoints",
    ):
        assert name in res, name
    assert res["configmaps"]["namespaced"] is True and res["configmaps"]["kind"] == "ConfigMap"
    assert res["namespaces"]["namespaced"] is False and "ns" in res["namespaces"]["shortNames"]
    assert res["pods"]["shortNames"] == ["po"] and "all" in res["pods"]["categories"]
    assert res["pods/log"]["verbs"] == ["get"]
    assert sorted(res["configmaps"]["verbs"]) == sorted(
        ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    )
    assert res["configmaps"]["singularName"] == "configmap"


@pytest.mark.parametrize(
    "group,version,expected",
    [
        ("apps", "v1", {"deployments", "deployments/status", "deployments/scale", "replicasets"}),
        ("batch", "v1", {"jobs", "jobs/status"}),
        ("rbac.authorization.k8s.io", "v1", {"roles", "rolebindings", "clusterroles", "clusterrolebindings"}),
        ("apiextensions.k8s.io", "v1", {"customresourcedefinitions", "customresourcedefinitions/status"}),
        ("coordination.k8s.io", "v1", {"leases"}),
    ],
)
def test_builtin_groups(bare, group, version, expected):
    groups = {g["name"]: g for g in bare.request("GET", "/apis").json()["groups"]}
    assert groups[group]["preferredVersion"]["groupVersion"] == f"{group}/{version}"
    g = bare.request("GET", f"/apis/{group}").json()
    assert g["kind"] == "APIGroup" and g["name"] == group
    assert expected <= set(_resources(bare, f"/apis/{group}/{version}"))


def test_aggregated_discovery_request_gets_the_legacy_format(bare):
    for path in ("/api", "/apis"):
        r = bare.request("GET", path, accept=AGGREGATED_ACCEPT)
        assert r.status == 200
        assert r.header("Content-Type") == "application/json"
        assert r.json()["kind"] in ("APIVersions", "APIGroupList")


def test_crd_discovery_appears_immediately_and_goes_away(fresh_emulator):
    emu = fresh_emulator
    install_widget_crd(emu)
    groups = {g["name"]: g for g in emu.request("GET", "/apis").json()["groups"]}
    assert groups[WIDGET_GROUP]["preferredVersion"]["version"] == "v1"
    assert [v["version"] for v in groups[WIDGET_GROUP]["versions"]] == ["v1", "v1beta1"]
    res = _resources(emu, f"/apis/{WIDGET_GROUP}/v1")
    w = res["widgets"]
    assert w["kind"] == "Widget" and w["singularName"] == "widget" and w["namespaced"] is True
    assert w["shortNames"] == ["wd"] and w["categories"] == ["specpilot"]
    assert "deletecollection" in w["verbs"] and "watch" in w["verbs"]
    assert {"widgets/status", "widgets/scale"} <= set(res)
    assert set(_resources(emu, f"/apis/{WIDGET_GROUP}/v1beta1")) == {"widgets"}
    r = emu.request(
        "DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{WIDGET_GROUP}"
    )
    assert r.status == 200
    wait_for(lambda: emu.request("GET", f"/apis/{WIDGET_GROUP}/v1").status == 404)
    assert WIDGET_GROUP not in {g["name"] for g in emu.request("GET", "/apis").json()["groups"]}
    assert emu.request("GET", f"/apis/{WIDGET_GROUP}/v1/namespaces/default/widgets").status == 404


def test_upstream_kserve_crds_in_discovery(emulator_upstream):
    res = _resources(emulator_upstream, "/apis/serving.kserve.io/v1beta1")
    isvc = res["inferenceservices"]
    assert isvc["shortNames"] == ["isvc"] and isvc["namespaced"] is True
    assert "inferenceservices/status" in res
    alpha = _resources(emulator_upstream, "/apis/serving.kserve.io/v1alpha1")
    assert alpha["clusterservingruntimes"]["namespaced"] is False
    assert alpha["servingruntimes"]["namespaced"] is True


def test_dynamic_client_discovery(bare):
    dyn = bare.dynamic_client()
    cm = dyn.resources.get(api_version="v1", kind="ConfigMap")
    assert cm.namespaced and cm.name == "configmaps"
    deploy = dyn.resources.get(api_version="apps/v1", kind="Deployment")
    assert "status" in deploy.subresources


def test_unknown_paths(bare):
    r = bare.request("GET", "/nope")
    assert r.status == 404
    r = bare.request("GET", "/api/v1/frobnicators")
    assert r.status == 404 and r.json()["reason"] == "NotFound"
    assert r.json()["message"] == "the server could not find the requested resource"


# ---------------------------------------------------------------------------- OpenAPI
def _pb_fields(data: bytes) -> list[tuple[int, int, object]]:
    """Decode one protobuf message level: [(field, wire_type, value)]."""
    out, i = [], 0
    while i < len(data):
        key, i = _varint(data, i)
        field, wt = key >> 3, key & 7
        if wt == 0:
            val, i = _varint(data, i)
        elif wt == 2:
            n, i = _varint(data, i)
            val, i = data[i : i + n], i + n
        else:
            raise AssertionError(f"unexpected wire type {wt}")
        out.append((field, wt, val))
    return out


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _first(fields, num):
    return next(v for f, _, v in fields if f == num)


def test_openapi_v2_protobuf_is_a_parsable_gnostic_document(bare):
    r = bare.request(
        "GET", "/openapi/v2", accept="application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
    )
    assert r.status == 200 and "protobuf" in r.header("Content-Type")
    doc = _pb_fields(r.body)
    assert _first(doc, 1) == b"2.0"
    info = _pb_fields(_first(doc, 2))
    assert _first(info, 1) == b"Kubernetes" and _first(info, 2).startswith(b"v1.31.")
    # Paths.path -> NamedPathItem{name, PathItem{patch=8 -> Operation}}: dryRun is a query parameter
    found = False
    for f, _, named in _pb_fields(_first(doc, 8)):
        item = _pb_fields(named)
        if _first(item, 1) != b"/api/v1/namespaces/{name}":
            continue
        op = _pb_fields(_first(_pb_fields(_first(item, 2)), 8))
        params = [_pb_fields(_first(_pb_fields(_first(_pb_fields(v), 1)), 2)) for f2, _, v in op if f2 == 8]
        names = {_first(_pb_fields(_first(p, 3)), 4) for p in params}
        assert {b"dryRun", b"fieldManager", b"fieldValidation"} <= names
        exts = [_pb_fields(v) for f2, _, v in op if f2 == 13]
        gvk = [
            _first(_pb_fields(_first(e, 2)), 2)
            for e in exts
            if _first(e, 1) == b"x-kubernetes-group-version-kind"
        ]
        assert gvk and b"kind: Namespace" in gvk[0]
        found = True
    assert found


def test_openapi_v2_json_and_v3(bare):
    doc = bare.request("GET", "/openapi/v2").json()
    assert doc["swagger"] == "2.0" and doc["info"]["title"] == "Kubernetes"
    index = bare.request("GET", "/openapi/v3").json()
    assert "api/v1" in index["paths"] and "apis/apps/v1" in index["paths"]
    url = index["paths"]["api/v1"]["serverRelativeURL"]
    gv = bare.request("GET", url).json()
    assert gv["openapi"].startswith("3.")
    patch = gv["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "kind": "ConfigMap", "version": "v1"}
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}


def test_openapi_v3_index_follows_crds(fresh_emulator):
    install_widget_crd(fresh_emulator)
    index = fresh_emulator.request("GET", "/openapi/v3").json()
    assert f"apis/{WIDGET_GROUP}/v1" in index["paths"]
    assert WIDGET_CRD["spec"]["names"]["kind"] == "Widget"
