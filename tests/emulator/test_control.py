"""The test-only control API: request log, fault injection, reset."""

from __future__ import annotations

import time

import pytest
from emulator_helpers import install_widget_crd, make_namespace, widget, widgets_path
from kubernetes import client
from kubernetes.client.rest import ApiException

from specpilot_lab.apiserver.control import ControlClient, ControlError


@pytest.fixture(scope="module")
def emu(emulator_factory):
    return emulator_factory(crds=[], name="control")


@pytest.fixture(autouse=True)
def no_faults(emu):
    emu.control.clear_faults()
    yield
    emu.control.clear_faults()


def cm(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}


def test_request_log_entries(emu):
    ns = make_namespace(emu)
    mark = emu.control.mark()
    emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps?fieldManager=me", cm("a"))
    emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/a?dryRun=All",
        {"data": {"x": "y"}},
        content_type="application/merge-patch+json",
    )
    emu.request("GET", f"/api/v1/namespaces/{ns}/configmaps/a")
    emu.request("GET", f"/api/v1/namespaces/{ns}/configmaps")
    emu.request("DELETE", f"/api/v1/namespaces/{ns}/configmaps/a")
    emu.request("GET", f"/api/v1/namespaces/{ns}/pods/nope/log")
    log = emu.control.requests(since=mark)
    assert [e["verb"] for e in log] == ["create", "patch", "get", "list", "delete", "get"]
    create, patch, get, lst, delete, logs = log
    assert create["method"] == "POST" and create["resource"] == "configmaps" and create["namespace"] == ns
    assert create["field_manager"] == "me" and create["code"] == 201 and create["mutated"] is True
    assert create["content_type"] == "application/json" and create["dry_run"] is False
    assert patch["dry_run"] is True and patch["mutated"] is False and patch["name"] == "a"
    assert patch["content_type"] == "application/merge-patch+json" and patch["query"] == "dryRun=All"
    assert get["code"] == 200 and lst["name"] == ""
    assert delete["mutated"] is True
    assert logs["subresource"] == "log" and logs["code"] == 404
    assert all({"time", "path", "index"} <= set(e) for e in log)
    assert [e["index"] for e in log] == list(range(mark, mark + 6))
    assert emu.control.writes(since=mark) == [create, delete]
    emu.control.clear_requests()
    assert emu.control.requests() == []


def test_fault_500_then_recovery_with_count(emu):
    ns = make_namespace(emu)
    rule = emu.control.add_fault(verb="create", resource="configmaps", code=500, count=1)
    assert rule["id"] and rule["injected"] == 0
    r = emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm("x"))
    assert r.status == 500 and r.json()["reason"] == "InternalError"
    assert r.json()["message"].startswith("Internal error occurred: ")
    assert emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm("x")).status == 201
    assert emu.control.faults()[0]["injected"] == 1


def test_fault_409_answers_writes_only_as_the_api_server_does(emu):
    """A conflict is an answer to a write (a stale resourceVersion, AlreadyExists): a verb="*" 409 rule
    leaves the reads alone and is not counted for them (the fault matrix's canary, CI of fc7ac0d, failed on a
    409 to a Lease GET, which no API server sends)."""
    ns = make_namespace(emu)
    emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm("c"))
    emu.control.add_fault(verb="*", resource="configmaps", namespace=ns, code=409)
    assert emu.request("GET", f"/api/v1/namespaces/{ns}/configmaps/c").status == 200
    assert emu.request("GET", f"/api/v1/namespaces/{ns}/configmaps").status == 200
    assert emu.control.faults()[0]["injected"] == 0
    assert emu.request("DELETE", f"/api/v1/namespaces/{ns}/configmaps/c").status == 409
    assert emu.control.faults()[0]["injected"] == 1


