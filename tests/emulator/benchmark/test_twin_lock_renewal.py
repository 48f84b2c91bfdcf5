"""The benchmark's twin lock is short and renewed while the twin is measured (issue 19), against the API
emulator: the role's measure_side.yml under a twin lock of a few seconds, its load sent from the controller
(specpilot.core.vllm_load's action) to benchmarks/stream_server.py, or run by `vllm bench serve` in a Job
(specpilot.core.k8s_job_wait; the test plays the Job controller and completes the Job once it has seen the
renewals). The Lease's renewTime moves while the load runs; a benchmark killed (SIGKILL of ansible-playbook)
mid-load has its lock released by the worker at once, not left for its duration. The connection the load
renews the lock with is the one playbooks/benchmark.yml gives (module_defaults, KUBECONFIG here)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from deploy_helpers import ROOT, Run, children, create_namespace, get, running, wait_for  # noqa: E402
from test_vllm_bench_job import LOG, MODULE_DEFAULTS, FakeJobController, _jobs, plan_vars  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
import stream_server  # noqa: E402

pytestmark = pytest.mark.slow

TWIN = "svc-baseline"
LEASE = ("coordination.k8s.io/v1", "Lease", "specpilot-deploy-" + TWIN)


def _playbook(tmp: Path, ns: str, url: str, lock_seconds: int, extra: dict) -> Path:
    play = {
        "hosts": "localhost",
        "gather_facts": False,
        "connection": "local",
        "module_defaults": MODULE_DEFAULTS,
        "vars": dict(
            {
                "specpilot_benchmark_qps_levels": [],
                "specpilot_benchmark_concurrency_levels": [1],
                "specpilot_benchmark_runs_per_prompt": 100,
                "specpilot_benchmark_warmup_requests": 0,
                "specpilot_benchmark_max_tokens": 4,
                "specpilot_benchmark_vllm_bench_poll_interval": 0.3,
                "specpilot_benchmark_vllm_bench_api_key_secret": {"name": "bench-token", "key": "token"},
                "specpilot_report_dir": str(tmp / "reports"),
                **plan_vars(ns),
            },
            **extra,
        ),
        "tasks": [
            {
                "name": "Plan the benchmark",
                "ansible.builtin.include_role": {"name": "specpilot_benchmark", "tasks_from": "plan.yml"},
            },
            {
                "name": "Make the report directory (the progress file goes there)",
                "ansible.builtin.file": {
                    "path": "{{ __specpilot_benchmark_dir }}",
                    "state": "directory",
                    "mode": "0755",
                },
            },
            # what twin.yml does before the twin comes up: the lock, and the lock as the waits renew it
            {
                "name": "Take the lock of the twin",
                "specpilot.core.service_lock": {
                    "name": TWIN,
                    "namespace": ns,
                    "purpose": "benchmark",
                    "duration": lock_seconds,
                },
                "register": "__specpilot_benchmark_twin_lock",
            },
            {
                "name": "Remember the lock",
                "ansible.builtin.set_fact": {
                    "__specpilot_benchmark_twin_lock_held": {
                        "holder": "{{ __specpilot_benchmark_twin_lock.holder }}",
                        "resource_version": "{{ __specpilot_benchmark_twin_lock.resource_version }}",
                        "duration": lock_seconds,
                        "name": TWIN,
                        "namespace": ns,
                    }
                },
            },
            {
                "name": "Measure the baseline",
                "ansible.builtin.include_role": {
                    "name": "specpilot_benchmark",
                    "tasks_from": "measure_side.yml",
                },
                "vars": {
                    "__specpilot_benchmark_side": "baseline",
                    "__specpilot_benchmark_side_url": url,
                    "__specpilot_benchmark_side_isvc": TWIN,
                },
            },
            {
                "name": "Save the runs and the lock the waits returned",
                "ansible.builtin.copy": {
                    "content": "{{ {'runs': __specpilot_benchmark_runs, 'locks': __specpilot_benchmark_waits"
                    " | selectattr('lock', 'defined') | map(attribute='lock') | list} | to_json }}",
                    "dest": str(tmp / "out.json"),
                    "mode": "0644",
                },
                "vars": {
                    # the tasks that renewed the lock: every level's load, or the Job's wait
                    "__specpilot_benchmark_waits": "{{ (__specpilot_benchmark_load.results | default([]))"
                    " + [__specpilot_benchmark_vb_wait | default({})] }}"
                },
            },
            {
                "name": "Release the lock of the twin",
                "ansible.builtin.include_role": {
                    "name": "specpilot_benchmark",
                    "tasks_from": "twin_release.yml",
                },
                "vars": {"__specpilot_benchmark_twin_name": TWIN},
            },
        ],
    }
    path = tmp / "play.yml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return path


class LeaseWatch:
    """Records the Lease's (renewTime, leaseDurationSeconds, holderIdentity) while a run goes on."""

    def __init__(self, emu, ns):
        self.emu, self.ns, self.seen, self.done = emu, ns, [], threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        while not self.done.is_set():
            lease = get(self.emu, *LEASE, self.ns)
            if lease and lease.get("spec"):  # service_lock creates it empty, then takes it with a patch
                spec = lease["spec"]
                self.seen.append(
                    (spec.get("renewTime"), spec.get("leaseDurationSeconds"), spec.get("holderIdentity"))
                )
            self.done.wait(0.2)

    def renewals(self):
        return len({renewed for renewed, _d, _h in self.seen}) - 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(5)


