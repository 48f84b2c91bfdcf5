"""What a canary run does with the live service, and how long it holds the lock (module_utils/operate/canary.py
todo and lock_seconds, the canary role's prepare step through its filters)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.filter.canary import (
    canary_images,
    canary_lock_seconds,
    canary_ready_seconds,
    canary_todo,
)
from ansible_collections.specpilot.core.plugins.filter.deploy import predictor_deployment

PLAN = {"name": "svc", "args": ["--model=/mnt/models", "--speculative-config={}"], "spec_digest": "d1"}
STABLE = {"spec": {"predictor": {"model": {"args": ["--model=/mnt/models"]}}}}


def isvc(args=None, canary=None, name=None):
    predictor = {"model": {"args": args or STABLE["spec"]["predictor"]["model"]["args"]}}
    if name:
        predictor["name"] = name
    return {"spec": dict({"predictor": predictor}, **({"canary": canary} if canary else {}))}


def test_a_canary_entry_left_is_an_interrupted_run_whatever_else_holds():
    left = isvc(PLAN["args"], canary=[{"trafficPercent": 25}])
    assert canary_todo(left, PLAN, {"digest": "d1"}) == "interrupted"


def test_this_specs_own_canary_left_in_place_is_resumed_when_asked_and_another_is_aborted():
    mine = isvc(canary=[{"trafficPercent": 25, "predictor": {"name": "sd1"}}])
    assert canary_todo(mine, PLAN, {}, False, "sd1") == "resume"
    assert canary_todo(mine, PLAN, {}, False, "") == "interrupted"  # on_interrupted abort: no name given
    other = isvc(canary=[{"trafficPercent": 25, "predictor": {"name": "s0ther"}}])
    assert canary_todo(other, PLAN, {}, False, "sd1") == "interrupted"  # another spec's canary


def test_promoted_recorded_or_run():
    assert canary_todo(isvc(PLAN["args"]), PLAN, {}) == "promoted"
    assert canary_todo(isvc(), PLAN, {"digest": "d1"}) == "recorded"  # this spec's canary ended before
    assert canary_todo(isvc(), PLAN, {"digest": "d1"}, True) == "run"  # specpilot_canary_retry
    assert canary_todo(isvc(), PLAN, {"digest": "d0"}) == "run"  # another spec's record
    assert canary_todo(isvc(), PLAN, None) == "run"
    with pytest.raises(AnsibleFilterError):
        canary_todo(None, PLAN)


def test_the_lock_outlasts_the_waits_that_do_not_renew_it():
    """Renewed at each step, while a step is held and while the promotion rolls out: it must outlast a
    readiness wait and, when a run fails there, the abort's wait - twice the ready timeout and 300 s by
    default, whatever the number of steps and the window (the lock no longer covers the whole canary)."""
    assert canary_lock_seconds(300) == 900 and canary_lock_seconds("120", 0) == 540
    assert canary_lock_seconds(300, 301) == 301 and canary_lock_seconds(8, "9") == 9
    with pytest.raises(AnsibleFilterError, match="a lock of 300 s would expire while the run waits 300 s"):
        canary_lock_seconds(300, 300)
    for bad in ("a while", 0, -5):
        with pytest.raises(AnsibleFilterError):
            canary_lock_seconds(bad)


def test_the_stable_predictors_deployment_keeps_a_promoted_name():
    assert predictor_deployment(isvc(), "svc") == "svc-predictor"
    assert predictor_deployment(isvc(name="s1a2"), "svc") == "svc-s1a2-predictor"


def test_the_summary_says_where_the_traffic_is():
    from ansible_collections.specpilot.core.plugins.filter.canary import canary_summary

    step = {"traffic_percent": 50, "reasons": ["acceptance 0.62 below the floor 1.01", "more"]}
    assert canary_summary("promoted", step) == "the speculative predictor serves all the traffic"
    assert canary_summary("aborted", step) == (
        "at step 50%: acceptance 0.62 below the floor 1.01; the stable predictor serves all the traffic, untouched"
    )
    assert canary_summary("inconclusive", {}) == (
        "at step ?%: the run failed before a decision; the stable predictor serves all the traffic, untouched"
    )
    # a failed promotion has replaced the stable predictor: it must not be called untouched
    failed = canary_summary("promotion-failed", {"traffic_percent": 100, "reasons": ["TPOT 2.1x"]})
    assert "untouched" not in failed and "rollout did not complete" in failed


def test_the_ready_timeout_defaults_from_the_spec_s_startup_timeout():
    """Issue 39 item 3: 0 (the default) waits as deploy does, the plan's startup timeout + 300 s (a lab engine
    took 280-316 s to start, past the old 300 s); a value given is kept; the lock outlasts the wait."""
    assert canary_ready_seconds(0, {"startup_timeout_seconds": 900}) == 1200
    assert canary_ready_seconds("0", {"startup_timeout_seconds": 1800}) == 2100
    assert canary_ready_seconds(0, {}) == 1200  # the schema's default startup timeout, 900
    assert canary_ready_seconds(120, {"startup_timeout_seconds": 900}) == 120
    assert canary_lock_seconds(canary_ready_seconds(0, {"startup_timeout_seconds": 900})) == 2700
    with pytest.raises(AnsibleFilterError, match="0 .* or more"):
        canary_ready_seconds(-1, {"startup_timeout_seconds": 900})


RUNTIME = {"spec": {"containers": [{"name": "kserve-container", "image": "vllm/vllm-openai:v0.31.0"}]}}
UPGRADE = dict(PLAN, vllm_version="0.32.0", inferenceservice={"spec": {"predictor": {"model": {}}}},
               servingruntime={"spec": {"containers": [{"name": "kserve-container", "image": "vllm/vllm-openai:v0.32.0"}]}})


def _upgrading(image=None):
    live = isvc(PLAN["args"])
    live["metadata"] = {"annotations": {"specpilot.io/vllm-version": "0.31.0"}}
    live["spec"]["predictor"]["model"]["runtime"] = "svc-vllm"
    if image:
        live["spec"]["predictor"]["model"]["image"] = image
    return live


def test_a_spec_that_changes_only_the_runtime_image_is_a_change_to_canary():
    """issue 38: the same args on a new vLLM image - the live service is the stable arm, the spec the canary (it was
    'promoted' when only the args were compared); once the predictor names the new image, it runs the plan."""
    assert canary_todo(_upgrading(), UPGRADE, {}, False, "", RUNTIME) == "run"
    assert canary_todo(_upgrading("vllm/vllm-openai:v0.32.0"), UPGRADE, {}, False, "", RUNTIME) == "promoted"
    # the release annotation alone is a name: the same image runs the same release
    assert canary_todo(_upgrading(), dict(PLAN, vllm_version="0.32.0"), {}, False, "", RUNTIME) == "promoted"


def test_the_report_says_which_image_each_arm_ran_and_never_claims_an_upgrade_that_did_not_run():
    arms = canary_images(_upgrading(), UPGRADE, RUNTIME)
    assert arms["changed"] and (arms["stable"], arms["canary"]) == ("vllm/vllm-openai:v0.31.0", "vllm/vllm-openai:v0.32.0")
    assert arms["text"].startswith("The canary arm runs another runtime image, vllm/vllm-openai:v0.32.0 (the stable "
                                   "arm: vllm/vllm-openai:v0.31.0)")
    assert "vLLM release: stable 0.31.0 (recorded on the live service), canary 0.32.0 (the spec's" in arms["text"]
    # the lab's case: another tag of the one release it runs - said to be no vLLM upgrade
    lab = canary_images(_upgrading(), dict(UPGRADE, vllm_version="0.31.0"), RUNTIME)
    assert "Both arms are recorded as vLLM 0.31.0: this canary compared two images of one release, not a vLLM " \
           "upgrade." in lab["text"]
    same = canary_images(_upgrading(), PLAN, RUNTIME)  # the plan names no image: nothing to compare
    assert not same["changed"] and same["text"] == ""
    from ansible_collections.specpilot.core.plugins.module_utils.operate import canary

    report = {"namespace": "ns", "service": "svc", "outcome": "aborted", "summary": "s", "canary_name": "c",
              "speculative_config": "{}", "steps_planned": [50, 100], "window_s": 60, "min_requests": 20,
              "min_acceptance": 0.5, "steps": [], "images": lab}
    assert "\n" + lab["text"] + "\n" in canary.report_markdown(report)
