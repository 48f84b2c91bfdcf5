"""playbooks/guard.yml against the API emulator, with engines' /metrics pages made from a real vLLM
0.32.0 page: healthy, low-acceptance, idle and off services, K readings, auto-rollback, isolation,
history stores, and the Prometheus mode against a real Prometheus."""

from __future__ import annotations

import json
import time

import pytest

import guard_support as gs
import vllm_pages as vp
from markdown_cells import unpadded

pytestmark = [pytest.mark.slow]


@pytest.fixture
def metrics():
    server = gs.MetricsServer()
    yield server
    server.close()


_ns_counter = iter(range(1000))


@pytest.fixture
def ns(emulator):
    name = f"guard-{next(_ns_counter)}"
    gs.create_namespace(emulator, name)
    return name


def test_every_kind_of_service_in_one_run_each_in_isolation(emulator, metrics, ns, tmp_path):
    for name, traffic in (("healthy", vp.HEALTHY), ("low", vp.LOW), ("idle", vp.IDLE)):
        gs.create_isvc(emulator, ns, name, metrics.add(name, traffic))
    gs.create_isvc(emulator, ns, "plain", None, speculative=False)
    gs.create_isvc(emulator, ns, "dropped", metrics.add("dropped", vp.HEALTHY, spec=False))
    gs.create_isvc(emulator, ns, "gone", "http://127.0.0.1:9/nowhere")
    services = ["healthy", "low", "idle", "plain", "ghost", "dropped", "gone"]
    inv = gs.write_inventory(tmp_path / "inv.yml", ns, services)
    # issue 39: the canary aborted this config for its latency; the guard, which judges acceptance only, says so
    canary = tmp_path / "verdicts" / "canary" / "healthy"
    canary.mkdir(parents=True)
    (canary / "report.json").write_text(json.dumps({
        "outcome": "aborted", "summary": "at step 50%: TTFT +57% against the stable predictor",
        "run": {"at": "2026-11-27T10:00:00Z"}}))
    run = gs.run_guard(emulator, tmp_path, inv)
    # one engine could not be read: every other service is judged, the report is written, the run fails
    assert run.rc != 0 and "guard errors:" in run.out
    by = {s["name"]: s for s in run.report["services"]}
    assert {n: (s["status"], s["action"]) for n, s in by.items()} == {
        "healthy": ("healthy", "none"), "low": ("low", "watch"), "idle": ("idle", "none"),
        "plain": ("off", "none"), "ghost": ("absent", "none"), "dropped": ("missing", "report"),
        "gone": ("error", "none")}
    assert run.report["errors"] == ["gone"]
    assert by["healthy"]["message"].startswith("healthy: acceptance healthy, 0.800 over "), by["healthy"]["message"]
    assert by["healthy"]["message"].endswith(
        "; latest canary verdict (2026-11-27T10:00:00Z): aborted - at step 50%%: TTFT +57%% against the stable "
        "predictor (%s)" % (canary / "report.json"))
    assert "latest" not in by["low"]["message"]  # no verdict for that one
    # the report's table: what was judged, and the verdict the guard does not give
    assert "| %s/healthy | acceptance healthy | 0.800 |" % ns in unpadded(run.markdown), run.markdown
    assert "| none | canary aborted (2026-11-27T10:00:00Z) |\n" in unpadded(run.markdown), run.markdown
    assert by["healthy"]["latest_verdict"]["verdict"] == "aborted" and by["low"]["latest_verdict"] is None
    assert "cannot read http://127.0.0.1:9/nowhere/metrics" in by["gone"]["error"]
    assert "exports no vllm:spec_decode_* series" in by["dropped"]["findings"][0]
    # figures of the window between the two scrapes (one unit of traffic), as the parser computes them
    assert by["healthy"]["acceptance_rate"] == pytest.approx(0.8)
    assert by["healthy"]["mean_acceptance_length"] == pytest.approx(3.4)
    assert by["healthy"]["per_position"] == pytest.approx([0.9, 0.8, 0.7])
    assert by["low"]["acceptance_rate"] == pytest.approx(0.2) and by["low"]["drafted"] == 30
    assert by["low"]["streak"] == 1
    assert any("collapses from position 2" in f for f in by["low"]["findings"])
    # exactly two scrapes per service with speculative decoding on
    assert [metrics.scrapes(n) for n in ("healthy", "low", "idle", "dropped")] == [2, 2, 2, 2]
    # history kept per service in a ConfigMap owned by the InferenceService; none for off/absent
    isvc = gs.get_isvc(emulator, ns, "low")
    cm = gs.get_configmap(emulator, ns, "low-specpilot-guard")
    assert cm["metadata"]["ownerReferences"][0]["uid"] == isvc["metadata"]["uid"]
    assert [h["status"] for h in json.loads(cm["data"]["history"])] == ["low"]
    assert gs.get_configmap(emulator, ns, "plain-specpilot-guard") is None
    assert gs.get_configmap(emulator, ns, "ghost-specpilot-guard") is None
    # the guard never touches the InferenceService (no annotation: KServe would restart the pods)
    assert "specpilot.io/guard-history" not in (isvc["metadata"].get("annotations") or {})
    assert isvc["metadata"]["generation"] == 1
    assert "| acceptance low | 0.200 | 1.60 | 0.5 / 0.1 / 0.0 | 30 | 1/3 | watch | - |" in unpadded(run.markdown)

    # check mode, errors tolerated: the same verdicts, nothing written
    check = gs.run_guard(emulator, tmp_path, inv, "--check", extra={"specpilot_guard_fail_on_error": False})
    assert check.rc == 0, check.out
    assert "low: acceptance low, 0.200 over 30 draft tokens, 2/3 low readings in a row" in check.out
    assert check.report is None  # no report files in check mode either
    assert gs.get_configmap(emulator, ns, "low-specpilot-guard")["metadata"]["resourceVersion"] == \
        cm["metadata"]["resourceVersion"]


