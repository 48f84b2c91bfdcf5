"""The service lock's decisions (module_utils/k8s/service_lock.py): one holder formula, what taking,
renewing and releasing the Lease writes, and the message a refused run prints."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_state as ds
from ansible_collections.specpilot.core.plugins.module_utils.k8s import service_lock as sl

NOW = 1_800_000_000.0


def _lease(holder, duration=600, renewed=NOW - 100, version="7", transitions=0):
    return {
        "metadata": {"name": "specpilot-deploy-svc", "namespace": "ns", "resourceVersion": version},
        "spec": ds.lease_spec(holder, duration, renewed, transitions) if holder else {},
    }


def test_one_holder_formula_for_every_caller():
    assert (
        sl.holder_id("deploy", "alice", "ctl", None, 4242, "ab12cd34") == "alice@ctl/deploy/pid-4242/ab12cd34"
    )
    assert sl.holder_id("guard", "", "", "17", 1, "n") == "ansible@localhost/guard/awx-job-17/n"
    assert sl.holder_id("rollback", "bob", "h", "", 9, "n") == "bob@h/rollback/pid-9/n"


def test_no_lease_means_create_it_first():
    step = sl.acquire_step(None, "me", NOW, 600)
    assert step["do"] == "create" and step["status"]["free"]
    obj = sl.lease_object("svc", "ns", {"a": "b"})
    assert obj["metadata"] == {"name": "specpilot-deploy-svc", "namespace": "ns", "labels": {"a": "b"}}
    assert "spec" not in obj


def test_an_empty_lease_is_taken_by_compare_and_swap():
    step = sl.acquire_step(_lease(None), "me", NOW, 900)
    assert step["do"] == "patch"
    test, add = step["patch"]
    assert test == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    assert add["path"] == "/spec" and add["value"]["holderIdentity"] == "me"
    assert add["value"]["leaseDurationSeconds"] == 900 and add["value"]["leaseTransitions"] == 0
    assert add["value"]["renewTime"] == ds.micro_time(NOW)


def test_a_lock_another_holder_has_is_refused_until_it_expires():
    held = sl.acquire_step(_lease("alice@ci/deploy/pid-1/x", duration=600), "me", NOW, 600)
    assert held["do"] == "refuse" and held["status"]["holder"] == "alice@ci/deploy/pid-1/x"
    message = held["status"]["refusal"]  # lease_status carries the one refusal text (sl.held_message)
    assert message.startswith(
        "another deploy or rollback of this service is running - lock ns/specpilot-deploy-svc"
    )
    assert "held by alice@ci/deploy/pid-1/x" in message and "expires by itself at" in message
    # issue 39: the next command, with the service's name and the variable that confirms
    assert message.endswith(
        "or break it now: playbooks/break_lock.yml --limit svc -e specpilot_break_lock_confirm=true"
    )

    expired = sl.acquire_step(_lease("alice", duration=60, transitions=3), "me", NOW, 600)
    assert expired["do"] == "patch" and expired["status"]["expired"]
    assert expired["patch"][1]["value"]["leaseTransitions"] == 4  # taken over from another holder


def test_a_lock_this_holder_has_is_taken_again_without_a_transition():
    step = sl.acquire_step(_lease("me", transitions=2), "me", NOW, 600)
    assert step["do"] == "patch" and step["status"]["mine"]
    assert step["patch"][1]["value"]["leaseTransitions"] == 2


def test_renew_only_while_held_at_that_version():
    assert sl.renew_patch("me", "12", NOW) == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "12"},
        {"op": "test", "path": "/spec/holderIdentity", "value": "me"},
        {"op": "replace", "path": "/spec/renewTime", "value": ds.micro_time(NOW)},
    ]