@pytest.fixture
def slow_engine(tmp_path):
    """An OpenAI stand-in whose every request takes half a second (its first token)."""
    proc, url = stream_server.start_subprocess(tmp_path, "--ttft-ms", "500")
    yield url
    proc.terminate()
    proc.wait(10)


def _run(emulator, tmp, ns, url, lock_seconds, **extra):
    inv = tmp / "hosts.yml"
    inv.write_text("localhost:\n")
    return Run(emulator, tmp, inv, playbook=str(_playbook(tmp, ns, url, lock_seconds, extra)))


def test_the_twin_lock_is_renewed_while_the_controller_load_runs(emulator, tmp_path, slow_engine):
    """A lock of 6 s over a load of 14 requests of 0.5 s each: renewed at the load's start and every 2 s
    while it runs, its duration unchanged; the load's result returns the renewals; released at the end."""
    ns = "bench-lock"
    create_namespace(emulator, ns)
    with LeaseWatch(emulator, ns) as watch:
        run = _run(emulator, tmp_path, ns, slow_engine, 6, specpilot_benchmark_max_requests=14).wait(300)
    assert run.rc == 0, run.out[-4000:]
    out = json.loads((tmp_path / "out.json").read_text())
    (level,) = out["runs"]
    assert level["summary"]["ok"] == 14 and level["duration_s"] >= 6.5
    assert {d for _t, d, _h in watch.seen} == {6} and len({h for _t, _d, h in watch.seen}) == 1, watch.seen
    # the start, then every 2 s of a 7 s load (three more due; on a loaded machine one may fall past the end)
    assert watch.renewals() >= 3, watch.seen
    (lock,) = out["locks"]
    assert lock["renewals"] >= 3 and lock["holder"] == watch.seen[0][2]
    assert get(emulator, *LEASE, ns) is None


def test_the_twin_lock_is_renewed_while_a_vllm_bench_job_runs(emulator, tmp_path):
    """vllm bench serve in a Job, waited for with k8s_job_wait under a lock of 6 s: the Job is completed only
    once the Lease was renewed twice while it ran."""
    ns = "bench-lock-vb"
    create_namespace(emulator, ns)
    gate = threading.Event()
    ctl = GatedJobController(emulator, ns, LOG, gate)
    ctl.start()
    try:
        with LeaseWatch(emulator, ns) as watch:
            run = _run(
                emulator,
                tmp_path,
                ns,
                "http://svc-baseline-predictor.%s.svc.cluster.local" % ns,
                6,
                specpilot_benchmark_client="vllm_bench",
                specpilot_benchmark_qps_levels=[4],
                specpilot_benchmark_concurrency_levels=[],
            )
            wait_for(lambda: _jobs(emulator, ns), 120, what="the vllm bench serve Job")
            wait_for(lambda: watch.renewals() >= 2, 60, what="two renewals while the Job runs")
            gate.set()
            run.wait(300)
    finally:
        gate.set()
        ctl.stop.set()
        ctl.join(5)
    assert run.rc == 0, run.out[-4000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert len(out["runs"]) == 1 and out["runs"][0]["summary"]["ok"] > 0
    (lock,) = out["locks"]
    assert lock["renewals"] >= 2 and {d for _t, d, _h in watch.seen} == {6}
    assert get(emulator, *LEASE, ns) is None


class GatedJobController(FakeJobController):
    """FakeJobController that completes the Jobs only once ``gate`` is set (the renewals were seen)."""

    def __init__(self, emu, ns, log, gate):
        super().__init__(emu, ns, log)
        self.gate = gate

    def run(self):
        while not self.gate.wait(0.2):
            if self.stop.is_set():
                return
        super().run()


def test_a_benchmark_killed_mid_load_releases_the_twin_lock_at_once(emulator, tmp_path, slow_engine):
    """SIGKILL of ansible-playbook while a long load runs under a lock of 60 s: the worker sending the load
    sees ansible-playbook gone at its next renewal check (every second), releases the lock and stops the
    load - the Lease is gone in seconds, not left to expire."""
    ns = "bench-lock-kill"
    create_namespace(emulator, ns)
    with LeaseWatch(emulator, ns) as watch:
        run = _run(emulator, tmp_path, ns, slow_engine, 60, specpilot_benchmark_max_requests=400)
        try:
            # the load's first renewal (at its start): the worker sending it holds the lock now
            wait_for(lambda: watch.renewals() >= 1, 120, what="the load renewing the lock")
            _kill_and_see_the_lock_released(emulator, ns, run)
        finally:
            for w in children(run.proc.pid):
                os.kill(w, signal.SIGKILL)


def _kill_and_see_the_lock_released(emulator, ns, run):
    wait_for(lambda: children(run.proc.pid), 10, what="the worker sending the load")
    workers = children(run.proc.pid)
    assert get(emulator, *LEASE, ns) is not None
    os.kill(run.proc.pid, signal.SIGKILL)
    run.wait(30)
    wait_for(lambda: get(emulator, *LEASE, ns) is None, 20, what="the twin's lock released by the worker")
    wait_for(lambda: not [w for w in workers if running(w)], 30, what="the worker gone")