def test_k_low_readings_report_and_leave_the_service_alone(emulator, metrics, ns, tmp_path):
    gs.create_isvc(emulator, ns, "low", metrics.add("low", vp.LOW))
    gs.create_isvc(emulator, ns, "healthy", metrics.add("healthy", vp.HEALTHY))
    inv = gs.write_inventory(tmp_path / "inv.yml", ns, ["low", "healthy"])
    extra = {"specpilot_guard_consecutive_readings": 2}
    first = gs.run_guard(emulator, tmp_path, inv, extra=extra)
    assert first.rc == 0, first.out
    # report mode can fail the job (AWX notifications) without touching anything
    second = gs.run_guard(emulator, tmp_path, inv, extra=dict(extra, specpilot_guard_fail_on_action=True))
    assert second.rc != 0 and "guard: action needed for low" in second.out
    assert (first.service("low")["action"], second.service("low")["action"]) == ("watch", "report")
    assert second.service("low")["streak"] == 2 and not second.service("low")["rolled_back"]
    assert second.report["needs_action"] == ["low"] and second.service("healthy")["action"] == "none"
    assert ngram_on(gs.get_isvc(emulator, ns, "low"))  # report only: speculative decoding still on
    assert [h["status"] for h in gs.guard_history(emulator, ns, "low")] == ["low", "low"]


def ngram_on(isvc: dict) -> bool:
    return gs.NGRAM_ARG in isvc["spec"]["predictor"]["model"]["args"]


def test_auto_rollback_after_k_low_readings_then_nothing_to_do(emulator, metrics, ns, tmp_path):
    """The scheduled guard with auto-rollback: two low readings -> the rollback role turns speculative
    decoding off; the healthy service is left alone; the next run sees `off` and changes nothing."""
    gs.create_isvc(emulator, ns, "low", metrics.add("low", vp.LOW))
    gs.create_isvc(emulator, ns, "healthy", metrics.add("healthy", vp.HEALTHY))
    # drafts too little to be judged (3 tokens a window, 20 needed), at 0% acceptance
    gs.create_isvc(emulator, ns, "quiet", metrics.add("quiet", vp.Traffic(drafts=1, accepted_per_position=[0, 0, 0])))
    inv = gs.write_inventory(tmp_path / "inv.yml", ns, ["low", "healthy", "quiet"])
    extra = {"specpilot_guard_consecutive_readings": 2, "specpilot_guard_auto_rollback": True,
             "specpilot_guard_rollback_role": "stub_rollback"}
    runs = [gs.run_guard(emulator, tmp_path, inv, extra=extra, roles_path=gs.STUB_ROLES) for _ in range(2)]
    assert all(r.rc == 0 for r in runs), runs[-1].out
    assert [r.service("low")["action"] for r in runs] == ["watch", "rollback"]
    assert runs[1].service("low")["rolled_back"] and runs[1].report["rolled_back"] == ["low"]
    low = gs.get_isvc(emulator, ns, "low")
    assert not ngram_on(low) and low["metadata"]["annotations"]["stub-rollback/mode"] == "off"
    healthy_before = gs.get_isvc(emulator, ns, "healthy")
    assert ngram_on(healthy_before)
    history_rv = gs.get_configmap(emulator, ns, "low-specpilot-guard")["metadata"]["resourceVersion"]
    scrapes = metrics.scrapes("low")
    third = gs.run_guard(emulator, tmp_path, inv, extra=extra, roles_path=gs.STUB_ROLES)
    assert third.rc == 0, third.out
    assert (third.service("low")["status"], third.service("low")["action"]) == ("off", "none")
    assert third.recap["low"]["changed"] == 0  # nothing to do, nothing written
    # the report files (written once, on the first host of the play) are no change of that service
    assert third.recap["healthy"]["changed"] == 1  # its history
    assert gs.get_configmap(emulator, ns, "low-specpilot-guard")["metadata"]["resourceVersion"] == history_rv
    assert metrics.scrapes("low") == scrapes
    healthy_after = gs.get_isvc(emulator, ns, "healthy")
    assert healthy_after["metadata"]["generation"] == healthy_before["metadata"]["generation"] == 1
    # idle: never acted upon, whatever its acceptance
    assert [r.service("quiet")["status"] for r in runs + [third]] == ["idle"] * 3
    assert ngram_on(gs.get_isvc(emulator, ns, "quiet"))


