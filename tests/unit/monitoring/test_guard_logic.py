"""The guard's decisions (module_utils/operate/acceptance_guard.py): reading the InferenceService, statuses,
streaks of low readings, history handling, and the Prometheus reading with a canned API."""

from __future__ import annotations

import json
import urllib.parse

import pytest

import vllm_pages as vp
from ansible_collections.specpilot.core.plugins.module_utils.operate import acceptance_guard as g
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_metrics import parse_metrics_text

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}


def isvc(args=None, command=None, containers=None, name="svc"):
    model = {"modelFormat": {"name": "vLLM"}, "args": args or []}
    if command:
        model["command"] = command
    pred = {"model": model}
    if containers:
        pred["containers"] = containers
    return {"metadata": {"name": name, "namespace": "ml"}, "spec": {"predictor": pred}}


ON = isvc(["--model=/mnt/models", "--speculative-config=" + json.dumps(NGRAM, separators=(",", ":"))])


@pytest.mark.parametrize("obj,on,config", [
    (ON, True, NGRAM),
    (isvc(["--model=/m", "--speculative-config", json.dumps(NGRAM)]), True, NGRAM),
    (isvc(["--model=/m"]), False, None),
    (isvc(command=["sh", "-c", "exec vllm serve /m --speculative-config '%s' --port 8080" % json.dumps(NGRAM)]),
     True, NGRAM),
    (isvc(["--speculative-model=[ngram]", "--num-speculative-tokens=3"]), True, None),
    (isvc(containers=[{"name": "kserve-container", "args": ["--speculative_config=" + json.dumps(NGRAM)]}]),
     True, NGRAM),
], ids=["args", "two-items", "off", "shell-string", "v0-flags", "containers"])
def test_speculative_state_of_an_inferenceservice(obj, on, config):
    state = g.isvc_speculative(obj)
    assert state["exists"] and state["on"] is on and state["config"] == config
    assert (state["digest"] is not None) is on


def test_absent_and_config_digest():
    assert g.isvc_speculative(None) == {"exists": False, "on": False, "config": None, "flags": [], "digest": None}
    other = isvc(["--speculative-config=" + json.dumps(dict(NGRAM, num_speculative_tokens=5))])
    assert g.isvc_speculative(ON)["digest"] != g.isvc_speculative(other)["digest"]
    # the same config written with other spacing / key order is the same config
    same = isvc(["--speculative-config", json.dumps(dict(reversed(list(NGRAM.items()))), indent=1)])
    assert g.isvc_speculative(ON)["digest"] == g.isvc_speculative(same)["digest"]


def reading(traffic: vp.Traffic, minutes=1, spec=True) -> dict:
    page = vp.real_page()
    first = parse_metrics_text(page if spec else vp.without_spec_series(page), now=0.0)
    later = vp.advance(page, traffic, minutes)
    second = parse_metrics_text(later if spec else vp.without_spec_series(later), previous=first, now=60.0)
    return g.reading_from_facts(second)


def run(obj, traffic, history=None, **params):
    params.setdefault("min_draft_tokens", 20)
    return g.evaluate(obj, reading(traffic), history, params, now=0)


@pytest.mark.parametrize("traffic,status", [
    (vp.HEALTHY, "healthy"), (vp.BORDERLINE, "borderline"), (vp.LOW, "low"), (vp.IDLE, "idle"),
    (vp.Traffic(drafts=1, accepted_per_position=[0, 0, 0]), "idle"),
])
def test_status_of_a_reading(traffic, status):
    out = run(ON, traffic)
    assert out["status"] == status
    assert out["record"] and out["history"][-1]["status"] == status


def test_missing_off_absent():
    assert g.evaluate(ON, reading(vp.HEALTHY, spec=False), None, {})["status"] == "missing"
    off = g.evaluate(isvc(["--model=/m"]), {}, None, {})
    assert (off["status"], off["action"], off["record"], off["history"]) == ("off", "none", False, [])
    assert g.evaluate(None, {}, None, {})["status"] == "absent"


