"""The benchmark's twin lock renewed while the load runs: bench_client.run_many's ``keep`` loop (a fake
clock, the lock client scripted), bench_load.run's checks of ``lock``, and a real load against
benchmarks/stream_server.py that a lost lock stops."""

from __future__ import annotations

import asyncio
import time

import pytest
from bench_helpers import StreamServer

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_client as bc
from ansible_collections.specpilot.core.plugins.filter.benchmark import benchmark_twin_lock_seconds
from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_load
from ansible_collections.specpilot.core.plugins.plugin_utils import lease_client

LOCK = {"holder": "me", "resource_version": "10", "duration": 30}


class LeaseScript:
    """A lock client whose renewals succeed (a new resourceVersion each) until ``lose_at``."""

    def __init__(self, lose_at=None):
        self.calls, self.released, self.lose_at = [], [], lose_at

    def renew(self, holder, version):
        self.calls.append((holder, version))
        if self.lose_at is not None and len(self.calls) >= self.lose_at:
            return {
                "failed": True,
                "msg": "svc-base: the lock could not be renewed - it is no longer this run's",
            }
        return {"renewed": True, "resource_version": str(int(version) + 1)}

    def release(self, holder, version):
        self.released.append((holder, version))
        return {"released": True}


class FakeClock:
    """5 s more at every reading: each call of keep sees the load 5 s further on."""

    def __init__(self):
        self.now = -5.0

    def __call__(self):
        self.now += 5.0
        return self.now


def _load(keep, calls_wanted, clock):
    """A stand-in load that runs until keep was called ``calls_wanted`` times (or is cancelled); returns
    what it saw: whether it finished or was cancelled."""
    seen = {"finished": False, "cancelled": False}

    async def work():
        try:
            while len(keep.nows) < calls_wanted:
                await asyncio.sleep(0.002)
            seen["finished"] = True
            return "measured"
        except asyncio.CancelledError:
            seen["cancelled"] = True
            raise

    async def main():
        return await bc._kept(work(), keep, every=0.005, clock=clock)

    return asyncio.run(main()), seen


class Keep:
    """The Renewer, recording the times it was called with."""

    def __init__(self, renewer):
        self.renewer, self.nows = renewer, []

    def __call__(self, now):
        self.nows.append(now)
        return self.renewer(now)


def _keep(client, **kw):
    clock = FakeClock()
    return Keep(lease_client.Renewer(client, LOCK, clock=clock, **kw)), clock


def test_the_lock_is_renewed_at_the_start_and_every_third_of_its_duration_while_the_load_runs():
    client = LeaseScript()
    keep, clock = _keep(client, renew_first=True)
    out, seen = _load(keep, 7, clock)
    assert out == "measured" and seen["finished"]
    assert keep.nows[:7] == [0, 5, 10, 15, 20, 25, 30]
    # at once (renew_first: an earlier task renewed it last), then every 10 s, each at the version it last got
    assert [v for _h, v in client.calls][:4] == ["10", "11", "12", "13"]
    assert keep.renewer.state()["renewals"] >= 4


def test_without_renew_first_the_first_renewal_waits_a_third_of_the_duration():
    client = LeaseScript()
    keep, clock = _keep(client)  # the Renewer's clock read 0 when it was made: just taken
    _load(keep, 3, clock)
    assert keep.nows[:3] == [5, 10, 15]
    # not at 5 s: at 10 s, 20 s, ... (10 s after the Renewer was made)
    assert len(client.calls) == len([n for n in keep.nows if n % 10 == 0]) and client.calls[0] == ("me", "10")


def test_a_lost_lock_stops_the_load_and_cancels_it():
    client = LeaseScript(lose_at=2)
    keep, clock = _keep(client, renew_first=True)
    with pytest.raises(bc.LoadStopped, match="no longer this run's"):
        _load(keep, 1000, clock)
    assert len(client.calls) == 2 and keep.nows[-1] == 10  # the second renewal, 10 s in


def test_a_worker_whose_ansible_playbook_died_releases_the_lock_and_stops_the_load():
    parents = iter([100, 100, 100, 1, 1])
    client = LeaseScript()
    keep, clock = _keep(client, renew_first=True, parent=lambda: next(parents))
    with pytest.raises(bc.LoadStopped, match=r"ansible-playbook \(pid 100\) is gone; the lock was released"):
        _load(keep, 1000, clock)
    assert client.released == [("me", "11")]  # released at the version its first renewal got


