"""playbooks/canary.yml against the lab (API emulator + controller) on the stand-in engine, with
live traffic: benchmarks/stream_server.py is every predictor pod's "vLLM" (it streams, exports
vLLM's latency histograms and, with a speculative config, 3.4 tokens per step and the spec-decode
counters, acceptance 0.8); the load generator (module_utils/benchmark/bench_client.py, a new connection per
request so that the lab's Service proxy spreads them by weight) plays production traffic in a
background thread. One lab for the module: the stable lab-ngram (its plan without the speculative
config) is canaried twice - an impossible acceptance floor aborts at the first step, leaving the
stable predictor untouched; a canary left by an interrupted run is aborted by the next run; then
the healthy canary is promoted through every step, and a re-run changes nothing. Every canary run goes
as the shipped ServiceAccount only (playbooks/rbac.yml; tests/lab/automation.py), and nothing it asks
for is refused.
"""

from __future__ import annotations

import json
import threading

import pytest

from test_benchmark_playbook import ISVC_API, Deployed, as_automation, fake_engine_lab, playbook, wait

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_client
from markdown_cells import unpadded

pytestmark = [pytest.mark.lab, pytest.mark.slow]

# short steps on the stand-in engine: 30 ms decode steps put the baseline's TPOT (30 ms) and the
# canary's (30 x 1.3 / 3.4 = 11 ms) in different buckets of vLLM's TPOT histogram; TTFT is a few ms
# on both sides, where one bucket's width is more than the 10% allowance, so TPOT decides
FAST_CANARY = {
    "specpilot_canary_steps": [50, 100],
    "specpilot_canary_window": 20,
    "specpilot_canary_min_requests": 12,
    "specpilot_canary_max_extensions": 1,
    # a figure judged on its mean holds its step for 10 non-empty scrape intervals an arm: 0.5 s polls (a float, as
    # the role takes it) hold it about 5 s instead of 10 (the promotion test: 59 s -> 47 s)
    "specpilot_canary_poll": 0.5,
    "specpilot_canary_ready_timeout": 120,
    # as the AWX survey gives it: JSON text (a textarea), which the role reads as the mapping it holds
    "specpilot_canary_slo": json.dumps({"ttft_max_regression": 10, "e2e_max_regression": 10}),
    # the stand-in engine writes no vLLM log lines for the smoke role's checks
    "specpilot_canary_smoke": False,
}


class Traffic:
    """Production traffic on the service's address until stopped: bench_client runs of 20 requests
    at 6 requests/s, one after the other, in a background thread."""

    def __init__(self, url: str):
        self.url, self.stop_event, self.errors = url, threading.Event(), []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        cfg = {
            "base_url": self.url,
            "model": "lab-ngram",
            "prompts": [{"id": "p%d" % i, "prompt": "hello %d" % i} for i in range(4)],
            "runs_per_prompt": 5,
            "warmup_requests": 0,
            "qps": 6,
            "concurrency": 4,
            "sampling": {"temperature": 0.0, "max_tokens": 16},
            "scrape_metrics": False,
            "force_close": True,
            "timeout": 60,
            "progress_interval": 0,
        }
        while not self.stop_event.is_set():
            try:
                bench_client.run_one(cfg)
            except Exception as exc:  # the service's address may refuse while nothing is ready
                self.errors.append(repr(exc))
                self.stop_event.wait(0.5)

    def stop(self):
        self.stop_event.set()
        self.thread.join(timeout=90)


class Stable(Deployed):
    """lab-ngram deployed from its plan without the speculative config: the stable predictor."""

    def inferenceservice(self):
        isvc = json.loads(json.dumps(self.plan["inferenceservice"]))
        isvc["spec"]["predictor"]["model"]["args"] = self.plan["args_without_speculative"]
        isvc["metadata"]["annotations"]["specpilot.io/spec-digest"] = "stable"
        isvc["metadata"]["annotations"]["specpilot.io/speculative-method"] = "off"
        return isvc

    def deployments(self):
        items = self.res("apps/v1", "Deployment").get(
            namespace=self.ns, label_selector="serving.kserve.io/inferenceservice=lab-ngram"
        )
        return {d["metadata"]["name"]: d.to_dict() for d in items.items}

    def pods(self):
        items = self.res("v1", "Pod").get(
            namespace=self.ns, label_selector="serving.kserve.io/inferenceservice=lab-ngram"
        )
        return sorted(p["metadata"]["name"] for p in items.items)