def test_cumulative_figures_are_never_acted_upon():
    page = vp.advance(vp.real_page(), vp.LOW, 100)
    cumulative = g.reading_from_facts(parse_metrics_text(page))  # no `previous`
    out = g.evaluate(ON, cumulative, None, {"consecutive_readings": 1, "auto_rollback": True})
    assert (out["status"], out["action"]) == ("no-window", "none")


def chain(traffics, **params):
    history = None
    outs = []
    for t in traffics:
        out = run(ON, t, history, **params)
        history = out["history_json"]
        outs.append(out)
    return outs


def test_k_low_readings_in_a_row():
    outs = chain([vp.LOW, vp.LOW, vp.LOW], consecutive_readings=3)
    assert [(o["streak"], o["action"]) for o in outs] == [(1, "watch"), (2, "watch"), (3, "report")]
    auto = chain([vp.LOW, vp.LOW], consecutive_readings=2, auto_rollback=True)
    assert [o["action"] for o in auto] == ["watch", "rollback"]


def test_idle_readings_neither_count_nor_break_the_streak_healthy_breaks_it():
    outs = chain([vp.LOW, vp.IDLE, vp.LOW], consecutive_readings=2)
    assert [o["action"] for o in outs] == ["watch", "none", "report"]
    outs = chain([vp.LOW, vp.HEALTHY, vp.LOW], consecutive_readings=2)
    assert [o["streak"] for o in outs] == [1, 0, 1]
    outs = chain([vp.LOW, vp.BORDERLINE, vp.LOW], consecutive_readings=2)
    assert outs[-1]["action"] == "watch"


def test_a_new_speculative_config_starts_a_new_streak():
    first = run(ON, vp.LOW, consecutive_readings=2)
    changed = isvc(["--speculative-config=" + json.dumps(dict(NGRAM, num_speculative_tokens=2))])
    out = run(changed, vp.LOW, first["history_json"], consecutive_readings=2)
    assert (out["streak"], out["action"]) == (1, "watch")


def test_history_is_bounded_and_robust():
    outs = chain([vp.HEALTHY] * 4, history_size=3, consecutive_readings=2)
    assert len(outs[-1]["history"]) == 3
    entry = outs[-1]["history"][-1]
    assert set(entry) == {"at", "status", "cfg", "src", "rate", "drafted", "accepted", "mal", "pp", "run"}
    assert json.loads(outs[-1]["history_json"]) == outs[-1]["history"]
    for bad in ("not json", json.dumps({"a": 1}), json.dumps([{"status": "weird"}, 3])):
        out = run(ON, vp.HEALTHY, bad)
        assert len(out["history"]) == 1 and out["notes"]


@pytest.mark.parametrize("params,message", [
    ({"min_acceptance_rate": 2}, "between 0 and 1"),
    ({"min_acceptance_rate": 0.7, "warn_acceptance_rate": 0.6}, "below min_acceptance_rate"),
    ({"consecutive_readings": 0}, ">= 1"),
    ({"history_size": 2, "consecutive_readings": 3}, "at least consecutive_readings"),
])
def test_bad_settings(params, message):
    with pytest.raises(g.GuardError, match=message):
        g.settings_of(params)


class CannedPrometheus:
    """Answers the guard's instant queries from two scrapes of the real page (what increase() would
    return over the window), checking that every query is evaluated at the same instant."""

    def __init__(self, traffic: vp.Traffic, spec=True):
        page = vp.real_page()
        self.first = parse_metrics_text(page, now=0.0)
        self.second = parse_metrics_text(vp.advance(page, traffic, 15), previous=self.first, now=900.0)
        self.spec = spec
        self.times = set()
        self.queries = []

    def __call__(self, url, headers, timeout, validate_certs):
        q = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
        expr = q["query"][0]
        self.times.add(q["time"][0])
        self.queries.append(expr)
        d = self.second["derived"]
        svc = {"namespace": "ml", "model_name": "svc"}
        if expr.startswith("count by") and "num_requests_running" in expr:
            result = [(svc, 1)]
        elif expr.startswith("count by"):
            result = [(svc, 1)] if self.spec else []
        elif "per_pos" in expr:
            result = [(dict(svc, position=str(i)), v) for i, v in enumerate(d["accepted_per_position"])]
        elif "num_drafts_total" in expr:
            result = [(svc, d["num_drafts"])]
        elif "num_accepted_tokens_total" in expr:
            result = [(svc, d["num_accepted_tokens"])]
        elif "num_draft_tokens_total" in expr:
            result = [(svc, d["num_draft_tokens"])]
        else:
            raise AssertionError(expr)
        data = {"resultType": "vector", "result": [{"metric": m, "value": [0, str(v)]} for m, v in result]}
        return json.dumps({"status": "success", "data": data}).encode()


