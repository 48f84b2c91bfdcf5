"""specpilot.core.k8s_retry's choice between its in-worker server-side apply (plugin_utils/k8s_api.py
Writer.apply) and kubernetes.core.k8s, and Writer.apply's answers when the API refuses. That both answer
the same is tests/emulator/test_kubernetes_core.py's
test_the_in_worker_server_side_apply_answers_as_kubernetes_core_does."""

from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException
from kubernetes.dynamic.exceptions import api_exception

from ansible_collections.specpilot.core.plugins.action.k8s_retry import server_side_apply
from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_retry import retryable
from ansible_collections.specpilot.core.plugins.plugin_utils import k8s_api

CM = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "c", "namespace": "ns"},
    "data": {"a": "1"},
}
SSA = {
    "state": "present",
    "apply": True,
    "server_side_apply": {"field_manager": "specpilot"},
    "definition": CM,
}


def test_a_server_side_apply_of_one_object_is_made_in_the_worker():
    made = server_side_apply(dict(SSA, kubeconfig="/k", context="lab"))
    assert made == {"manifest": CM, "field_manager": "specpilot", "force_conflicts": False}
    assert made["manifest"] is not CM  # a copy, as JSON carries it
    forced = dict(SSA, server_side_apply={"field_manager": "f", "force_conflicts": "true"})
    assert server_side_apply(forced)["force_conflicts"] is True
    assert server_side_apply(dict(SSA, apply="yes"))["field_manager"] == "specpilot"


@pytest.mark.parametrize(
    "change",
    [
        {"state": "absent"},
        {"apply": False},
        {"wait": True},  # an argument Writer.apply does not implement
        {"validate_certs": None, "verify_ssl": False},  # an alias: the module knows it
        {"server_side_apply": {"force_conflicts": True}},  # no field manager
        {"server_side_apply": {"field_manager": "f", "other": 1}},
        {"server_side_apply": {"field_manager": "f", "force_conflicts": "maybe"}},  # the module refuses it
        {"definition": "apiVersion: v1\nkind: ConfigMap\n"},  # a YAML string
        {"definition": dict(CM, metadata={"namespace": "ns"})},  # no name
        {"definition": {"kind": "ConfigMap", "metadata": {"name": "c"}}},  # no apiVersion
        {"definition": dict(CM, data={"a": object()})},  # JSON cannot carry it
    ],
)
def test_anything_else_goes_to_kubernetes_core(change):
    args = {k: v for k, v in dict(SSA, **change).items() if v is not None}
    assert server_side_apply(args) is None


class _Resource(object):
    """A resource whose read or apply raises what the API server answered."""

    def __init__(self, get_status=None, apply_status=None):
        self.get_status, self.apply_status, self.calls = get_status, apply_status, []

    @staticmethod
    def _raise(status):
        reply = type("Reply", (), {"status": status, "reason": "Refused", "headers": {}})()
        reply.data, reply.getheaders = b'{"code": %d}' % status, lambda: {}
        raise api_exception(ApiException(http_resp=reply))

    def get(self, **kwargs):
        self.calls.append(("get", kwargs))
        if self.get_status:
            self._raise(self.get_status)
        return type("Obj", (), {"to_dict": lambda self: {}})()

    def server_side_apply(self, **kwargs):
        self.calls.append(("apply", kwargs))
        self._raise(self.apply_status)


def _writer(resource):
    fake = type("Client", (), {"resources": type("R", (), {"get": lambda self, **kw: resource})()})()
    return k8s_api.Writer({}, 9, make_client=lambda auth: fake)


def test_a_refused_read_or_apply_says_which_with_the_status_the_retries_classify():
    resource = _Resource(get_status=403)
    out = _writer(resource).apply(CM, "specpilot")
    assert out["failed"] and out["status"] == 403 and not retryable(out)
    assert out["msg"].startswith("Failed to retrieve requested object: ")
    assert [c[0] for c in resource.calls] == ["get"]

    resource = _Resource(apply_status=409)
    out = _writer(resource).apply(CM, "specpilot", force_conflicts=False, dry_run=True)
    assert out["failed"] and out["status"] == 409 and out["msg"].startswith("Failed to apply object: ")
    assert resource.calls[1] == (
        "apply",
        {
            "_request_timeout": 9,
            "body": CM,
            "name": "c",
            "namespace": "ns",
            "field_manager": "specpilot",
            "force_conflicts": False,
            "dry_run": "All",
        },
    )
    resource = _Resource(get_status=404, apply_status=422)  # none yet: the apply is still made
    out = _writer(resource).apply(CM, "specpilot")
    assert [c[0] for c in resource.calls] == ["get", "apply"] and out["status"] == 422
    out = _writer(_Resource(apply_status=503)).apply(CM, "specpilot")
    assert out["failed"] and retryable(out)


def test_changed_only_beyond_generation_and_resource_version():
    """service.py diff_objects: a difference in metadata.generation or .resourceVersion alone is not a
    change (with kubernetes.core's warning); any other is, and --diff shows it."""
    before = {"metadata": {"name": "c", "resourceVersion": "1"}, "data": {"a": "1"}}
    same = k8s_api._applied(
        before, {"metadata": {"name": "c", "resourceVersion": "2"}, "data": {"a": "1"}}, diff=True
    )
    assert same["changed"] is False and "only metadata.generation" in same["warnings"][0]
    assert same["diff"] == {
        "before": {"metadata": {"resourceVersion": "1"}},
        "after": {"metadata": {"resourceVersion": "2"}},
    }
    moved = k8s_api._applied(before, {"metadata": {"name": "c", "resourceVersion": "2"}, "data": {"a": "2"}})
    assert moved["changed"] is True and "diff" not in moved and "warnings" not in moved
    created = k8s_api._applied({}, before, diff=True)
    assert created == {
        "changed": True,
        "method": "apply",
        "result": before,
        "diff": {"before": {}, "after": before},
    }