def test_fault_409_is_an_optimistic_concurrency_conflict(emu):
    ns = make_namespace(emu)
    emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm("c"))
    emu.control.add_fault(verb="patch", resource="configmaps", namespace=ns, code=409)
    r = emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/c",
        {"data": {"a": "b"}},
        content_type="application/merge-patch+json",
    )
    assert r.status == 409 and r.json()["reason"] == "Conflict"
    assert r.json()["message"] == (
        'Operation cannot be fulfilled on configmaps "c": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
    # other namespaces are untouched
    other = make_namespace(emu)
    emu.request("POST", f"/api/v1/namespaces/{other}/configmaps", cm("c"))
    assert (
        emu.request(
            "PATCH",
            f"/api/v1/namespaces/{other}/configmaps/c",
            {"data": {"a": "b"}},
            content_type="application/merge-patch+json",
        ).status
        == 200
    )


def test_fault_429_has_retry_after_and_the_python_client_sees_it(emu):
    ns = make_namespace(emu)
    emu.control.add_fault(verb="get", resource="configmaps", code=429, count=1, retry_after=2)
    r = emu.request("GET", f"/api/v1/namespaces/{ns}/configmaps/anything")
    assert r.status == 429 and r.header("Retry-After") == "2"
    assert r.json()["reason"] == "TooManyRequests" and r.json()["details"]["retryAfterSeconds"] == 2
    emu.control.add_fault(verb="list", resource="configmaps", code=503, count=1)
    core = client.CoreV1Api(emu.api_client())
    with pytest.raises(ApiException) as e:
        core.list_namespaced_config_map(ns)
    assert e.value.status == 503


def test_fault_delay_and_rate_with_seed(emu):
    ns = make_namespace(emu)
    emu.control.add_fault(verb="list", resource="configmaps", delay_ms=300)
    t0 = time.monotonic()
    assert emu.request("GET", f"/api/v1/namespaces/{ns}/configmaps").status == 200
    assert time.monotonic() - t0 >= 0.3
    emu.control.clear_faults()

    def pattern() -> list[int]:
        emu.control.clear_faults()
        emu.control.add_fault(verb="get", resource="namespaces", code=500, rate=0.5, seed=7)
        return [emu.request("GET", f"/api/v1/namespaces/{ns}").status for _ in range(20)]

    first, second = pattern(), pattern()
    assert first == second and 500 in first and 200 in first


def test_faults_on_custom_resources_and_subresources(emu):
    install_widget_crd(emu)
    ns = make_namespace(emu)
    emu.request("POST", widgets_path(ns), widget("w", ns))
    emu.control.add_fault(verb="patch", resource="widgets/status", code=500)
    r = emu.request(
        "PATCH",
        widgets_path(ns, "w") + "/status",
        {"status": {"phase": "x"}},
        content_type="application/merge-patch+json",
    )
    assert r.status == 500
    r = emu.request(
        "PATCH", widgets_path(ns, "w"), {"spec": {"size": 2}}, content_type="application/merge-patch+json"
    )
    assert r.status == 200


def test_fault_rule_validation(emu):
    with pytest.raises(ControlError):
        emu.control.add_fault(verb="frobnicate", code=500)
    with pytest.raises(ControlError):
        emu.control.add_fault(code=418)
    rule = emu.control.add_fault(code=500, resource="secrets")
    emu.control.remove_fault(rule["id"])
    assert emu.control.faults() == []


def test_reset_returns_to_the_boot_state(fresh_emulator):
    emu = fresh_emulator
    ctl = ControlClient(emu.url)
    boot_crds = {
        c["metadata"]["name"]
        for c in emu.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions").json()["items"]
    }
    install_widget_crd(emu)
    ns = make_namespace(emu)
    emu.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm("x"))
    ctl.add_fault(verb="get", resource="secrets", code=500)
    ctl.reset()
    assert ctl.requests() == [] and ctl.faults() == []
    names = {n["metadata"]["name"] for n in emu.request("GET", "/api/v1/namespaces").json()["items"]}
    assert names == {"default", "kube-system", "kube-public", "kube-node-lease"}
    crds = {
        c["metadata"]["name"]
        for c in emu.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions").json()["items"]
    }
    assert crds == boot_crds
    assert emu.request("GET", "/apis/lab.specpilot.dev/v1").status == 404
    assert ctl.info()["url"] == emu.url
