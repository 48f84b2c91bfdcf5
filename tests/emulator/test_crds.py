"""CustomResourceDefinitions installed through the API, and the custom resources they serve."""

from __future__ import annotations

import copy

import pytest
from emulator_helpers import (
    WIDGET_CRD,
    WIDGET_GROUP,
    install_widget_crd,
    make_namespace,
    wait_for,
    widget,
    widgets_path,
)

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@pytest.fixture(scope="module")
def emu(emulator_factory):
    return emulator_factory(crds=[], name="crds")


def isvc(name: str, ns: str, predictor: dict) -> dict:
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"predictor": predictor},
    }


def test_crd_install_sets_established_status(emu):
    install_widget_crd(emu)
    crd = emu.request("GET", f"{CRDS}/widgets.{WIDGET_GROUP}").json()
    conds = {c["type"]: c for c in crd["status"]["conditions"]}
    assert conds["Established"]["status"] == "True" and conds["NamesAccepted"]["status"] == "True"
    assert crd["status"]["acceptedNames"]["kind"] == "Widget"
    assert crd["status"]["acceptedNames"]["listKind"] == "WidgetList"
    assert crd["status"]["storedVersions"] == ["v1"]
    assert crd["spec"]["conversion"] == {"strategy": "None"}
    assert crd["metadata"]["generation"] == 1


def test_crd_validation(emu):
    bad = copy.deepcopy(WIDGET_CRD)
    bad["metadata"]["name"] = "wrong.lab.specpilot.dev"
    r = emu.request("POST", CRDS, bad)
    assert r.status == 422
    assert (
        'metadata.name: Invalid value: "wrong.lab.specpilot.dev": must be spec.names.plural+"."+spec.group'
        in r.json()["message"]
    )
    bad = copy.deepcopy(WIDGET_CRD)
    bad["metadata"]["name"] = f"gadgets.{WIDGET_GROUP}"
    bad["spec"]["names"] = {"plural": "gadgets", "kind": "Gadget"}
    for v in bad["spec"]["versions"]:
        v["storage"] = True
    r = emu.request("POST", CRDS, bad)
    assert (
        r.status == 422 and "must have exactly one version marked as storage version" in r.json()["message"]
    )


def test_custom_resource_crud_defaults_and_list_kind(emu):
    install_widget_crd(emu)
    ns = make_namespace(emu)
    got = emu.request("POST", widgets_path(ns), widget("a", ns)).json()
    assert got["spec"] == {"color": "red", "size": 1}
    lst = emu.request("GET", widgets_path(ns)).json()
    assert lst["kind"] == "WidgetList" and lst["apiVersion"] == f"{WIDGET_GROUP}/v1"
    assert [i["metadata"]["name"] for i in lst["items"]] == ["a"]
    # the other served version reads the same object (conversion strategy None)
    other = emu.request("GET", widgets_path(ns, "a", version="v1beta1")).json()
    assert (
        other["apiVersion"] == f"{WIDGET_GROUP}/v1beta1"
        and other["metadata"]["uid"] == got["metadata"]["uid"]
    )
    r = emu.request("DELETE", widgets_path(ns, "a"))
    assert r.status == 200 and r.json()["kind"] == "Widget"  # custom resources return the deleted object
    assert emu.request("GET", widgets_path(ns, "a")).status == 404


def test_crd_update_changes_the_schema(fresh_emulator):
    emu = fresh_emulator
    install_widget_crd(emu)
    ns = make_namespace(emu)
    w = widget("w", ns)
    w["spec"]["shape"] = "round"
    assert "shape" not in emu.request("POST", widgets_path(ns), w).json()["spec"]
    crd = emu.request("GET", f"{CRDS}/widgets.{WIDGET_GROUP}").json()
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["shape"] = {
        "type": "string"
    }
    got = emu.request("PUT", f"{CRDS}/widgets.{WIDGET_GROUP}", crd).json()
    assert got["metadata"]["generation"] == 2
    w["metadata"]["name"] = "w2"
    assert emu.request("POST", widgets_path(ns), w).json()["spec"]["shape"] == "round"