# ------------------------------------------------------------------ how long the lock lasts


def test_the_twin_lock_outlasts_the_wait_nothing_renews_and_a_shorter_one_is_refused_naming_the_variable():
    # the twin's removal (300 s) and one API timeout, then 5 minutes to spare
    assert benchmark_twin_lock_seconds(120) == 720 and benchmark_twin_lock_seconds("30", 0) == 630
    assert benchmark_twin_lock_seconds(120, 421) == 421 and benchmark_twin_lock_seconds(1, "302") == 302
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError) as refused:
        benchmark_twin_lock_seconds(120, 420)
    assert (
        "specpilot_benchmark_twin_lock_seconds: a lock of 420 s would expire while the run waits up to 420 s"
        in str(refused.value)
        and "give more than 420 s (or 0, the default: 720 s)" in str(refused.value)
    )
    for bad in (0, -5, "x"):
        with pytest.raises(AnsibleFilterError, match="specpilot_benchmark_api_timeout must be a .*, not"):
            benchmark_twin_lock_seconds(bad)
    with pytest.raises(
        AnsibleFilterError, match="specpilot_benchmark_twin_lock_seconds must be a whole number"
    ):
        benchmark_twin_lock_seconds(120, "ten minutes")


# ------------------------------------------------------------------ bench_load.run's checks


def _params(**kw):
    p = {k: spec.get("default") for k, spec in bench_load.ARGS.items()}
    p.update(url="http://127.0.0.1:9", prompts=["a"], lock=dict(LOCK, name="svc-base", namespace="ml"))
    p.update(kw)
    return p


def test_a_lock_needs_the_action_a_url_and_a_service_name():
    with pytest.raises(bench_load.LoadFailure, match="renewed by the action plugin"):
        bench_load.run(_params())
    keep = lambda now: None  # noqa: E731
    with pytest.raises(bench_load.LoadFailure, match="lock.name and lock.namespace"):
        bench_load.run(_params(lock=dict(LOCK, name=None, namespace=None)), keep=keep)
    with pytest.raises(bench_load.LoadFailure, match="only a load sent from here"):
        bench_load.run(_params(url=None, job_output="x"), keep=keep)
    with pytest.raises(
        bench_load.LoadFailure, match="lock_connection: unknown key.s. token; it takes kubeconfig"
    ):
        bench_load.run(_params(lock_connection={"token": "x"}), keep=keep)


@pytest.fixture
def slow_server(tmp_path):
    s = StreamServer(tmp_path, "--step-ms", "40", "--ttft-ms", "5")
    yield s
    s.close()


def _config(url):
    return {
        "base_url": url,
        "prompts": ["one", "two"],
        "runs_per_prompt": 4,
        "warmup_requests": 1,
        "concurrency": 1,
        "sampling": {"temperature": 0, "max_tokens": 12},
        "progress_interval": 0,
    }


def test_a_real_load_calls_keep_while_it_runs_and_stops_when_the_lock_is_lost(slow_server):
    nows = []

    def keep(now):
        nows.append(now)
        return None

    (res,) = bc.run_many([_config(slow_server.url)], keep=keep, keep_every=0.05)
    assert len(res["requests"]) == 8 and all(r["ok"] for r in res["requests"])
    assert len(nows) >= 3 and nows == sorted(nows)  # at the start, then every 50 ms of the load

    def lose(now):
        nows.append(now)
        return (
            "svc-base: the lock could not be renewed - it is no longer this run's" if len(nows) > 2 else None
        )

    nows.clear()
    t0 = time.monotonic()
    p = _params(
        url=slow_server.url, prompts=["one", "two"], runs_per_prompt=50, warmup_requests=0, max_tokens=12
    )
    with pytest.raises(bench_load.LoadFailure) as failure:
        bench_load.run(p, keep=lose)
    assert time.monotonic() - t0 < res["duration_s"] * 5  # stopped early: 100 requests would take 12x longer
    assert failure.value.msg.startswith("stopped the load, its lock: svc-base: the lock could not be renewed")
    assert failure.value.fields == {"stopped": True}
