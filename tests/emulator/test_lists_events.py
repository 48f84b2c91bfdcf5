"""Lists (kinds, selectors, paging, tables) and core/v1 Events."""

from __future__ import annotations

import base64

import pytest
from emulator_helpers import ADMIN_HEADERS, make_namespace
from kubernetes import client

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"


@pytest.fixture(scope="module")
def emu(emulator_factory):
    return emulator_factory(crds=[], name="lists")


@pytest.fixture(scope="module")
def labelled(emu):
    ns = make_namespace(emu, "sel")
    for name, labels in [
        ("a", {"tier": "spec", "method": "ngram"}),
        ("b", {"tier": "spec", "method": "eagle3"}),
        ("c", {"tier": "base"}),
        ("d", {}),
    ]:
        emu.request(
            "POST",
            f"/api/v1/namespaces/{ns}/configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}},
        )
    return ns


def names(emu, ns: str, query: str) -> list[str]:
    r = emu.request("GET", f"/api/v1/namespaces/{ns}/configmaps?{query}")
    assert r.status == 200, r
    return [i["metadata"]["name"] for i in r.json()["items"]]


@pytest.mark.parametrize(
    "selector,expected",
    [
        ("tier=spec", ["a", "b"]),
        ("tier==spec", ["a", "b"]),
        ("tier!=spec", ["c", "d"]),
        ("method in (ngram,eagle3)", ["a", "b"]),
        ("method notin (ngram)", ["b", "c", "d"]),
        ("method", ["a", "b"]),
        ("!method", ["c", "d"]),
        ("tier=spec,method!=ngram", ["b"]),
        ("tier in (spec, base),!method", ["c"]),
    ],
)
def test_label_selectors(emu, labelled, selector, expected):
    from urllib.parse import quote

    assert names(emu, labelled, "labelSelector=" + quote(selector)) == expected


@pytest.mark.parametrize(
    "selector,expected",
    [
        ("metadata.name=c", ["c"]),
        ("metadata.name==c", ["c"]),
        ("metadata.name!=a", ["b", "c", "d"]),
        ("metadata.name!=a,metadata.name!=b", ["c", "d"]),
    ],
)
def test_field_selectors(emu, labelled, selector, expected):
    from urllib.parse import quote

    assert names(emu, labelled, "fieldSelector=" + quote(selector)) == expected


def test_bad_selector_is_400(emu, labelled):
    r = emu.request("GET", f"/api/v1/namespaces/{labelled}/configmaps?labelSelector=a%20in%20b")
    assert r.status == 400 and r.json()["reason"] == "BadRequest"


def test_field_selectors_on_status_and_nested_paths(emu):
    ns = make_namespace(emu)
    for name, node in (("p1", "node-a"), ("p2", "node-b")):
        emu.request(
            "POST",
            f"/api/v1/namespaces/{ns}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            },
        )
    emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/p2/status",
        {"status": {"phase": "Running"}},
        content_type="application/merge-patch+json",
    )
    core = client.CoreV1Api(emu.api_client())
    assert [
        p.metadata.name for p in core.list_namespaced_pod(ns, field_selector="status.phase=Running").items
    ] == ["p2"]
    assert [
        p.metadata.name for p in core.list_namespaced_pod(ns, field_selector="spec.nodeName=node-a").items
    ] == ["p1"]
    found = core.list_pod_for_all_namespaces(field_selector=f"metadata.namespace={ns},status.phase!=Running")
    assert [p.metadata.name for p in found.items] == ["p1"]
    nss = core.list_namespace(field_selector="status.phase=Active").items
    assert ns in {n.metadata.name for n in nss}


def test_list_metadata_and_paging(emu, labelled):
    lst = emu.request("GET", f"/api/v1/namespaces/{labelled}/configmaps").json()
    assert lst["kind"] == "ConfigMapList" and lst["apiVersion"] == "v1"
    assert int(lst["metadata"]["resourceVersion"]) > 0
    page = emu.request("GET", f"/api/v1/namespaces/{labelled}/configmaps?limit=3").json()
    assert [i["metadata"]["name"] for i in page["items"]] == ["a", "b", "c"]
    assert page["metadata"]["remainingItemCount"] == 1 and page["metadata"]["continue"]
    rest = emu.request(
        "GET", f"/api/v1/namespaces/{labelled}/configmaps?limit=3&continue=" f"{page['metadata']['continue']}"
    ).json()
    assert [i["metadata"]["name"] for i in rest["items"]] == ["d"] and "continue" not in rest["metadata"]
    # the python client pages the same way
    core = client.CoreV1Api(emu.api_client())
    first = core.list_namespaced_config_map(labelled, limit=2)
    second = core.list_namespaced_config_map(labelled, limit=2, _continue=first.metadata._continue)
    assert [i.metadata.name for i in first.items + second.items] == ["a", "b", "c", "d"]
    assert base64  # (continue tokens are opaque)