def lab_under_traffic(tmp, stable_class):
    """A lab (stand-in engine) with the stable service of ``stable_class`` serving the traffic generator's
    requests; every canary run as the shipped ServiceAccount only (playbooks/rbac.yml)."""
    with fake_engine_lab(tmp, "--step-ms", "30", "--spec-step-cost", "1.3") as emu:
        stable = stable_class(tmp, emu)
        stable.automation = as_automation(tmp, stable)
        traffic = Traffic(stable.isvc()["status"]["url"])
        try:
            yield stable
        finally:
            traffic.stop()


@pytest.fixture(scope="module")
def canary_lab(tmp_path_factory):
    yield from lab_under_traffic(tmp_path_factory.mktemp("canary-lab"), Stable)


def run(lab, tmp_path, **extra):
    reports = tmp_path / "reports"
    proc = playbook(
        tmp_path,
        lab.emu,
        "-e",
        json.dumps(dict(FAST_CANARY, specpilot_canary_report_dir=str(reports), **extra)),
        playbook_file="playbooks/canary.yml",
        automation=lab.automation,
    )
    report = reports / "lab-ngram" / "report.json"
    return proc, (json.loads(report.read_text()) if report.exists() else None)


def test_an_impossible_acceptance_floor_aborts_at_the_first_step_leaving_the_stable_predictor(
    canary_lab, tmp_path
):
    lab = canary_lab
    before = lab.deployments()
    assert list(before) == ["lab-ngram-predictor"]
    rv, pods = before["lab-ngram-predictor"]["metadata"]["resourceVersion"], lab.pods()

    proc, rep = run(lab, tmp_path, specpilot_canary_min_acceptance_rate=1.01)
    assert "lab-ngram: canary ABORTED" in proc.stdout, proc.stdout[-5000:]
    assert rep["outcome"] == "aborted" and [s["traffic_percent"] for s in rep["steps"]] == [50]
    assert rep["policy"] == {"ttft_max_regression": 10, "e2e_max_regression": 10}  # read from its JSON text
    step = rep["steps"][0]
    assert step["decision"] == "abort" and "below the floor 1.01" in step["reasons"][0]
    assert 0.5 < step["arms"]["canary"]["acceptance"]["draft_acceptance_rate"] < 1.01
    assert step["arms"]["baseline"]["acceptance"] is None
    assert step["arms"]["baseline"]["requests"] >= 12 and step["arms"]["canary"]["requests"] >= 12
    # the stable predictor: same Deployment object, same pods; no canary left
    after = lab.deployments()
    assert list(after) == ["lab-ngram-predictor"]
    assert after["lab-ngram-predictor"]["metadata"]["resourceVersion"] == rv
    assert lab.pods() == pods
    isvc = lab.isvc()
    assert "canary" not in isvc["spec"] and not isvc["status"].get("canaryStatuses")
    assert isvc["spec"]["predictor"]["model"]["args"] == lab.plan["args_without_speculative"]
    md = unpadded((tmp_path / "reports" / "lab-ngram" / "report.md").read_text())
    assert "| baseline |" in md and "| canary |" in md and "Step 50% - abort" in md


