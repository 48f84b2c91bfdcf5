"""The fault matrix (issue 19): deploy, rollback, the guard (auto-rollback through the rollback role) and
the canary against the API emulator injecting about 20% faults in the service's namespace - 500s, 409s,
429s with Retry-After, and delays - with fixed seeds.  Each run either converges or fails cleanly (a
summary, no traceback) with the service whole: the previous spec, or the new one complete, never a mix
of the two (for the canary: no canary entry left behind, unless the run says so).  Then a clean run
converges.  The test plays KServe (deploy's FakeKServe; for the canary canary_kserve.CanaryKServe, with
spec.canary and each pod's /metrics).

Then the canary under one fault at a time, each injected by the fake KServe at the moment it matters
(before it rolls out the step or the promotion that the playbook waits for), one shared stable service
copied into each test's namespace: transient faults of every kind are retried and the canary promoted;
an abort whose write keeps failing says that the canary is still in place, releases the lock, and the
next run removes it; a read that keeps failing after the promotion was written says so, and never
tries to abort a promoted service."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "deploy"))
sys.path.insert(0, str(HERE.parents[0] / "unit" / "monitoring"))
import guard_support as gs  # noqa: E402
import vllm_pages as vp  # noqa: E402
from canary_kserve import ArmPages, CanaryKServe, canary_at, promoted  # noqa: E402
from deploy_helpers import (
    NGRAM,
    FakeKServe,
    Run,
    children,
    create_namespace,
    get,
    run_deploy,
    running,
    wait_for,
    write_inventory,
)  # noqa: E402

pytestmark = pytest.mark.slow

ISVC_API = "serving.kserve.io/v1beta1"
GROUP = {
    "specpilot_rollback_smoke": False,
    "specpilot_rollback_wait_delay": 0.5,
    "specpilot_rollback_wait_timeout": 60,
    "specpilot_rollback_api_retries": 8,
    "specpilot_guard_window_seconds": 1,
    "specpilot_guard_min_draft_tokens": 20,
    "specpilot_guard_consecutive_readings": 1,
    "specpilot_guard_auto_rollback": True,
    "specpilot_canary_api_retries": 8,
}
# short steps on CanaryKServe's pages (40 requests more per scrape): each step is decided at its first poll
CANARY = {
    "specpilot_canary_steps": [50, 100],
    "specpilot_canary_window": 5,
    "specpilot_canary_min_requests": 30,
    "specpilot_canary_max_extensions": 0,
    "specpilot_canary_poll": 0.5,
    "specpilot_canary_ready_timeout": 30,
    "specpilot_canary_smoke": False,
}


def _inject(ctl, ns, seed):
    """About 20% of the namespace's requests fail (500, 409, 429 with Retry-After), 10% are slow.  The
    emulator answers a 409 to writes only, as the API server does: the reads see 500s and 429s."""
    for offset, (code, rate) in enumerate(((500, 0.07), (409, 0.07), (429, 0.06))):
        ctl.add_fault(
            verb="*", resource="*", namespace=ns, rate=rate, code=code, seed=seed + offset, retry_after=1
        )
    ctl.add_fault(verb="*", resource="*", namespace=ns, rate=0.1, delay_ms=200, seed=seed + 3)


def _state(emu, ns):
    """(InferenceService spec digest, runtime spec digest, speculative on, canary entries): what serves."""
    isvc = get(emu, ISVC_API, "InferenceService", "svc", ns)
    runtime = get(emu, "serving.kserve.io/v1alpha1", "ServingRuntime", "svc-vllm", ns) or {"metadata": {}}
    args = isvc["spec"]["predictor"]["model"]["args"]
    return (
        isvc["metadata"]["annotations"]["specpilot.io/spec-digest"],
        (runtime["metadata"].get("annotations") or {}).get("specpilot.io/spec-digest"),
        any("speculative" in a for a in args),
        tuple(c["predictor"]["name"] for c in isvc["spec"].get("canary") or []),
    )


def _deploy(emu, tmp, inv, ns, metrics_url):
    # a new speculative config and a new runtime image: the runtime and the InferenceService change together
    host = {
        "specpilot_speculative": dict(NGRAM, num_speculative_tokens=5),
        "specpilot_runtime": {"image": "specpilot-lab/vllm-cpu:0.32.5", "shm_size": "1Gi"},
    }
    write_inventory(inv, ns, {"svc": host}, GROUP)
    return run_deploy(emu, tmp, inv)


def _rollback(emu, tmp, inv, ns, metrics_url):
    return Run(
        emu,
        tmp,
        inv,
        "-e",
        "specpilot_rollback_report_dir=%s" % (tmp / "reports"),
        playbook="playbooks/rollback.yml",
    ).wait(600)


def _guard(emu, tmp, inv, ns, metrics_url):
    extra = {"specpilot_guard_metrics_url": metrics_url, "specpilot_guard_report_dir": str(tmp / "guard")}
    return Run(emu, tmp, inv, "-e", json.dumps(extra), playbook="playbooks/guard.yml").wait(600)


def _canary(emu, tmp, inv, ns, metrics_url, **extra):
    # the stable service runs without speculative decoding; the canary puts the spec's on a slice
    write_inventory(inv, ns, {"svc": {"specpilot_speculative": NGRAM}}, GROUP)
    extra = dict(CANARY, specpilot_canary_report_dir=str(tmp / "canary"), **extra)
    return Run(emu, tmp, inv, "-e", json.dumps(extra), playbook="playbooks/canary.yml").wait(600)


@pytest.mark.parametrize(
    "operation, run, seed",
    [
        ("deploy", _deploy, 101),
        ("rollback", _rollback, 202),
        ("guard", _guard, 303),
        ("canary", _canary, 404),
    ],
)
def test_converges_or_fails_cleanly_under_api_faults(emulator, tmp_path, operation, run, seed):
    ns = f"faults-{operation}"
    create_namespace(emulator, ns)
    host = {} if operation == "canary" else {"specpilot_speculative": NGRAM}  # the canary's: the stable
    inv = write_inventory(tmp_path / "inv", ns, {"svc": host}, GROUP)
    metrics = gs.MetricsServer()
    metrics_url = metrics.add("svc", vp.LOW) + "/metrics"  # low acceptance: the guard rolls back
    pages = ArmPages()
    ctl = emulator.control
    try:
        with CanaryKServe(emulator, ns, pages) if operation == "canary" else FakeKServe(emulator, ns):
            first = run_deploy(emulator, tmp_path, inv)
            assert first.rc == 0, first.out[-4000:]
            before = _state(emulator, ns)
            _inject(ctl, ns, seed)
            try:
                faulty = run(emulator, tmp_path, inv, ns, metrics_url)
                hits = sum(f["injected"] for f in ctl.faults())
            finally:
                ctl.clear_faults()
            during = _state(emulator, ns)
            clean = run(emulator, tmp_path, inv, ns, metrics_url)
            after = _state(emulator, ns)
    finally:
        metrics.close()
        pages.close()
    assert hits > 0
    if faulty.rc != 0:  # a clean failure: the summary names it, no traceback, the service whole
        assert "Traceback" not in faulty.out and "MODULE FAILURE" not in faulty.out, faulty.out[-4000:]
        said = _said(faulty)
        if operation == "canary" and "could not be removed" in said:
            # the one half-state allowed, and said: a canary entry left beside the untouched stable predictor
            assert during[:3] == before[:3], (before, during, after)
        else:
            assert during in (before, after), (before, during, after)
        if operation == "deploy":  # as the deploy-only fault test asserted: the summary says which failed
            assert "FAILED" in faulty.out.split("TASK [Summary of every service]", 1)[-1], faulty.out[-4000:]
        if operation == "canary":  # the failure names the call; once the canary began, where the traffic is
            assert (
                "Error while evaluating conditional" not in faulty.out and "Unknown error" not in said
            ), said
            if "TASK [specpilot_canary : Take the lock of the service]" in faulty.out:
                assert "the canary run failed at" in said or "could not be removed" in said, said
    else:
        assert during == after
    assert clean.rc == 0, clean.out[-4000:]
    assert after != before  # converged: the new config (deploy, canary) or speculative decoding off
    assert after[2] == (operation in ("deploy", "canary")) and after[3] == ()
    if operation == "canary":
        # promoted by the clean run, or by the faulty one: then the clean one finds it so and changes nothing
        assert "svc: canary PROMOTED" in clean.out or "already runs the speculative spec" in _text(clean)
        assert faulty.rc != 0 or clean.recap()["svc"]["changed"] == 0, clean.out[-4000:]
        assert _deployments(emulator, ns) == ["svc-s%s-predictor" % after[0][:8]]
    if operation == "deploy":  # the runtime and the InferenceService carry the same digest
        assert before[0] == before[1] and during[0] == during[1] and after[0] == after[1]
    assert get(emulator, "coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", ns) is None


# ---------------------------------------------------------------------------- the canary, one fault at a time


def _deployments(emu, ns):
    items = emu.dynamic_client().resources.get(api_version="apps/v1", kind="Deployment").get(namespace=ns)
    return sorted(d["metadata"]["name"] for d in items.to_dict()["items"])


def _clean(obj, ns):
    md = {k: obj["metadata"][k] for k in ("name", "labels", "annotations") if obj["metadata"].get(k)}
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": dict(md, namespace=ns),
        "spec": obj["spec"],
    }


@pytest.fixture(scope="module")
def stable(emulator, tmp_path_factory):
    """The stable service (speculative decoding off) as deploy.yml applies it: its ServingRuntime and
    InferenceService, deployed once and copied into each test's namespace."""
    tmp, ns = tmp_path_factory.mktemp("canary-stable"), "canary-stable"
    create_namespace(emulator, ns)
    pages = ArmPages()
    try:
        with CanaryKServe(emulator, ns, pages):
            done = run_deploy(emulator, tmp, write_inventory(tmp / "inv", ns, {"svc": {}}, GROUP))
    finally:
        pages.close()
    assert done.rc == 0, done.out[-4000:]
    return [
        get(emulator, "serving.kserve.io/v1alpha1", "ServingRuntime", "svc-vllm", ns),
        get(emulator, ISVC_API, "InferenceService", "svc", ns),
    ]