def test_crd_deletion_removes_its_objects(fresh_emulator):
    emu = fresh_emulator
    install_widget_crd(emu)
    ns = make_namespace(emu)
    emu.request("POST", widgets_path(ns), widget("x", ns))
    r = emu.request("DELETE", f"{CRDS}/widgets.{WIDGET_GROUP}")
    assert r.status == 200 and r.json()["metadata"]["deletionTimestamp"]
    wait_for(lambda: emu.request("GET", f"{CRDS}/widgets.{WIDGET_GROUP}").status == 404)
    assert emu.request("GET", widgets_path(ns)).status == 404
    install_widget_crd(emu)  # re-created: empty
    assert emu.request("GET", widgets_path(ns)).json()["items"] == []


def test_printer_columns_in_table_output(emu):
    install_widget_crd(emu)
    ns = make_namespace(emu)
    emu.request("POST", widgets_path(ns), widget("t", ns, size=3))
    emu.request(
        "PATCH",
        widgets_path(ns, "t") + "/status",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        content_type="application/merge-patch+json",
    )
    table = emu.request(
        "GET", widgets_path(ns), accept="application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    ).json()
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Color", "Size", "Ready", "Age"]
    cells = table["rows"][0]["cells"]
    assert cells[:4] == ["t", "red", 3, "True"] and cells[4].endswith("s")
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


# ----------------------------------------------------------------------------- KServe CRDs
def test_misplaced_storage_uris_are_pruned(emulator_any):
    emu = emulator_any
    ns = make_namespace(emu)
    body = isvc(
        "pruned",
        ns,
        {
            "model": {
                "modelFormat": {"name": "vLLM"},
                "args": ["--x"],
                "storageUris": [{"uri": "s3://b/draft", "mountPath": "/mnt/draft"}],
            }
        },
    )
    r = emu.request("POST", f"/apis/serving.kserve.io/v1beta1/namespaces/{ns}/inferenceservices", body)
    assert r.status == 201, r
    assert '299 - "unknown field \\"spec.predictor.model.storageUris\\""' in r.header_all("Warning")
    got = emu.request(
        "GET", f"/apis/serving.kserve.io/v1beta1/namespaces/{ns}/inferenceservices/pruned"
    ).json()
    assert "storageUris" not in got["spec"]["predictor"]["model"]
    assert got["spec"]["predictor"]["model"]["args"] == ["--x"]
    r = emu.request(
        "POST",
        f"/apis/serving.kserve.io/v1beta1/namespaces/{ns}/inferenceservices" "?fieldValidation=Strict",
        dict(body, metadata={"name": "strict", "namespace": ns}),
    )
    assert r.status == 400
    assert r.json()["message"] == 'strict decoding error: unknown field "spec.predictor.model.storageUris"'


def test_relative_mount_path_is_rejected(emulator_any):
    emu = emulator_any
    ns = make_namespace(emu)
    body = isvc(
        "relative",
        ns,
        {
            "model": {"modelFormat": {"name": "vLLM"}},
            "storageUris": [{"uri": "s3://b/t", "mountPath": "relative"}],
        },
    )
    r = emu.request("POST", f"/apis/serving.kserve.io/v1beta1/namespaces/{ns}/inferenceservices", body)
    assert r.status == 422, r
    causes = r.json()["details"]["causes"]
    assert any(c["field"] == "spec.predictor.storageUris[0].mountPath" for c in causes)
    assert r.json()["message"].startswith('InferenceService.serving.kserve.io "relative" is invalid')


def test_kserve_status_subresource_and_table(emulator_any):
    emu = emulator_any
    ns = make_namespace(emu)
    base = f"/apis/serving.kserve.io/v1beta1/namespaces/{ns}/inferenceservices"
    emu.request("POST", base, isvc("tbl", ns, {"model": {"modelFormat": {"name": "vLLM"}}}))
    status = {
        "status": {
            "url": "http://tbl.example",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        }
    }
    got = emu.request(
        "PATCH", f"{base}/tbl/status", status, content_type="application/merge-patch+json"
    ).json()
    assert got["status"]["url"] == "http://tbl.example"
    table = emu.request("GET", base, accept="application/json;as=Table;v=v1;g=meta.k8s.io").json()
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names[0] == "Name" and "URL" in names and "Ready" in names
    row = dict(zip(names, table["rows"][0]["cells"]))
    assert row["URL"] == "http://tbl.example" and row["Ready"] == "True"
