"""Watches: resourceVersion semantics, timeouts, selectors, bookmarks, 410 Gone, legacy paths."""

from __future__ import annotations

import http.client
import json
import threading
import time

import pytest
from emulator_helpers import ADMIN_HEADERS, make_namespace
from kubernetes import client, watch


@pytest.fixture(scope="module")
def emu(emulator_factory):
    return emulator_factory(
        crds=[], name="watch", extra_args=["--watch-history", "100", "--bookmark-interval", "0.5"]
    )


def cm(name: str, labels: dict | None = None, **data: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}},
        "data": data,
    }


def stream(emu, path: str, timeout: float = 10.0, accept: str = "application/json") -> list[dict]:
    """Read a whole watch stream (the server ends it at timeoutSeconds)."""
    conn = http.client.HTTPConnection("127.0.0.1", emu.port, timeout=timeout)
    conn.request("GET", path, headers={"Accept": accept, **ADMIN_HEADERS})
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.getheader("Transfer-Encoding") == "chunked"
    events = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    conn.close()
    return events


def test_watch_from_a_resource_version_and_timeout_ends_the_stream(emu):
    ns = make_namespace(emu)
    base = f"/api/v1/namespaces/{ns}/configmaps"
    emu.request("POST", base, cm("before"))
    rv = emu.request("GET", base).json()["metadata"]["resourceVersion"]

    def writer():
        time.sleep(0.3)
        emu.request("POST", base, cm("a", k="1"))
        emu.request("PATCH", f"{base}/a", {"data": {"k": "2"}}, content_type="application/merge-patch+json")
        emu.request("DELETE", f"{base}/a")

    t = threading.Thread(target=writer)
    t.start()
    t0 = time.monotonic()
    events = stream(emu, f"{base}?watch=true&resourceVersion={rv}&timeoutSeconds=2")
    elapsed = time.monotonic() - t0
    t.join()
    assert 1.5 < elapsed < 5, elapsed
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),
    ]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)
    assert events[1]["object"]["data"] == {"k": "2"}


@pytest.mark.parametrize("rv", ["", "0"])
def test_watch_without_resource_version_starts_with_synthetic_added(emu, rv):
    ns = make_namespace(emu)
    base = f"/api/v1/namespaces/{ns}/configmaps"
    emu.request("POST", base, cm("x"))
    emu.request("POST", base, cm("y"))
    events = stream(emu, f"{base}?watch=1&resourceVersion={rv}&timeoutSeconds=1")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "x"), ("ADDED", "y")]


def test_legacy_watch_path_and_single_object_watch(emu):
    ns = make_namespace(emu)
    base = f"/api/v1/namespaces/{ns}/configmaps"
    emu.request("POST", base, cm("one"))
    emu.request("POST", base, cm("two"))
    events = stream(emu, f"/api/v1/watch/namespaces/{ns}/configmaps?timeoutSeconds=1")
    assert {e["object"]["metadata"]["name"] for e in events} == {"one", "two"}
    events = stream(emu, f"/api/v1/watch/namespaces/{ns}/configmaps/two?timeoutSeconds=1")
    assert [e["object"]["metadata"]["name"] for e in events] == ["two"]


def test_label_and_field_selectors_with_transitions(emu):
    ns = make_namespace(emu)
    base = f"/api/v1/namespaces/{ns}/configmaps"
    rv = emu.request("GET", base).json()["metadata"]["resourceVersion"]

    def writer():
        time.sleep(0.3)
        emu.request("POST", base, cm("in", {"app": "x"}))
        emu.request("POST", base, cm("out", {"app": "y"}))
        emu.request(
            "PATCH",
            f"{base}/in",
            {"metadata": {"labels": {"app": "z"}}},
            content_type="application/merge-patch+json",
        )
        emu.request(
            "PATCH",
            f"{base}/out",
            {"metadata": {"labels": {"app": "x"}}},
            content_type="application/merge-patch+json",
        )

    t = threading.Thread(target=writer)
    t.start()
    events = stream(emu, f"{base}?watch=true&resourceVersion={rv}&timeoutSeconds=2&labelSelector=app%3Dx")
    t.join()
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "in"),
        ("DELETED", "in"),
        ("ADDED", "out"),
    ]
    events = stream(
        emu, f"{base}?watch=true&resourceVersion={rv}&timeoutSeconds=1" "&fieldSelector=metadata.name%3Dout"
    )
    assert {e["object"]["metadata"]["name"] for e in events} == {"out"}


def test_too_old_resource_version_gives_410_gone(emu):
    ns = make_namespace(emu)
    base = f"/api/v1/namespaces/{ns}/configmaps"
    first_rv = emu.request("POST", base, cm("c", k="0")).json()["metadata"]["resourceVersion"]
    for i in range(250):  # beyond the bounded history (100 events here)
        emu.request(
            "PATCH", f"{base}/c", {"data": {"k": str(i + 1)}}, content_type="application/merge-patch+json"
        )
    events = stream(emu, f"{base}?watch=true&resourceVersion={first_rv}&timeoutSeconds=1")
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert status["kind"] == "Status" and status["code"] == 410 and status["reason"] == "Expired"
    assert status["message"].startswith(f"too old resource version: {first_rv} (")


def test_bookmarks(emu):
    ns = make_namespace(emu)
    base = f"/api/v1/namespaces/{ns}/configmaps"
    rv = emu.request("GET", base).json()["metadata"]["resourceVersion"]
    events = stream(emu, f"{base}?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=2")
    assert events and all(e["type"] == "BOOKMARK" for e in events)
    assert events[0]["object"]["kind"] == "ConfigMap" and events[0]["object"]["metadata"]["resourceVersion"]


def test_python_client_watch(emu):
    ns = make_namespace(emu)
    core = client.CoreV1Api(emu.api_client())
    core.create_namespaced_config_map(ns, cm("w1"))
    seen = []
    w = watch.Watch()
    for ev in w.stream(core.list_namespaced_config_map, ns, timeout_seconds=1):
        seen.append((ev["type"], ev["object"].metadata.name))
    assert seen == [("ADDED", "w1")]


def test_table_watch_sends_column_definitions_once(emu):
    ns = make_namespace(emu)
    base = f"/api/v1/namespaces/{ns}/configmaps"
    emu.request("POST", base, cm("t1"))
    emu.request("POST", base, cm("t2"))
    events = stream(
        emu,
        f"{base}?watch=true&timeoutSeconds=1",
        accept="application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    )
    assert [e["object"]["kind"] for e in events] == ["Table", "Table"]
    assert events[0]["object"]["columnDefinitions"] and events[1]["object"]["columnDefinitions"] is None
    assert events[1]["object"]["rows"][0]["cells"][0] == "t2"


def test_watch_all_namespaces(emu):
    a = make_namespace(emu)
    rv = emu.request("GET", "/api/v1/configmaps").json()["metadata"]["resourceVersion"]

    def writer():
        time.sleep(0.2)
        emu.request("POST", f"/api/v1/namespaces/{a}/configmaps", cm("anywhere"))

    t = threading.Thread(target=writer)
    t.start()
    events = stream(emu, f"/api/v1/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=1")
    t.join()
    assert ("ADDED", a, "anywhere") in [
        (e["type"], e["object"]["metadata"]["namespace"], e["object"]["metadata"]["name"]) for e in events
    ]