def test_prometheus_reading_equals_the_scrape_reading():
    fake = CannedPrometheus(vp.HEALTHY)
    r = g.prometheus_reading("http://prom:9090", {"namespace": "ml", "model_name": "svc"}, "15m", "0.32.0",
                             fetch=fake, at=1234.5)
    assert fake.times == {"1234.500"}
    assert 'model_name="svc",namespace="ml"' in fake.queries[0] and "[15m]" in fake.queries[2]
    d = fake.second["derived"]
    assert r["acceptance_rate"] == pytest.approx(d["draft_acceptance_rate"])
    assert r["mean_acceptance_length"] == pytest.approx(d["mean_acceptance_length"])
    assert r["per_position"] == pytest.approx(d["per_position_acceptance"])
    assert g.evaluate(ON, r, None, {})["status"] == "healthy"
    missing = g.prometheus_reading("http://prom", {"model_name": "svc"}, "15m", "0.32.0",
                                   fetch=CannedPrometheus(vp.HEALTHY, spec=False), at=0)
    assert g.evaluate(ON, missing, None, {})["status"] == "missing"


def test_prometheus_errors_are_reported():
    def refusing(url, headers, timeout, validate_certs):
        return json.dumps({"status": "error", "error": "parse error"}).encode()

    with pytest.raises(g.GuardError, match="refused the query"):
        g.prometheus_reading("http://prom", {"model_name": "svc"}, "15m", "0.32.0", fetch=refusing, at=0)

    def down(url, headers, timeout, validate_certs):
        raise OSError("connection refused")

    with pytest.raises(g.GuardError, match="connection refused"):
        g.prometheus_reading("http://prom", {"model_name": "svc"}, "15m", "0.32.0", fetch=down, at=0)


def test_the_acceptance_band_of_live_traffic_next_to_the_production_temperature():
    out = g.evaluate(ON, reading(vp.BORDERLINE), None, {"min_draft_tokens": 20}, now=0, production_temperature=0.7)
    band = out["acceptance_band"]
    assert out["status"] == "borderline" and band["band"] == "measure_p99"
    assert band["acceptance_rate"] == pytest.approx(out["reading"]["acceptance_rate"])
    assert (band["production_temperature"], band["read_at_temperature"], band["at_production"]) == (0.7, None, None)
    assert band["line"].startswith("Acceptance 0.")
    assert "0.5-0.65: borderline, measure P99 under load" in band["line"]
    assert ("read from live traffic, at the temperatures its clients send; the production temperature is 0.7 "
            "(specpilot_workload.temperature)") in band["line"]
    healthy = run(ON, vp.HEALTHY)["acceptance_band"]
    assert healthy["band"] == "likely_helps" and "the production temperature is not set" in healthy["note"]
    assert run(ON, vp.LOW)["acceptance_band"]["band"] == "off"
    # nothing judged, no band: idle, off, absent
    assert run(ON, vp.IDLE)["acceptance_band"] is None
    assert g.evaluate(isvc(["--model=/m"]), {}, None, {})["acceptance_band"] is None
    assert g.evaluate(None, {}, None, {})["acceptance_band"] is None


