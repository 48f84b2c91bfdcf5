"""The polling loop of specpilot.core.rollout_wait, with a scripted cluster and a fake clock."""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.action import rollout_wait
from ansible_collections.specpilot.core.plugins.plugin_utils import lease_client
from ansible_collections.specpilot.core.plugins.plugin_utils.k8s_reader import ReadError
from deploy_unit_helpers import applied, deployment, plan, pod, ready_status
from fake_clock import Clock

PARAMS = {
    "delay": 5.0,
    "fail_fast_restarts": 2,
    "pending_grace": 300,
    "image_grace": 300,
    "progress_interval": 30,
    "baseline": {},
}


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
    clock, lines = Clock(1_800_000_000.0), []
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
    assert out["elapsed"] == 0.5 + 1 + 2 + 4  # the pauses double from 0.5 s, up to the delay (5 s)
    assert any("previous pod template" in line for line in lines)
    assert any("(new)" in line for line in lines)
    assert lines[-1].startswith("ready after 7s")
    # a line per change, not per poll
    assert len([line for line in lines if line.startswith("progressing")]) == 2


def test_the_pauses_double_from_half_a_second_up_to_the_delay():
    assert [rollout_wait.pause(n, 5) for n in range(1, 7)] == [0.5, 1, 2, 4, 5, 5]
    assert [rollout_wait.pause(n, 1) for n in range(1, 4)] == [0.5, 1, 1]


def test_times_out_with_what_it_waited_for():
    new, stale, _rolling, _done = _states()
    clock, lines = Clock(1_800_000_000.0), []
    out = rollout_wait.wait(
        ScriptedReader([stale]), new, PARAMS, 60, lines.append, clock=clock, sleep=clock.sleep
    )
    assert out["timed_out"] and not out["done"]
    assert out["status"]["phase"] == "timeout"
    assert "previous pod template" in out["status"]["message"]
    # still printed when nothing changes: the poll at 32.5 s, the first 30 s after the first line
    assert any("[32s/60s]" in line for line in lines)


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
    clock, lines = Clock(1_800_000_000.0), []
    reader = ScriptedReader([ReadError("500"), rolling, crashing])
    out = rollout_wait.wait(reader, new, PARAMS, 600, lines.append, clock=clock, sleep=clock.sleep)
    assert not out["done"] and not out["timed_out"]
    assert out["status"]["cause"] == "crashloop"
    assert out["pods"] == crashing[2]


class LeaseScript:
    """A lock client whose renewals succeed (a new resourceVersion each) until ``lose_at``."""

    def __init__(self, lose_at=None):
        self.calls, self.lose_at = [], lose_at

    def renew(self, holder, version):
        self.calls.append((holder, version))
        if self.lose_at is not None and len(self.calls) >= self.lose_at:
            return {"failed": True, "msg": "svc: the lock could not be renewed - it is no longer this run's"}
        return {"renewed": True, "resource_version": str(int(version) + 1)}


LOCK = {"holder": "me", "resource_version": "10", "duration": 30}


def _wait_renewing(states, client, lines=None, **renewer_kw):
    """The wait over ``states`` with a fake clock, renewing the lock through ``client``."""
    new = _states()[0]
    clock = Clock(1_800_000_000.0)
    renewer = lease_client.Renewer(client, LOCK, clock=clock, **renewer_kw)
    out = rollout_wait.wait(
        ScriptedReader(states),
        new,
        PARAMS,
        600,
        (lines if lines is not None else []).append,
        clock=clock,
        sleep=clock.sleep,
        keep=renewer,
    )
    return out, renewer


def test_the_lock_is_renewed_every_third_of_its_duration_while_it_waits():
    _new, stale, rolling, done = _states()
    client = LeaseScript()
    # polls at 0, 0.5, 1.5, 3.5, 7.5, then every 5 s up to 57.5 s (done): a renewal once 10 s passed
    # since the last (at 12.5, 22.5, 32.5, 42.5 and 52.5 s)
    out, renewer = _wait_renewing([stale] * 6 + [rolling] * 8 + [done], client)
    assert out["done"]
    assert [v for _, v in client.calls] == ["10", "11", "12", "13", "14"]  # each at the version it last got
    assert renewer.state() == {"holder": "me", "resource_version": "15", "renewals": 5}


def test_a_lost_lock_stops_the_wait_with_cause_lock():
    _new, stale, _rolling, done = _states()
    lines = []
    out, _renewer = _wait_renewing([stale] * 20 + [done], LeaseScript(lose_at=2), lines)
    assert not out["done"] and not out["timed_out"]
    assert out["status"]["cause"] == "lock" and "no longer this run's" in out["status"]["message"]
    assert out["elapsed"] == 22.5  # the second renewal (the poll at 22.5 s): the wait stopped there
    assert lines[-1] == out["status"]["message"]


def test_a_worker_whose_ansible_playbook_died_releases_the_lock_and_stops():
    """SIGKILL of ansible-playbook leaves its worker running the wait, re-parented: it must not keep
    renewing a lock for a run that no longer exists."""
    _new, stale, _rolling, done = _states()
    parents, released = iter([100, 100, 100, 1]), []
    client = LeaseScript()
    client.release = lambda holder, version: released.append((holder, version)) or {"released": True}
    out, _renewer = _wait_renewing([stale] * 20 + [done], client, parent=lambda: next(parents))
    message = out["status"]["message"]
    assert out["status"]["cause"] == "lock" and "ansible-playbook (pid 100) is gone" in message
    assert "the lock was released" in message and released == [("me", "10")]
    assert out["polls"] == 3 and client.calls == []  # stopped at the poll that saw it, before any renewal
