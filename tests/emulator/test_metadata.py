"""uid, resourceVersion, generation, finalizers, ownerReferences garbage collection, managedFields."""

from __future__ import annotations

import pytest
from emulator_helpers import install_widget_crd, make_namespace, wait_for, widget, widgets_path


@pytest.fixture(scope="module")
def emu(emulator_factory):
    e = emulator_factory(crds=[], name="metadata")
    install_widget_crd(e)
    return e


def cm(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def test_system_fields_on_create(emu):
    ns = make_namespace(emu)
    got = emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm("a", k="v")).json()
    md = got["metadata"]
    assert len(md["uid"]) == 36 and md["resourceVersion"].isdigit()
    assert md["creationTimestamp"].endswith("Z") and "generation" not in md
    assert md["managedFields"][0]["manager"] and md["managedFields"][0]["operation"] == "Update"


def test_resource_version_is_global_and_bumped_only_by_real_changes(emu):
    ns = make_namespace(emu)
    a = emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm("a", k="v")).json()
    b = emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm("b", k="v")).json()
    assert int(b["metadata"]["resourceVersion"]) > int(a["metadata"]["resourceVersion"])
    # a no-op PUT, merge patch and JSON patch return the same object and RV
    same = emu.request("PUT", f"/api/v1/namespaces/{ns}/configmaps/a", a).json()
    assert same["metadata"]["resourceVersion"] == a["metadata"]["resourceVersion"]
    same = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/a",
        {"data": {"k": "v"}},
        content_type="application/merge-patch+json",
    ).json()
    assert same["metadata"]["resourceVersion"] == a["metadata"]["resourceVersion"]
    same = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/a",
        [{"op": "replace", "path": "/data/k", "value": "v"}],
        content_type="application/json-patch+json",
    ).json()
    assert same["metadata"]["resourceVersion"] == a["metadata"]["resourceVersion"]
    lst = emu.request("GET", f"/api/v1/namespaces/{ns}/configmaps").json()
    before = lst["metadata"]["resourceVersion"]
    changed = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/a",
        {"data": {"k": "w"}},
        content_type="application/merge-patch+json",
    ).json()
    assert int(changed["metadata"]["resourceVersion"]) > int(before)
    assert changed["metadata"]["uid"] == a["metadata"]["uid"]
    assert changed["metadata"]["creationTimestamp"] == a["metadata"]["creationTimestamp"]


def test_put_with_a_stale_resource_version_conflicts(emu):
    ns = make_namespace(emu)
    a = emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm("a", k="v")).json()
    emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/a",
        {"data": {"k": "2"}},
        content_type="application/merge-patch+json",
    )
    a["data"]["k"] = "3"
    r = emu.request("PUT", f"/api/v1/namespaces/{ns}/configmaps/a", a)
    assert r.status == 409
    assert r.json()["reason"] == "Conflict"
    assert r.json()["message"] == (
        'Operation cannot be fulfilled on configmaps "a": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
    # a merge patch carrying a stale resourceVersion is a precondition too
    r = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/a",
        {"metadata": {"resourceVersion": a["metadata"]["resourceVersion"]}, "data": {"k": "4"}},
        content_type="application/merge-patch+json",
    )
    assert r.status == 409
    # without a resourceVersion the update is unconditional
    del a["metadata"]["resourceVersion"]
    assert emu.request("PUT", f"/api/v1/namespaces/{ns}/configmaps/a", a).status == 200


def test_generation_tracks_spec_changes_only(emu):
    ns = make_namespace(emu)
    w = emu.request("POST", widgets_path(ns), widget("w", ns)).json()
    assert w["metadata"]["generation"] == 1
    w2 = emu.request(
        "PATCH",
        widgets_path(ns, "w"),
        {"metadata": {"labels": {"a": "b"}}},
        content_type="application/merge-patch+json",
    ).json()
    assert w2["metadata"]["generation"] == 1
    assert int(w2["metadata"]["resourceVersion"]) > int(w["metadata"]["resourceVersion"])
    w3 = emu.request(
        "PATCH",
        widgets_path(ns, "w") + "/status",
        {"status": {"phase": "Ready"}},
        content_type="application/merge-patch+json",
    ).json()
    assert w3["metadata"]["generation"] == 1 and w3["status"]["phase"] == "Ready"
    w4 = emu.request(
        "PATCH", widgets_path(ns, "w"), {"spec": {"size": 5}}, content_type="application/merge-patch+json"
    ).json()
    assert w4["metadata"]["generation"] == 2
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "img:1"}]},
            },
        },
    }
    d = emu.request("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", dep).json()
    d2 = emu.request(
        "PATCH",
        f"/apis/apps/v1/namespaces/{ns}/deployments/d",
        {"spec": {"replicas": 3}},
        content_type="application/merge-patch+json",
    ).json()
    assert (d["metadata"]["generation"], d2["metadata"]["generation"]) == (1, 2)
    d3 = emu.request(
        "PATCH",
        f"/apis/apps/v1/namespaces/{ns}/deployments/d/status",
        {"status": {"observedGeneration": 2}},
        content_type="application/merge-patch+json",
    ).json()
    assert d3["metadata"]["generation"] == 2 and d3["status"]["observedGeneration"] == 2