class Canary:
    """One test's service: the stable one copied into namespace ``ns`` and rolled out by CanaryKServe."""

    def __init__(self, emu, tmp, ns, stable, pages=None):
        self.emu, self.tmp, self.ns, self.ctl = emu, tmp, ns, emu.control
        create_namespace(emu, ns)
        dyn = emu.dynamic_client()
        for obj in stable:
            dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"]).create(
                body=_clean(obj, ns), namespace=ns
            )
        self.inv = write_inventory(tmp / "inv", ns, {"svc": {}}, GROUP)
        self.pages = pages or ArmPages()
        self.kserve = CanaryKServe(emu, ns, self.pages).__enter__()
        # what the tests compare with (canary.before) is the Deployment's resourceVersion as well as the pods:
        # CanaryKServe creates the Deployment, then the pod, then writes the pod's status and last the
        # Deployment's, so a pod is there before the Deployment's last write - wait for that write too
        wait_for(
            lambda: self.pods() and self._rolled_out(), 30, what="the stable predictor's pod and its rollout"
        )
        self.before = self.stable()

    def _rolled_out(self):
        dep = get(self.emu, "apps/v1", "Deployment", "svc-predictor", self.ns)
        st = (dep or {}).get("status") or {}
        return (
            bool(dep)
            and st.get("observedGeneration") == dep["metadata"]["generation"]
            and st.get("availableReplicas") == 1
        )

    def run(self, **extra):
        return _canary(self.emu, self.tmp, self.inv, self.ns, None, **extra)

    def stable(self):
        """(resourceVersion of the stable predictor's Deployment, its pods)."""
        dep = get(self.emu, "apps/v1", "Deployment", "svc-predictor", self.ns)
        return dep and dep["metadata"]["resourceVersion"], self.pods()

    def pods(self):
        items = self.emu.dynamic_client().resources.get(api_version="v1", kind="Pod").get(namespace=self.ns)
        return sorted(p["metadata"]["name"] for p in items.to_dict()["items"])

    def fault(self, verb, resource, **rule):
        return self.ctl.add_fault(verb=verb, resource=resource, namespace=self.ns, **rule)

    def clear(self):
        faults = [f for f in self.ctl.faults() if f.get("namespace") == self.ns]
        self.ctl.clear_faults()
        return faults

    def close(self):
        self.kserve.__exit__(None, None, None)
        self.pages.close()


