"""The canary's Knative mode (module_utils/operate/canary.py, through the role's filters): the split read from
status.components.predictor as KServe writes it, the step's and the abort's waits, the arms' pods by revision,
what an interrupted Knative canary is, the abort's write, and which clusters can run it."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.filter.canary import (
    canary_arm_selectors,
    canary_knative_abort_patch,
    canary_knative_restored_problem,
    canary_knative_split,
    canary_knative_step_problem,
    canary_left,
    canary_stable,
    canary_support_problem,
    canary_todo,
)
from ansible_collections.specpilot.core.plugins.module_utils.operate import canary

R1, R2, R3 = "svc-predictor-00001", "svc-predictor-00002", "svc-predictor-00003"
PLAN = {"name": "svc", "args": ["--model=/mnt/models", "--speculative-config={}"], "spec_digest": "d1"}


def isvc(created, ready, traffic, rolled=R1, ready_cond="True"):
    """An InferenceService in Knative mode as KServe writes its status (traffic: (revision, percent, latest, tag))."""
    return {
        "spec": {"predictor": {"model": {"args": ["--model=/mnt/models"]}}},
        "status": {
            "conditions": [{"type": "Ready", "status": ready_cond}],
            "components": {
                "predictor": {
                    "latestCreatedRevision": created,
                    "latestReadyRevision": ready,
                    "latestRolledoutRevision": rolled,
                    "traffic": [
                        dict(
                            {"revisionName": r, "percent": p, "latestRevision": latest},
                            **({"tag": tag} if tag else {}),
                        )
                        for r, p, latest, tag in traffic
                    ],
                }
            },
        },
    }


def test_the_split_names_the_latest_revision_the_canary_and_the_prev_target_the_stable_one():
    split = canary_knative_split(isvc(R2, R2, [(R2, 25, True, "latest"), (R1, 75, False, "prev")]))
    assert split["canary"] == {"revision": R2, "percent": 25}
    assert split["baseline"] == {"revision": R1, "percent": 75}
    assert (split["latest_created"], split["latest_ready"], split["rolled_out"], split["ready"]) == (
        R2,
        R2,
        R1,
        True,
    )
    # without tag routing the latest target has no tag; the prev one always has
    assert (
        canary_knative_split(isvc(R2, R2, [(R2, 25, True, None), (R1, 75, False, "prev")]))["baseline"][
            "revision"
        ]
        == R1
    )
    promoted = canary_knative_split(isvc(R2, R2, [(R2, 100, True, None)], rolled=R2))
    assert promoted["baseline"] is None and promoted["canary"]["percent"] == 100
    assert canary_knative_split({})["canary"] == {"revision": None, "percent": 0}


def test_a_step_waits_for_the_new_revision_ready_with_its_share_and_the_stable_one_with_the_rest():
    ok = isvc(R2, R2, [(R2, 50, True, None), (R1, 50, False, "prev")])
    assert canary_knative_step_problem(ok, 50, R1) == ""
    # right after the write: the status still shows the stable revision alone
    assert "not made a revision" in canary_knative_step_problem(isvc(R1, R1, [(R1, 100, True, None)]), 50, R1)
    # the new revision is not ready: Knative sends its share to the latest *ready* revision, the stable one
    pending = isvc(R2, R1, [(R1, 50, True, None), (R1, 50, False, "prev")])
    assert "not ready" in canary_knative_step_problem(pending, 50, R1)
    # the previous step's share
    assert "has 25% of the traffic, not 50%" in canary_knative_step_problem(
        isvc(R2, R2, [(R2, 25, True, None), (R1, 75, False, "prev")]), 50, R1
    )
    # at 100% there is no prev target
    assert canary_knative_step_problem(isvc(R2, R2, [(R2, 100, True, None)], rolled=R2), 100, R1) == ""
    # a resumed run does not know the stable revision: the split itself decides
    assert canary_knative_step_problem(ok, 50) == ""


def test_the_abort_waits_for_a_newer_revision_of_the_restored_spec_ready():
    # canaryTrafficPercent 0: the stable revision takes all; the restored spec's revision 3 is not made yet
    pinned = isvc(R2, R2, [(R2, 0, True, None), (R1, 100, False, "prev")])
    assert "not made a revision" in canary_knative_restored_problem(pinned, R2, True)
    assert "not ready" in canary_knative_restored_problem(
        isvc(R3, R2, [(R2, 0, True, None), (R1, 100, False, "prev")]), R2, True
    )
    assert (
        canary_knative_restored_problem(
            isvc(R3, R3, [(R3, 0, True, None), (R1, 100, False, "prev")]), R2, True
        )
        == ""
    )
    # a write that made no revision (nothing but canaryTrafficPercent changed): the newest ready one is enough
    assert canary_knative_restored_problem(pinned, R2, "False") == ""


def test_the_arms_pods_are_selected_by_revision_in_knative_mode_and_by_deployment_in_standard():
    assert canary_arm_selectors("Knative", R1, R2) == {
        "baseline": "serving.knative.dev/revision=" + R1,
        "canary": "serving.knative.dev/revision=" + R2,
    }
    assert canary_arm_selectors("Standard", "svc-predictor", "svc-s1-predictor") == {
        "baseline": "app=isvc.svc-predictor",
        "canary": "app=isvc.svc-s1-predictor",
    }


def test_canary_traffic_percent_left_on_the_predictor_is_an_interrupted_knative_canary():
    live = {"spec": {"predictor": {"canaryTrafficPercent": 25, "model": {"args": PLAN["args"]}}}}
    assert canary_left(live) == {"name": None, "percent": 25}
    assert canary_todo(live, PLAN, {}, False, "sd1") == "resume"  # this spec's arguments: its own canary
    assert canary_todo(live, PLAN, {}, False, "") == "interrupted"
    other = {"spec": {"predictor": {"canaryTrafficPercent": 0, "model": {"args": ["--other"]}}}}
    assert canary_left(other) == {"name": None, "percent": 0}
    assert canary_todo(other, PLAN, {}, False, "sd1") == "interrupted"
    # promoted: the plan's arguments, no canaryTrafficPercent
    assert canary_todo({"spec": {"predictor": {"model": {"args": PLAN["args"]}}}}, PLAN, {}) == "promoted"
    assert canary_left({"spec": {"canary": [{"trafficPercent": 10, "predictor": {"name": "s1"}}]}}) == {
        "name": "s1",
        "percent": 10,
    }
    assert canary_left({"spec": {"predictor": {}}}) is None


def test_the_abort_pins_the_traffic_and_writes_the_stable_spec_back():
    before = {
        "metadata": {
            "labels": {"a": "1"},
            "annotations": {"specpilot.io/spec-digest": "stable", "keep": "x"},
        },
        "spec": {
            "predictor": {"minReplicas": 1, "model": {"args": ["--model=/mnt/models"], "runtime": "vllm"}}
        },
    }
    stable = canary_stable(before)
    assert stable["predictor"] == before["spec"]["predictor"] and stable["annotations"]["keep"] == "x"
    live = {
        "metadata": {
            "labels": {"a": "1", "new": "y"},
            "annotations": {
                "specpilot.io/spec-digest": "d1",
                "keep": "x",
                "specpilot.io/speculative-method": "ngram",
            },
        },
        "spec": {
            "predictor": {
                "minReplicas": 1,
                "canaryTrafficPercent": 50,
                "model": {"args": PLAN["args"], "runtime": "vllm", "env": [{"name": "X", "value": "1"}]},
            }
        },
    }
    patch = canary_knative_abort_patch(live, stable)
    assert patch == {
        "metadata": {
            "labels": {"new": None},
            "annotations": {"specpilot.io/spec-digest": "stable", "specpilot.io/speculative-method": None},
        },
        "spec": {
            "predictor": {"canaryTrafficPercent": 0, "model": {"args": ["--model=/mnt/models"], "env": None}}
        },
    }
    # RFC 7386: nothing to write when nothing differs; lists are replaced whole
    assert canary.merge_patch({"a": [1, 2], "b": {"c": 1}}, {"a": [1, 2], "b": {"c": 1}}) == {}
    assert canary.merge_patch({"a": [1, 2]}, {"a": [2]}) == {"a": [2]}
    with pytest.raises(AnsibleFilterError, match="stable spec on record"):
        canary_knative_abort_patch(live, None)


def test_knative_mode_needs_a_known_kserve_with_the_rollout_fixes():
    assert canary_support_problem("0.15.0", "Knative") == ""
    assert "KServe 0.8.0" in canary_support_problem("0.8.0", "Knative")
    assert "version is unknown" in canary_support_problem("", "Knative")
    # older Standard clusters are still refused: no split
    assert "has no traffic split" in canary_support_problem("0.15.0", "Standard")
    assert canary_support_problem("0.20.0", "Standard") == ""