def test_finalizers_and_deletion_timestamp(emu):
    ns = make_namespace(emu)
    body = cm("held")
    body["metadata"]["finalizers"] = ["lab.specpilot.dev/hold", "lab.specpilot.dev/other"]
    emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", body)
    r = emu.request("DELETE", f"/api/v1/namespaces/{ns}/configmaps/held")
    assert r.status == 200
    md = r.json()["metadata"]
    assert md["deletionTimestamp"] and md["deletionGracePeriodSeconds"] == 0
    got = emu.request("GET", f"/api/v1/namespaces/{ns}/configmaps/held").json()
    assert got["metadata"]["deletionTimestamp"] == md["deletionTimestamp"]
    # no new finalizers on a deleting object
    r = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/held",
        [{"op": "add", "path": "/metadata/finalizers/-", "value": "lab.specpilot.dev/new"}],
        content_type="application/json-patch+json",
    )
    assert r.status == 422 and "no new finalizers can be added" in r.json()["message"]
    r = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/held",
        [{"op": "remove", "path": "/metadata/finalizers/0"}],
        content_type="application/json-patch+json",
    )
    assert r.status == 200 and r.json()["metadata"]["finalizers"] == ["lab.specpilot.dev/other"]
    r = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/held",
        {"metadata": {"finalizers": []}},
        content_type="application/merge-patch+json",
    )
    assert r.status == 200
    assert emu.request("GET", f"/api/v1/namespaces/{ns}/configmaps/held").status == 404


def _owned(name: str, owner: dict, **extra) -> dict:
    body = cm(name)
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
            **extra,
        }
    ]
    return body


def test_garbage_collection_background(emu):
    ns = make_namespace(emu)
    owner = emu.request("POST", widgets_path(ns), widget("owner", ns)).json()
    emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", _owned("dep1", owner, controller=True))
    child = emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm("child")).json()
    grandchild = _owned("grandchild", child)
    emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", grandchild)
    emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/child",
        {"metadata": {"ownerReferences": _owned("x", owner)["metadata"]["ownerReferences"]}},
        content_type="application/merge-patch+json",
    )
    assert emu.request("DELETE", widgets_path(ns, "owner")).status == 200
    for name in ("dep1", "child", "grandchild"):
        wait_for(lambda n=name: emu.request("GET", f"/api/v1/namespaces/{ns}/configmaps/{n}").status == 404)


def test_garbage_collection_orphan(emu):
    ns = make_namespace(emu)
    owner = emu.request("POST", widgets_path(ns), widget("owner", ns)).json()
    emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", _owned("dep", owner))
    r = emu.request("DELETE", widgets_path(ns, "owner"), {"propagationPolicy": "Orphan"})
    assert r.status == 200
    wait_for(lambda: emu.request("GET", widgets_path(ns, "owner")).status == 404)
    dep = emu.request("GET", f"/api/v1/namespaces/{ns}/configmaps/dep").json()
    assert not dep["metadata"].get("ownerReferences")


def test_garbage_collection_foreground(emu):
    ns = make_namespace(emu)
    owner = emu.request("POST", widgets_path(ns), widget("owner", ns)).json()
    held = _owned("held", owner, blockOwnerDeletion=True)
    held["metadata"]["finalizers"] = ["lab.specpilot.dev/hold"]
    emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", held)
    r = emu.request("DELETE", widgets_path(ns, "owner") + "?propagationPolicy=Foreground")
    assert r.status == 200
    got = emu.request("GET", widgets_path(ns, "owner")).json()
    assert "foregroundDeletion" in got["metadata"]["finalizers"] and got["metadata"]["deletionTimestamp"]
    emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/held",
        {"metadata": {"finalizers": None}},
        content_type="application/merge-patch+json",
    )
    wait_for(lambda: emu.request("GET", widgets_path(ns, "owner")).status == 404)


def test_dangling_owner_reference_is_collected(emu):
    ns = make_namespace(emu)
    fake = {
        "apiVersion": f"lab.specpilot.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "ghost", "uid": "00000000-0000-4000-8000-000000000000"},
    }
    emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", _owned("orphaned", fake))
    wait_for(lambda: emu.request("GET", f"/api/v1/namespaces/{ns}/configmaps/orphaned").status == 404)


def test_managed_fields_follow_the_field_manager(emu):
    ns = make_namespace(emu)
    emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps?fieldManager=creator", cm("m", a="1"))
    got = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/m?fieldManager=editor",
        {"data": {"b": "2"}},
        content_type="application/merge-patch+json",
    ).json()
    managers = {(e["manager"], e["operation"]) for e in got["metadata"]["managedFields"]}
    assert ("creator", "Update") in managers and ("editor", "Update") in managers
    got = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/m?fieldManager=applier",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m"}, "data": {"c": "3"}},
        content_type="application/apply-patch+yaml",
    ).json()
    assert ("applier", "Apply") in {(e["manager"], e["operation"]) for e in got["metadata"]["managedFields"]}