@pytest.fixture
def canary(emulator, tmp_path, stable, request):
    svc = Canary(emulator, tmp_path, "canary-" + request.node.name[5:30].replace("_", "-").strip("-"), stable)
    yield svc
    svc.close()


def _text(run):
    return " ".join(run.out.split())  # the YAML callback wraps long messages


def _said(run):
    """The run's last failure message, on one line."""
    return " ".join(run.out.split("fatal: [svc]: FAILED!")[-1].split("PLAY RECAP")[0].split())


def _clean_failure(run, *phrases):
    assert run.rc != 0, run.out[-4000:]
    assert "Traceback" not in run.out and "MODULE FAILURE" not in run.out, run.out[-4000:]
    assert "Error while evaluating conditional" not in run.out, run.out[-4000:]
    said = _said(run)
    for phrase in phrases:
        assert phrase in said, said[:3000]


def test_transient_faults_of_every_kind_are_retried_and_the_canary_promoted(canary):
    """At the first step, the InferenceService's writes answer 409, then 429 (Retry-After), then 500,
    a read 500, and 20% of the requests are slow until the promotion; after the promotion, the lists of
    Deployments answer 500, then 429. Every one is retried: the canary is promoted, and a re-run changes
    nothing."""

    slow = {}

    def first_step():
        for code in (409, 429, 500):
            canary.fault("patch", "inferenceservices", code=code, count=1, retry_after=1)
        canary.fault("get", "inferenceservices", code=500, count=1)
        slow.update(canary.fault("*", "*", rate=0.2, delay_ms=200, seed=11))

    def promotion():
        # the emulator answers with the first rule that fires: the slow rule would take the place of these
        # faults on one request in five, and the list they wait for may be the only one the wait makes
        canary.ctl.remove_fault(slow["id"])
        for code in (500, 429):
            canary.fault("list", "deployments", code=code, count=1, retry_after=1)

    canary.kserve.when(canary_at(50), first_step).when(promoted, promotion)
    run = canary.run(specpilot_canary_api_retries=4)
    faults = canary.clear()
    again = canary.run()
    assert run.rc == 0 and "svc: canary PROMOTED" in run.out, run.out[-4000:]
    assert [f["injected"] for f in faults if f.get("count")] == [1] * 6, faults
    name = _state(canary.emu, canary.ns)[0][:8]
    assert _state(canary.emu, canary.ns)[2:] == (True, ())
    assert _deployments(canary.emu, canary.ns) == ["svc-s%s-predictor" % name]
    assert get(canary.emu, "coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", canary.ns) is None
    assert again.rc == 0 and "already runs the speculative spec" in _text(again), again.out[-4000:]
    assert again.recap()["svc"]["changed"] == 0