def test_the_guard_markdown_has_the_band_line():
    from ansible_collections.specpilot.core.plugins.module_utils.operate.reports import guard_markdown

    out = g.evaluate(ON, reading(vp.HEALTHY), None, {"min_draft_tokens": 20}, now=0, production_temperature=0)
    service = {"namespace": "ml", "name": "svc", "status": out["status"], "acceptance_rate": 0.8,
               "mean_acceptance_length": 3.4, "per_position": [0.9], "drafted": 30, "streak": 0,
               "consecutive_readings": 3, "action": "none", "rolled_back": False, "message": out["message"],
               "findings": [], "history": [], "acceptance_band": out["acceptance_band"]}
    report = {"generated_at": "now", "mode": "scrape", "auto_rollback": False, "services": [service, dict(
        service, name="idle", acceptance_band=None)], "thresholds": {
        "min_acceptance_rate": 0.5, "warn_acceptance_rate": 0.65, "min_draft_tokens": 100, "consecutive_readings": 3}}
    md = guard_markdown(report)
    assert md.count("Band: ") == 1
    assert "Band: Acceptance 0.800: above 0.65: likely helps (the rule: below 0.5: off" in md


def test_the_guard_says_what_it_judged_and_points_to_the_newest_speed_verdict(tmp_path):
    """Issue 39: "healthy" right after the canary aborted the same config read as "paying off". The words say
    acceptance; the newest benchmark or canary report of the service is named (by its run's time)."""
    assert g.judged("healthy") == "acceptance healthy" and g.judged("idle") == "idle"
    bench = tmp_path / "benchmark" / "svc" / "report.json"
    canary = tmp_path / "canary" / "svc" / "report.json"
    bench.parent.mkdir(parents=True)
    canary.parent.mkdir(parents=True)
    bench.write_text(json.dumps({"kind": "specpilot-benchmark", "decision": "keep", "summary": "keep at c4",
                                 "generated_at": "2026-11-20T08:00:00Z"}))
    canary.write_text(json.dumps({"outcome": "aborted", "summary": "TTFT +57%", "run": {"at": "2026-11-27T10:00:00Z"}}))
    missing = tmp_path / "nowhere" / "report.json"
    newest = g.latest_verdict([str(bench), str(canary), str(missing)])
    assert newest == {"kind": "canary", "verdict": "aborted", "summary": "TTFT +57%", "at": "2026-11-27T10:00:00Z",
                      "path": str(canary)}
    assert g.latest_verdict([str(bench)])["verdict"] == "keep"
    assert g.latest_verdict([str(missing)]) is None and g.verdict_pointer(None) == ""
    assert g.verdict_pointer(newest) == "; latest canary verdict (2026-11-27T10:00:00Z): aborted - TTFT +57%% (%s)" % (
        canary)


def test_the_module_and_its_action_task_judge_alike():
    """specpilot.core.acceptance_guard runs in the worker (its action plugin, fact_tasks.acceptance_guard:
    issue 40, no Python process a service of a guard run); its module file runs the same task: the same
    verdict from the same reading, the same refusal."""
    from fact_task_support import as_task, run_main

    from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks

    def as_module(args):
        return run_main("acceptance_guard", args)

    def as_task_(args):
        return as_task(fact_tasks.acceptance_guard, args, fact_tasks.ACCEPTANCE_GUARD_ARGS)

    low = parse_metrics_text(vp.advance(vp.real_page(), vp.LOW, 1), previous=parse_metrics_text(vp.real_page()))
    args = {"name": "svc", "isvc": ON, "metrics": low, "history": "", "consecutive_readings": 1, "min_draft_tokens": 20}
    by_module, failed = as_module(args)
    by_task = as_task_(args)
    volatile = {"invocation", "history", "history_json"}  # each reading is stamped with its time
    assert not failed and (by_module["status"], by_module["action"]) == ("low", "report")
    assert {k: v for k, v in by_module.items() if k not in volatile} == {
        k: v for k, v in by_task.items() if k not in volatile
    }
    assert [h["status"] for h in by_task["history"]] == [h["status"] for h in by_module["history"]] == ["low"]
    off, failed = as_module({"name": "plain", "isvc": isvc(["--model=/m"])})
    plain = as_task_({"name": "plain", "isvc": isvc(["--model=/m"])})
    assert not failed and off["status"] == plain["status"] == "off" and off["message"] == plain["message"]
    refused, failed = as_module({"name": "svc", "isvc": ON})
    assert failed and refused["msg"] == "svc: speculative decoding is on but no metrics reading was given"
    with pytest.raises(fact_tasks.TaskFailure, match="no metrics reading was given"):
        as_task_({"name": "svc", "isvc": ON})