def test_auto_rollback_without_the_rollback_role_fails_clearly_for_that_service_only(emulator, metrics, ns, tmp_path):
    gs.create_isvc(emulator, ns, "low", metrics.add("low", vp.LOW))
    gs.create_isvc(emulator, ns, "healthy", metrics.add("healthy", vp.HEALTHY))
    inv = gs.write_inventory(tmp_path / "inv.yml", ns, ["low", "healthy"])
    extra = {"specpilot_guard_consecutive_readings": 1, "specpilot_guard_auto_rollback": True,
             "specpilot_guard_rollback_role": "specpilot_rollback_not_installed"}
    run = gs.run_guard(emulator, tmp_path, inv, extra=extra)
    assert run.rc != 0
    low = run.service("low")
    assert low["status"] == "error"
    assert "rollback role 'specpilot_rollback_not_installed' is not installed" in low["error"]
    assert "Speculative decoding is still ON" in low["error"]
    assert run.service("healthy")["status"] == "healthy"
    assert ngram_on(gs.get_isvc(emulator, ns, "low"))
    # the low reading itself was recorded before the rollback was attempted
    assert [h["status"] for h in gs.guard_history(emulator, ns, "low")] == ["low"]


def test_history_is_bounded_and_annotation_store_works(emulator, metrics, ns, tmp_path):
    gs.create_isvc(emulator, ns, "annotated", metrics.add("annotated", vp.BORDERLINE))
    inv = gs.write_inventory(tmp_path / "inv.yml", ns, ["annotated"])
    extra = {"specpilot_guard_history_store": "annotation", "specpilot_guard_history_size": 1,
             "specpilot_guard_consecutive_readings": 1}
    for _ in range(2):
        run = gs.run_guard(emulator, tmp_path, inv, extra=extra)
        assert run.rc == 0, run.out
    isvc = gs.get_isvc(emulator, ns, "annotated")
    history = json.loads(isvc["metadata"]["annotations"]["specpilot.io/guard-history"])
    assert [h["status"] for h in history] == ["borderline"]  # bounded: the last reading only
    assert history[-1]["rate"] == pytest.approx(0.6) and history[-1]["pp"] == [0.8, 0.6, 0.4]
    assert gs.get_configmap(emulator, ns, "annotated-specpilot-guard") is None


@pytest.mark.skipif(not gs.Prometheus.BINARY.exists(), reason="prometheus missing: run `make`")
def test_prometheus_mode_reads_the_same_figures(emulator, metrics, ns, tmp_path):
    """specpilot_prometheus_url: a real Prometheus scrapes the engines; the guard queries it with the
    PrometheusRule's PromQL (increase over the window) and does not scrape the engines itself."""
    for name, traffic in (("healthy", vp.HEALTHY), ("low", vp.LOW), ("idle", vp.IDLE)):
        gs.create_isvc(emulator, ns, name, metrics.add(name, traffic))
    prom = gs.Prometheus(tmp_path / "prometheus", metrics, ns, ["healthy", "low", "idle"])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(prom.query('vllm:spec_decode_num_drafts_total')) < 3:
            time.sleep(0.5)
        time.sleep(4)  # several scrapes inside the window
        inv = gs.write_inventory(tmp_path / "inv.yml", ns, ["healthy", "low", "idle"])
        scrapes = {n: metrics.scrapes(n) for n in ("healthy", "low", "idle")}
        run = gs.run_guard(emulator, tmp_path, inv, extra={"specpilot_prometheus_url": prom.url,
                                                           "specpilot_guard_prometheus_window": "30s"})
        assert run.rc == 0, run.out
        assert run.report["mode"] == "prometheus"
        by = {s["name"]: s for s in run.report["services"]}
        assert by["healthy"]["status"] == "healthy" and by["healthy"]["acceptance_rate"] == pytest.approx(0.8)
        assert by["healthy"]["mean_acceptance_length"] == pytest.approx(3.4)
        assert by["healthy"]["per_position"] == pytest.approx([0.9, 0.8, 0.7])
        assert by["low"]["status"] == "low" and by["low"]["acceptance_rate"] == pytest.approx(0.2)
        assert by["idle"]["status"] == "idle"
        # only Prometheus scraped (once a second), the guard did not
        assert all(metrics.scrapes(n) - scrapes[n] < 60 for n in scrapes)
    finally:
        prom.close()