def test_an_abort_whose_write_keeps_failing_says_the_canary_is_left_and_the_next_run_removes_it(canary):
    """An impossible acceptance floor aborts the first step, and every write of the InferenceService
    answers 500 from then on: the run fails saying that the canary still takes 50% of the traffic and
    how to remove it, and releases the service's lock; after the fault, the next run aborts the canary it
    finds, and the stable predictor was never touched."""
    canary.kserve.when(canary_at(50), lambda: canary.fault("patch", "inferenceservices", code=500))
    run = canary.run(specpilot_canary_min_acceptance_rate=1.01, specpilot_canary_api_retries=2)
    canary.clear()
    left = _state(canary.emu, canary.ns)
    lease = get(canary.emu, "coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", canary.ns)
    again = canary.run(specpilot_canary_min_acceptance_rate=1.01)
    _clean_failure(run, "could not be removed", "50%", "spec.canary")
    assert left[3] and not left[2]  # the canary entry the run could not remove, the stable spec
    assert lease is None  # released: the next run is not refused
    assert again.rc == 0 and "svc: canary ABORTED" in again.out, again.out[-4000:]
    assert "found and aborted" in _text(again)
    assert _state(canary.emu, canary.ns)[2:] == (False, ())
    assert _deployments(canary.emu, canary.ns) == ["svc-predictor"]
    assert canary.stable() == canary.before  # the stable predictor: same Deployment, same pod