def test_a_canary_left_by_an_interrupted_run_is_aborted_on_the_next_run(canary_lab, tmp_path):
    lab = canary_lab
    rv, pods = lab.deployments()["lab-ngram-predictor"]["metadata"]["resourceVersion"], lab.pods()
    # what a run killed mid-step leaves: the canary entry, its Deployment serving its share
    model = dict(lab.plan["inferenceservice"]["spec"]["predictor"]["model"], name="kserve-container")
    lab.res(*ISVC_API).patch(
        name="lab-ngram",
        namespace=lab.ns,
        body={"spec": {"canary": [{"trafficPercent": 25, "predictor": {"name": "left", "model": model}}]}},
        content_type="application/merge-patch+json",
    )
    wait(lambda: "lab-ngram-left-predictor" in lab.deployments(), 60, "the left canary's Deployment")
    proc, rep = run(lab, tmp_path)
    assert "lab-ngram: canary ABORTED" in proc.stdout, proc.stdout[-5000:]
    assert "found and aborted (specpilot_canary_on_interrupted: abort)" in rep["steps"][0]["reasons"][0]
    assert list(lab.deployments()) == ["lab-ngram-predictor"] and "canary" not in lab.isvc()["spec"]
    assert (
        lab.deployments()["lab-ngram-predictor"]["metadata"]["resourceVersion"] == rv and lab.pods() == pods
    )


def test_a_healthy_ngram_canary_is_promoted_through_every_step_and_a_rerun_changes_nothing(
    canary_lab, tmp_path
):
    lab = canary_lab
    # the aborted canary of this spec is on record: a plain re-run would change nothing
    proc, rep = run(lab, tmp_path, specpilot_canary_retry=True)
    assert "lab-ngram: canary PROMOTED" in proc.stdout, proc.stdout[-5000:]
    assert [(s["traffic_percent"], s["decision"]) for s in rep["steps"]] == [
        (50, "promote-step"),
        (100, "promote-step"),
    ]
    for step in rep["steps"]:
        base, can = step["arms"]["baseline"]["figures"]["tpot"], step["arms"]["canary"]["figures"]["tpot"]
        assert can["p50_ms"] < base["p50_ms"] and step["ratios"]["tpot"]["ci95"][0] > 1
    # the service carries the speculative config; the canary's Deployment is the only one left
    isvc = lab.isvc()
    name = rep["canary_name"]
    assert isvc["spec"]["predictor"]["name"] == name
    assert isvc["spec"]["predictor"]["model"]["args"] == lab.plan["args"]
    assert "canary" not in isvc["spec"] and not isvc["status"].get("canaryStatuses")
    assert list(lab.deployments()) == ["lab-ngram-%s-predictor" % name]
    assert lab.res("v1", "Service").get(namespace=lab.ns, name="lab-ngram-%s-predictor" % name)
    assert lab.ready()

    again, _ = run(lab, tmp_path / "again")
    assert "already runs the speculative spec" in again.stdout
    assert "The canary turns speculative decoding on from off" in " ".join(again.stdout.split())
    recap = next(line for line in again.stdout.splitlines() if line.startswith("lab-ngram"))
    assert "changed=0" in recap and "failed=0" in recap, recap

    # deploy.yml of the same spec afterwards keeps the promoted predictor where it runs: it reads the
    # named predictor's Deployment ({isvc}-{name}-predictor), restarts nothing, and then has nothing
    # to do (it read {isvc}-predictor before, found no Deployment and waited for a rollout)
    promoted = "lab-ngram-%s-predictor" % name
    rv, pods = lab.deployments()[promoted]["metadata"]["resourceVersion"], lab.pods()
    for attempt in ("deploy-1", "deploy-2"):
        (tmp_path / attempt).mkdir()
        proc = playbook(
            tmp_path / attempt,
            lab.emu,
            "-e",
            json.dumps({"specpilot_deploy_probe": "never", "specpilot_deploy_wait_timeout": 60}),
            playbook_file="playbooks/deploy.yml",
        )
    recap = next(line for line in proc.stdout.splitlines() if line.startswith("lab-ngram"))
    assert "changed=0" in recap and "failed=0" in recap, proc.stdout[-4000:]
    # the second run decided from its one read that the rollout is complete: no lock, no wait
    assert "Wait | Rollout" not in proc.stdout, proc.stdout[-4000:]
    assert list(lab.deployments()) == [promoted]
    assert lab.deployments()[promoted]["metadata"]["resourceVersion"] == rv and lab.pods() == pods
    assert lab.isvc()["spec"]["predictor"]["name"] == name and lab.ready()
    # the module's canary runs went as the shipped ServiceAccount, and it was refused nothing
    assert lab.automation.refused_since_start() == set()