def test_builtin_tables(emu, labelled):
    t = emu.request("GET", f"/api/v1/namespaces/{labelled}/configmaps", accept=TABLE).json()
    assert t["kind"] == "Table"
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert t["rows"][0]["cells"][:2] == ["a", 0]
    assert t["rows"][0]["object"]["metadata"]["labels"] == {"tier": "spec", "method": "ngram"}
    full = emu.request(
        "GET", f"/api/v1/namespaces/{labelled}/configmaps/a?includeObject=Object", accept=TABLE
    )
    assert full.json()["rows"][0]["object"]["kind"] == "ConfigMap"
    none = emu.request("GET", f"/api/v1/namespaces/{labelled}/configmaps?includeObject=None", accept=TABLE)
    assert "object" not in none.json()["rows"][0]
    ns_table = emu.request("GET", "/api/v1/namespaces", accept=TABLE).json()
    assert [c["name"] for c in ns_table["columnDefinitions"]] == ["Name", "Status", "Age"]
    pods = emu.request("GET", "/api/v1/pods", accept=TABLE).json()
    assert [c["name"] for c in pods["columnDefinitions"]][:5] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
    ]
    deps = emu.request("GET", "/apis/apps/v1/deployments", accept=TABLE).json()
    assert [c["name"] for c in deps["columnDefinitions"]][:5] == [
        "Name",
        "Ready",
        "Up-to-date",
        "Available",
        "Age",
    ]


def test_partial_object_metadata(emu, labelled):
    r = emu.request(
        "GET",
        f"/api/v1/namespaces/{labelled}/configmaps",
        accept="application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
    )
    body = r.json()
    assert body["kind"] == "PartialObjectMetadataList"
    assert body["items"][0]["kind"] == "PartialObjectMetadata" and "data" not in body["items"][0]


# ---------------------------------------------------------------------------- events
def test_events_create_list_and_involved_object_selectors(emu):
    ns = make_namespace(emu)
    core = client.CoreV1Api(emu.api_client())
    for i, (pod, reason) in enumerate((("p1", "Scheduled"), ("p2", "FailedScheduling"), ("p1", "Started"))):
        core.create_namespaced_event(
            ns,
            {
                "metadata": {"name": f"ev{i}"},
                "involvedObject": {"kind": "Pod", "name": pod, "namespace": ns, "uid": f"uid-{pod}"},
                "reason": reason,
                "message": f"{reason} {pod}",
                "type": "Warning" if "Failed" in reason else "Normal",
                "source": {"component": "specpilot-lab"},
                "count": 1,
                "firstTimestamp": "2026-01-01T00:00:00Z",
                "lastTimestamp": "2026-01-01T00:00:00Z",
            },
        )
    evs = core.list_namespaced_event(
        ns, field_selector="involvedObject.name=p1,involvedObject.kind=Pod"
    ).items
    assert [e.reason for e in evs] == ["Scheduled", "Started"]
    evs = core.list_namespaced_event(ns, field_selector="reason=FailedScheduling").items
    assert [e.involved_object.name for e in evs] == ["p2"]
    evs = core.list_namespaced_event(ns, field_selector="type=Warning").items
    assert len(evs) == 1
    t = emu.request("GET", f"/api/v1/namespaces/{ns}/events", accept=TABLE).json()
    assert [c["name"] for c in t["columnDefinitions"]] == ["Last Seen", "Type", "Reason", "Object", "Message"]
    assert t["rows"][0]["cells"][3] == "pod/p1"


def test_watch_events_by_involved_object(emu):
    import http.client
    import json
    import threading
    import time

    ns = make_namespace(emu)
    rv = emu.request("GET", f"/api/v1/namespaces/{ns}/events").json()["metadata"]["resourceVersion"]

    def writer():
        time.sleep(0.2)
        for pod in ("x", "y"):
            emu.request(
                "POST",
                f"/api/v1/namespaces/{ns}/events",
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": f"e-{pod}"},
                    "involvedObject": {"kind": "Pod", "name": pod, "namespace": ns},
                    "reason": "Pulled",
                    "message": "pulled",
                    "type": "Normal",
                },
            )

    t = threading.Thread(target=writer)
    t.start()
    conn = http.client.HTTPConnection("127.0.0.1", emu.port, timeout=10)
    conn.request(
        "GET",
        f"/api/v1/namespaces/{ns}/events?watch=true&resourceVersion={rv}&timeoutSeconds=1"
        "&fieldSelector=involvedObject.name%3Dy",
        headers=ADMIN_HEADERS,
    )
    events = [json.loads(line) for line in conn.getresponse().read().splitlines() if line.strip()]
    t.join()
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "e-y")]
