"""The filter and test plugins of the deploy role (thin wrappers, their edge cases)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from deploy_unit_helpers import plan

from ansible_collections.specpilot.core.plugins.filter import deploy as filters
from ansible_collections.specpilot.core.plugins.test import deploy as tests


def test_failure_summary_takes_the_first_problem_of_a_report():
    report = (
        "specpilot validate: x (namespace n): FAILED; 2 error(s), 0 warning(s)\nERRORS:\n"
        "  1. specpilot_speculative.num_speculative_tokens: 0 is out of range\n     fix: use >= 1\n"
        "  2. other"
    )
    assert filters.failure_summary(report) == (
        "specpilot validate: x (namespace n): FAILED; 2 error(s), 0 warning(s) - "
        "specpilot_speculative.num_speculative_tokens: 0 is out of range"
    )
    assert filters.failure_summary("one line\nmore") == "one line"
    assert filters.failure_summary("") == "unknown error"


def test_dry_run_pruned_reads_loop_results():
    sent = {
        "kind": "InferenceService",
        "metadata": {"name": "a"},
        "spec": {"predictor": {"storageUris": [1]}},
    }
    results = [
        {
            "item": sent,
            "result": {"kind": "InferenceService", "metadata": {"name": "a"}, "spec": {"predictor": {}}},
        },
        {"skipped": True, "item": sent},
    ]
    assert filters.dry_run_pruned(results) == ["InferenceService/a: spec.predictor.storageUris"]
    assert filters.dry_run_pruned([]) == []


def test_log_entry_and_lease_helpers():
    assert filters.log_entry({"item": True, "log": "x"}, "pod-1") == {
        "pod": "pod-1",
        "container": "kserve-container",
        "previous": True,
        "text": "x",
        "error": "",
    }
    # a read that failed or timed out (ignore_errors in diagnose.yml): its message, for deploy_diagnosis
    timed_out = {"item": False, "failed": True, "msg": "Task failed: Timed out after 2 second(s)."}
    assert filters.log_entry(timed_out, "pod-1")["error"] == "Task failed: Timed out after 2 second(s)."
    assert filters.log_entry({"item": False, "failed": True}, "pod-1")["error"] == "failed"
    spec = filters.lease_spec("me", 60, now=1_800_000_000)
    assert filters.lease_status({"spec": spec}, "other", now=1_800_000_030)["held"]
    assert filters.lease_status({"spec": spec}, "other", now=1_800_000_061)["expired"]


def test_deploy_decision_needs_a_plan():
    with pytest.raises(AnsibleFilterError, match="validated plan"):
        filters.deploy_decision({}, {})
    out = filters.deploy_decision(plan(), {}, now=1_800_000_000)
    assert out["first_deploy"] and out["result"]["applied"]


def test_k8s_retryable():
    assert tests.k8s_retryable({"failed": True, "msg": '{"code":503}'})
    assert not tests.k8s_retryable({"failed": True, "msg": '{"code":403}'})
    assert not tests.k8s_retryable({"changed": False})


# ---------------------------------------------------------------- services_summary (both playbooks)
def test_services_summary_names_each_service_once_sorted_with_what_happened():
    hostvars = {
        "b-ok": {
            "specpilot_deploy_result": {
                "applied": True,
                "rollout": {"done": True},
                "spec_digest": "0123456789abcdef",
                "previous_digest": "fedcba9876543210",
                "kserve": {"version": "0.20", "note": "declared 0.19"},
            }
        },
        "a-bad": {
            "specpilot_deploy_failed": True,
            "specpilot_deploy_failure_task": "Take the deploy lock",
            "specpilot_deploy_failure_reason": "held by another run",
        },
        "c-same": {
            "specpilot_deploy_result": {"applied": False, "rollout": {"done": False}, "spec_digest": "aa" * 8}
        },
        "d-none": {},
        "e-dry": {
            "specpilot_deploy_result": filters.deploy_result(
                {"applied": True, "rollout": {"done": False}, "spec_digest": "bb" * 8}, {}, check_mode=True
            )
        },
    }
    assert filters.services_summary(["d-none", "b-ok", "c-same", "a-bad", "e-dry"], hostvars, "deploy") == [
        'a-bad: FAILED at "Take the deploy lock": held by another run',
        "b-ok: deployed, ready (digest 0123456789ab, previous fedcba987654, KServe 0.20); note: declared 0.19",
        "c-same: unchanged, not ready (digest aaaaaaaaaaaa)",
        "d-none: not run (unreachable or stopped earlier)",
        # issue 39: a dry run said "deployed, not ready"
        "e-dry: would deploy (check mode: server-side dry run, nothing applied) (digest bbbbbbbbbbbb)",
    ]
    assert hostvars["e-dry"]["specpilot_deploy_result"]["rollout"]["message"] == (
        "check mode: nothing applied, no rollout"
    )


def test_services_summary_of_a_rollback_says_the_mode_and_what_was_removed():
    long_arg = "--speculative-config=" + "x" * 300
    hostvars = {
        "off": {
            "specpilot_rollback_result": {
                "mode": "off",
                "changed": True,
                "check_mode": False,
                "rollout": {"done": True},
                "removed_args": ["--num-lookahead-slots=4"],
            }
        },
        "check": {
            "specpilot_rollback_result": {"mode": "off", "changed": True, "check_mode": True, "rollout": {}}
        },
        "gone": {"specpilot_rollback_result": {"skipped": True}},
        "long": {
            "specpilot_rollback_result": {
                "mode": "restore",
                "changed": False,
                "rollout": {"done": True},
                "removed_args": [long_arg],
            }
        },
    }
    lines = filters.services_summary(["off", "check", "gone", "long"], hostvars, "rollback")
    assert lines[:3] == [
        "check: off, would change (check mode: nothing applied)",
        "gone: skipped (no InferenceService)",
        "long: restore, unchanged, ready, removed " + long_arg[:197] + "...",
    ]
    assert lines[3] == "off: off, rolled back, ready, removed --num-lookahead-slots=4"


def test_services_summary_refuses_an_unknown_operation():
    with pytest.raises(AnsibleFilterError, match="deploy, rollback"):
        filters.services_summary(["a"], {"a": {}}, "benchmark")


def test_the_exported_result_after_a_change_says_how_the_rollout_ended():
    from ansible_collections.specpilot.core.plugins.filter.deploy import deploy_result

    decided = {"name": "svc", "applied": True, "url": "http://old", "rollout": {"done": False}}
    waited = {
        "done": True,
        "elapsed": 42.5,
        "status": {"message": "Deployment gen 3 observed 3, updated 1/1, available 1/1"},
        "inferenceservice": {"status": {"url": "http://svc.ns"}},
    }
    out = deploy_result(decided, waited, {"version": "0.20"}, "0.32.0")
    assert out == dict(
        decided,
        kserve={"version": "0.20"},
        vllm="0.32.0",
        rollout={"done": True, "elapsed": 42.5, "message": waited["status"]["message"]},
        url="http://svc.ns",
    )
    assert decided["rollout"] == {"done": False}  # the input is not changed
    skipped = deploy_result(decided, {"skipped": True, "changed": False})
    assert skipped["rollout"] == {"done": False, "elapsed": 0, "message": "not waited for"}
    assert skipped["url"] == "http://old"