def test_a_read_that_keeps_failing_after_the_promotion_says_so_and_never_aborts(canary):
    """The promotion is written, then every list of Deployments answers 500 (the wait for the old
    stable Deployment to go): the run fails at once naming that read and saying that the predictor
    took the speculative spec - it does not try to remove a canary that is the service now - and
    releases the lock; after the fault, the next run finds the service promoted and changes nothing."""
    canary.kserve.when(promoted, lambda: canary.fault("list", "deployments", code=500))
    run = canary.run(specpilot_canary_api_retries=2)
    canary.clear()
    lease = get(canary.emu, "coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", canary.ns)
    again = canary.run()
    _clean_failure(run, "old stable predictor", "500", "The promotion was written")
    assert "Abort |" not in run.out, run.out[-4000:]
    assert lease is None
    assert again.rc == 0 and "already runs the speculative spec" in _text(again), again.out[-4000:]
    assert again.recap()["svc"]["changed"] == 0
    assert _state(canary.emu, canary.ns)[2:] == (True, ())


def test_the_lock_is_short_and_renewed_while_a_step_is_held(canary):
    """A lock of 9 s (the ready timeout 8 s): the first step is held its whole 8 s window (the minimum
    of requests is out of reach) and the Lease is renewed while it is held, every third of its duration,
    as well as at the step's start - its renewTime moves at least twice after it was taken, and
    its duration stays 9 s. A run that died would leave the service locked for 9 s, not for the whole
    canary. The step ends inconclusive: the canary is removed and the lock released."""
    seen, done = [], threading.Event()

    def watch():
        while not done.is_set():
            lease = get(canary.emu, "coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", canary.ns)
            # service_lock creates the Lease empty, then takes it with a compare-and-swap patch that adds spec
            if lease and lease.get("spec"):
                spec = lease["spec"]
                seen.append(
                    (spec.get("renewTime"), spec.get("leaseDurationSeconds"), spec.get("holderIdentity"))
                )
            done.wait(0.25)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        run = canary.run(
            specpilot_canary_lock_seconds=9,
            specpilot_canary_ready_timeout=8,
            specpilot_canary_window=8,
            specpilot_canary_min_requests=100000,
        )
    finally:
        done.set()
        watcher.join(5)
    assert run.rc == 0 and "svc: canary INCONCLUSIVE" in run.out, run.out[-4000:]
    assert {duration for _t, duration, _h in seen} == {9}, seen
    assert len({holder for _t, _d, holder in seen}) == 1
    renewals = len({renewed for renewed, _d, _h in seen}) - 1
    # the step's start, then at least once while the 8 s window is held: renewals are due every 3 s, but the
    # step's loop renews between its scrapes, so on a loaded machine the second one can fall past the window
    # (CI of stop 28 saw two)
    assert renewals >= 2, seen
    assert get(canary.emu, "coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", canary.ns) is None
    assert _state(canary.emu, canary.ns)[2:] == (False, ())
    assert canary.stable() == canary.before


def test_a_lock_shorter_than_a_readiness_wait_is_refused_before_any_write(canary):
    run = canary.run(specpilot_canary_lock_seconds=20, specpilot_canary_ready_timeout=30)
    _clean_failure(run, "canary_lock_seconds", "a lock of 20 s would expire", "more than 30 s")
    assert _state(canary.emu, canary.ns)[2:] == (False, ())
    assert get(canary.emu, "coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", canary.ns) is None


def test_prometheus_settings_that_cannot_read_a_step_are_refused_before_any_write(canary):
    """specpilot_canary_prometheus_url with a window shorter than two scrape intervals: increase() would read
    nothing, so the run stops in prepare, naming both variables, before the lock or the canary is written."""
    run = canary.run(specpilot_canary_prometheus_url="http://127.0.0.1:9")  # 5 s window, 30 s scrapes
    _clean_failure(
        run,
        "specpilot_canary_window: a step window of 5 s spans fewer than 2 scrapes 30 s apart "
        "(specpilot_canary_prometheus_scrape_interval)",
        "hold each step at least 60 s",
    )
    assert _state(canary.emu, canary.ns)[2:] == (False, ())
    assert get(canary.emu, "coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", canary.ns) is None


