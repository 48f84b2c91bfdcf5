"""The polling loop of specpilot.core.rollout_wait, with a scripted cluster and a fake clock."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.action import rollout_wait
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import ReadError
from deploy_unit_helpers import applied, deployment, plan, pod, ready_status

PARAMS = {
    "delay": 5.0,
    "fail_fast_restarts": 2,
    "pending_grace": 300,
    "image_grace": 300,
    "progress_interval": 30,
    "baseline": {},
}


class Clock:
    def __init__(self):
        self.now = 1_800_000_000.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class ScriptedReader:
    """Answers get() from a list of (isvc, deployment, pods) states, one per poll."""

    def __init__(self, states):
        self.states = list(states)
        self.poll = -1

    def get(self, kind, api_version, name=None, namespace=None, label_selector=None):
        if kind == "InferenceService":
            self.poll = min(self.poll + 1, len(self.states) - 1)
        state = self.states[self.poll]
        if isinstance(state, Exception):
            raise state
        isvc, dep, pods = state
        return {"InferenceService": isvc, "Deployment": dep, "Pod": pods}[kind]


def _states():
    old, new = (
        plan(),
        plan(speculative={"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}),
    )
    old_isvc = applied(old["inferenceservice"], extra_status=ready_status())
    new_isvc = applied(new["inferenceservice"], extra_status=ready_status())
    stale = (new_isvc, deployment(old_isvc), [pod(old_isvc)])
    rolling = (
        new_isvc,
        deployment(new_isvc, generation=2, observed=1, updated=0, available=0),
        [pod(old_isvc), pod(new_isvc, name="svc-predictor-new-1", ready=False)],
    )
    done = (
        new_isvc,
        deployment(new_isvc, generation=2, observed=2),
        [pod(new_isvc, name="svc-predictor-new-1")],
    )
    return new, stale, rolling, done


def test_waits_through_a_stale_ready_and_reports_progress():
    new, stale, rolling, done = _states()
    clock, lines = Clock(), []
    out = rollout_wait.wait(
        ScriptedReader([stale, stale, rolling, rolling, done]),
        new,
        PARAMS,
        600,
        lines.append,
        clock=clock,
        sleep=clock.sleep,
    )
    assert out["done"] and not out["timed_out"] and out["polls"] == 5
    assert out["elapsed"] == 20.0
    assert any("previous pod template" in line for line in lines)
    assert any("(new)" in line for line in lines)
    assert lines[-1].startswith("ready after 20s")
    # a line per change, not per poll
    assert len([line for line in lines if line.startswith("progressing")]) == 2


def test_times_out_with_what_it_waited_for():
    new, stale, _rolling, _done = _states()
    clock, lines = Clock(), []
    out = rollout_wait.wait(
        ScriptedReader([stale]), new, PARAMS, 60, lines.append, clock=clock, sleep=clock.sleep
    )
    assert out["timed_out"] and not out["done"]
    assert out["status"]["phase"] == "timeout"
    assert "previous pod template" in out["status"]["message"]
    assert any("[30s/60s]" in line for line in lines)  # still printed when nothing changes


def test_stops_at_a_crash_loop_and_survives_read_errors():
    new, _stale, rolling, _done = _states()
    isvc, dep, pods = rolling
    crashing = (
        isvc,
        dep,
        [
            pod(
                isvc,
                name="svc-predictor-new-1",
                ready=False,
                restarts=2,
                state={"waiting": {"reason": "CrashLoopBackOff"}},
                last={"exitCode": 1, "reason": "Error"},
            )
        ],
    )
    clock, lines = Clock(), []
    reader = ScriptedReader([ReadError("500"), rolling, crashing])
    out = rollout_wait.wait(reader, new, PARAMS, 600, lines.append, clock=clock, sleep=clock.sleep)
    assert not out["done"] and not out["timed_out"]
    assert out["status"]["cause"] == "crashloop"
    assert out["pods"] == crashing[2]