def test_an_unreachable_prometheus_fails_the_step_and_the_canary_is_removed(canary):
    """The arms read from a Prometheus that does not answer (port 9 refuses): the first step fails with the
    URL (without its password) and the error, the run removes the canary as on any failure, the stable
    predictor untouched, and the lock released."""
    run = canary.run(
        specpilot_canary_prometheus_url="http://admin:s3cret@127.0.0.1:9",
        specpilot_canary_prometheus_scrape_interval=1,
    )
    _clean_failure(
        run,
        "prometheus_url: the arms could not be read: Prometheus query failed (http://127.0.0.1:9)",
        "The canary was removed (spec.canary); the stable predictor serves all the traffic, untouched.",
    )
    assert "s3cret" not in run.out
    assert _state(canary.emu, canary.ns)[2:] == (False, ())
    assert canary.stable() == canary.before
    assert get(canary.emu, "coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", canary.ns) is None


class ScrapedPages(ArmPages):
    """ArmPages whose every pod Prometheus scrapes: each pod, as CanaryKServe makes it, is written to a
    file_sd target file with the pod and namespace labels a PodMonitor adds."""

    def __init__(self, targets: Path):
        super().__init__()
        self.targets, self.entries = targets, []
        targets.write_text("[]")

    def add(self, pod: str, speculative: bool) -> str:
        url = super().add(pod, speculative)
        ns, name = pod.split(".", 1)
        self.entries.append(
            {
                "targets": [url.split("/")[2]],
                "labels": {"__metrics_path__": "/pod/%s/metrics" % pod, "pod": name, "namespace": ns},
            }
        )
        tmp = self.targets.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.entries))
        tmp.replace(self.targets)  # file_sd reads whole files
        return url


@pytest.mark.skipif(not gs.Prometheus.BINARY.exists(), reason="prometheus missing: run `make`")
def test_a_canary_read_from_prometheus_is_decided_on_its_figures_and_says_so(emulator, tmp_path, stable):
    """specpilot_canary_prometheus_url: a real Prometheus discovers each predictor pod (file_sd, as a PodMonitor
    would) and scrapes it every second; the role reads both arms there (the pods' pages advance only when
    Prometheus scrapes them). The canary's acceptance, 0.8 as read there, is below a floor of 0.9: the first
    step aborts on it, the stable predictor untouched, and the step and the report say the figures come from
    Prometheus. (An abort, not a promotion: the promotion's path does not depend on the source, and costs 20 s.)
    """
    pages = ScrapedPages(tmp_path / "targets.json")
    scrape = [
        {
            "job_name": "pods",
            "file_sd_configs": [{"files": [str(tmp_path / "targets.json")], "refresh_interval": "1s"}],
        }
    ]
    prom = gs.Prometheus(tmp_path / "prometheus", None, "", [], scrape_configs=scrape)
    svc = Canary(emulator, tmp_path, "canary-from-prometheus", stable, pages=pages)
    try:
        # Prometheus scrapes the canary's pod within seconds (its scrape manager applies new targets every 5 s):
        # the step ends as soon as both arms served 30 requests, each scraped twice in its window
        run = svc.run(
            specpilot_canary_prometheus_url=prom.url,
            specpilot_canary_prometheus_scrape_interval=1,
            specpilot_canary_window=60,
            specpilot_canary_min_acceptance_rate=0.9,
        )
        after = svc.stable()
    finally:
        svc.close()
        prom.close()
    assert run.rc == 0 and "svc: canary ABORTED" in run.out, run.out[-4000:]
    assert after == svc.before and _state(emulator, svc.ns)[2:] == (False, ())
    report = json.loads((tmp_path / "canary" / "svc" / "report.json").read_text())
    assert report["source"] == "prometheus" and report["prometheus_url"] == prom.url
    (step,) = report["steps"]
    assert step["source"] == "prometheus" and step["decision"] == "abort"
    assert (
        step["prometheus"]["selectors"]["baseline"] == 'namespace="%s",pod=~"svc-predictor-1-abcde"' % svc.ns
    )
    assert step["arms"]["baseline"]["requests"] >= 30 and step["arms"]["canary"]["requests"] >= 30
    assert step["arms"]["canary"]["acceptance"]["draft_acceptance_rate"] == pytest.approx(0.8)
    assert step["reasons"][0] == (
        "canary acceptance rate 0.800 is below the floor 0.90 (specpilot_canary_min_acceptance_rate)"
    )
    assert (
        "Both arms are read from Prometheus %s" % prom.url
        in (tmp_path / "canary" / "svc" / "report.md").read_text()
    )


def test_a_run_killed_mid_step_releases_the_lock_and_the_next_run_resumes_its_canary(canary):
    """SIGKILL of ansible-playbook while the first step (50%) is held: the worker holding the step sees
    ansible-playbook gone at its next scrape, releases the service's lock and stops; the canary stays at 50%,
    the stable predictor untouched. Moved to 100% (as a run killed at its last step leaves it), the next run,
    with specpilot_canary_on_interrupted resume, takes this spec's canary up at 50% again (at 100% there is no
    baseline to compare with), goes on to 100% and promotes it; the report says where."""
    write_inventory(canary.inv, canary.ns, {"svc": {"specpilot_speculative": NGRAM}}, GROUP)
    held = dict(CANARY, specpilot_canary_window=120, specpilot_canary_min_requests=10**6)
    held["specpilot_canary_report_dir"] = str(canary.tmp / "canary")
    first = Run(canary.emu, canary.tmp, canary.inv, "-e", json.dumps(held), playbook="playbooks/canary.yml")
    lease = lambda: get(
        canary.emu, "coordination.k8s.io/v1", "Lease", "specpilot-deploy-svc", canary.ns
    )  # noqa: E731
    try:
        wait_for(
            lambda: "Step | Hold the step on live traffic" in first.log.read_text(), 120, what="the step held"
        )
        wait_for(lambda: children(first.proc.pid), 10, what="the worker holding the step")
        workers = children(first.proc.pid)
        assert lease() is not None
        os.kill(first.proc.pid, signal.SIGKILL)
        first.wait(30)
        wait_for(lambda: lease() is None, 30, what="the lock released by the worker")
        wait_for(lambda: not [w for w in workers if running(w)], 30, what="the worker gone")
    finally:
        for w in children(first.proc.pid):
            os.kill(w, signal.SIGKILL)
    left = _state(canary.emu, canary.ns)
    assert len(left[3]) == 1 and not left[2], left  # the canary at 50%, the stable spec
    rv, pods = canary.stable()  # the stable predictor's Deployment and pod untouched, the canary's pod beside
    assert rv == canary.before[0] and set(canary.before[1]) < set(pods)
    # as if the run had been killed at the last step: at 100% the stable predictor serves nothing to compare
    # with, so the resumed canary goes back to the last step below 100 (50%) first
    isvc = get(canary.emu, ISVC_API, "InferenceService", "svc", canary.ns)
    at_100 = [dict(isvc["spec"]["canary"][0], trafficPercent=100)]
    canary.emu.dynamic_client().resources.get(api_version=ISVC_API, kind="InferenceService").patch(
        name="svc",
        namespace=canary.ns,
        body={"spec": {"canary": at_100}},
        content_type="application/merge-patch+json",
    )

    again = canary.run(specpilot_canary_on_interrupted="resume")
    assert again.rc == 0 and "svc: canary PROMOTED" in again.out, again.out[-4000:]
    report = json.loads((canary.tmp / "canary" / "svc" / "report.json").read_text())
    assert report["resumed_at"] == 50 and [s["traffic_percent"] for s in report["steps"]] == [50, 100]
    assert "(s%s at 100%%)" % report["spec_digest"][:8] not in again.out  # resumed, not aborted
    assert _state(canary.emu, canary.ns)[2:] == (True, ()) and lease() is None
    assert "Resumed at 50%: this canary" in (canary.tmp / "canary" / "svc" / "report.md").read_text()
