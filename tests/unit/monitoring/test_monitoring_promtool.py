"""The monitoring PromQL evaluated by Prometheus' own engine (promtool test rules) on series made
from a real vLLM 0.32.0 /metrics page, against the figures vllm_metrics_facts computes from two
scrapes of the same pages: the rules see what the parsers see."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import pytest
import yaml

import vllm_pages as vp
from ansible_collections.specpilot.core.plugins.module_utils.operate import monitoring as sm
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_metrics import parse_metrics_text

ROOT = vp.ROOT
PROMTOOL = ROOT / ".venv" / "bin" / "promtool"
NS = "lab"
MINUTES = 30  # length of the input series; figures are read at 15m, alerts at 25m
SERVICE = vp.MODEL  # KServe sets the served model name to the InferenceService name

pytestmark = pytest.mark.skipif(not PROMTOOL.exists(),
                                reason="promtool missing: run `make` (Debian prometheus, unpacked)")


def input_series(page: str, traffic: vp.Traffic, engines: dict | None = None) -> list[dict]:
    """Every vllm: sample of the page as a promtool series rising by the traffic each minute."""
    out = []
    for name, labels, value in vp.samples(page):
        if not name.startswith("vllm:") or name.endswith("_created"):
            continue
        t = (engines or {}).get(labels.get("engine"), traffic)
        inc = t.per_series(name, labels)
        series = vp.format_line(name, dict(labels, namespace=NS), 0).rsplit(" ", 1)[0]
        out.append({"series": series, "values": "%s+%sx%d" % (format(value, ".6f"), format(inc, ".6f"), MINUTES)})
    return out


def rule_for(**settings) -> dict:
    return sm.prometheus_rule(SERVICE, NS, "0.32.0", planned=True, settings=settings or None)


def run_promtool(tmp_path: Path, rule: dict, tests: list[dict]) -> subprocess.CompletedProcess:
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    (tmp_path / "test.yml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests}, sort_keys=False, width=10000))
    return subprocess.run([str(PROMTOOL), "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False)


def two_scrapes(page: str, traffic: vp.Traffic, minutes: float = 15, engines: dict | None = None) -> dict:
    first = parse_metrics_text(page, now=1_000.0)
    return parse_metrics_text(vp.advance(page, traffic, minutes, engines), previous=first, now=1_000.0 + 60 * minutes)


def labels_text(labels: dict) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


SERVICE_LABELS = {"namespace": NS, "model_name": SERVICE}


def close_to(expr: str, expected: list[tuple[dict, float]], eval_time: str = "15m") -> list[dict]:
    """promql_expr_test entries asserting that ``expr`` returns exactly the series of ``expected``
    with these values (to 1e-9: Prometheus and Python may round the last bit differently)."""
    tests = []
    for value in sorted({v for _labels, v in expected}):
        tests.append({
            "expr": "abs((%s) - %r) < bool 1e-9" % (expr, float(value)),
            "eval_time": eval_time,
            "exp_samples": [{"labels": labels_text(labels), "value": 1 if abs(v - value) < 1e-9 else 0}
                            for labels, v in expected],
        })
    return tests


def figure_tests(page, traffic, engines=None) -> tuple[list[dict], dict]:
    """promql_expr_test entries for every figure, expected values from the two-scrape parser."""
    facts = two_scrapes(page, traffic, 15, engines)
    d = facts["derived"]
    exprs = sm.expressions(sm.metric_profile("0.32.0"), SERVICE_LABELS, "15m", "rate")
    window = sm.expressions(sm.metric_profile("0.32.0"), SERVICE_LABELS, "15m", "increase")
    svc = dict(SERVICE_LABELS)
    tests = []
    tests += close_to(exprs["acceptance_rate"], [(svc, d["draft_acceptance_rate"])])
    tests += close_to(exprs["mean_acceptance_length"], [(svc, d["mean_acceptance_length"])])
    tests += close_to(exprs["per_position_acceptance"],
                      [(dict(svc, position=str(i)), v) for i, v in enumerate(d["per_position_acceptance"])])
    tests += close_to(window["drafted_in_window"], [(svc, d["num_draft_tokens"])])
    tests += close_to(window["accepted_tokens"], [(svc, d["num_accepted_tokens"])])
    tests += close_to(window["drafts"], [(svc, d["num_drafts"])])
    ttft = facts["latency"]["ttft"]
    if ttft["window_count"]:
        tests += close_to(exprs["ttft_mean"], [(svc, ttft["mean"])])
    return tests, d


@pytest.mark.parametrize("case", ["healthy", "low", "borderline", "collapsed", "data_parallel"])
def test_figures_equal_the_two_scrape_figures(tmp_path, case):
    page = vp.real_page()
    traffic = {"healthy": vp.HEALTHY, "low": vp.LOW, "borderline": vp.BORDERLINE, "collapsed": vp.COLLAPSED,
               "data_parallel": vp.HEALTHY}[case]
    engines = None
    if case == "data_parallel":  # two engines with different traffic: every figure sums over `engine`
        page = vp.with_second_engine(page)
        engines = {"0": vp.HEALTHY, "1": vp.LOW}
    tests, derived = figure_tests(page, traffic, engines)
    if case == "data_parallel":
        assert derived["draft_acceptance_rate"] == pytest.approx((24 + 6) / (30 + 30))
    series = input_series(page, traffic, engines)
    proc = run_promtool(tmp_path, rule_for(), [{"interval": "1m", "input_series": series, "promql_expr_test": tests}])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def expected_annotations(rule: dict, alert: str, value: str, position: str | None = None) -> dict:
    rules = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    out = {}
    for key, text in rules[alert]["annotations"].items():
        text = text.replace("{{ $value | humanizePercentage }}", value)
        if position is not None:
            text = text.replace("{{ $labels.position }}", position)
        out[key] = text
    return out


def alert_labels(rule: dict, alert: str, **extra) -> dict:
    rules = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    return dict(rules[alert]["labels"], **SERVICE_LABELS, **extra)


ALERTS = ["SpecDecodeLowAcceptance", "SpecDecodeBorderlineAcceptance", "SpecDecodeMetricsMissing",
          "SpecDecodePositionCollapse"]


def alert_tests(rule, firing: dict) -> list[dict]:
    """alert_rule_test entries at 25m: `firing` maps alert name -> list of exp_alerts; others fire not."""
    return [{"eval_time": "25m", "alertname": name, "exp_alerts": firing.get(name, [])} for name in ALERTS]


def test_healthy_service_raises_no_alert(tmp_path):
    rule = rule_for()
    series = input_series(vp.real_page(), vp.HEALTHY)
    proc = run_promtool(tmp_path, rule, [{"interval": "1m", "input_series": series,
                                          "alert_rule_test": alert_tests(rule, {})}])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_low_acceptance_fires_with_its_value_and_the_collapsed_position(tmp_path):
    rule = rule_for()
    series = input_series(vp.real_page(), vp.LOW)
    firing = {
        "SpecDecodeLowAcceptance": [{
            "exp_labels": alert_labels(rule, "SpecDecodeLowAcceptance"),
            "exp_annotations": expected_annotations(rule, "SpecDecodeLowAcceptance", "20%")}],
        # positions 1 and 2 accept 1/10 and 0/10 of the drafts: only position 2 is below 0.05
        "SpecDecodePositionCollapse": [{
            "exp_labels": alert_labels(rule, "SpecDecodePositionCollapse", position="2"),
            "exp_annotations": expected_annotations(rule, "SpecDecodePositionCollapse", "0%", "2")}],
    }
    proc = run_promtool(tmp_path, rule, [{"interval": "1m", "input_series": series,
                                          "alert_rule_test": alert_tests(rule, firing)}])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_borderline_is_info_only(tmp_path):
    rule = rule_for()
    series = input_series(vp.real_page(), vp.BORDERLINE)
    firing = {"SpecDecodeBorderlineAcceptance": [{
        "exp_labels": alert_labels(rule, "SpecDecodeBorderlineAcceptance"),
        "exp_annotations": expected_annotations(rule, "SpecDecodeBorderlineAcceptance", "60%")}]}
    proc = run_promtool(tmp_path, rule, [{"interval": "1m", "input_series": series,
                                          "alert_rule_test": alert_tests(rule, firing)}])
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("traffic", [vp.IDLE, vp.Traffic(drafts=1, accepted_per_position=[0, 0, 0])],
                         ids=["idle", "too-few-drafts"])
def test_no_alert_without_enough_traffic(tmp_path, traffic):
    """Acceptance is not judged below min_draft_tokens drafted in the window (3/min x 15 = 45 < 200)."""
    rule = rule_for()
    series = input_series(vp.real_page(), traffic)
    proc = run_promtool(tmp_path, rule, [{"interval": "1m", "input_series": series,
                                          "alert_rule_test": alert_tests(rule, {})}])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_spec_metrics_missing_while_planned(tmp_path):
    """The engine is scraped (vllm:num_requests_running) but exports no spec series."""
    rule = rule_for()
    series = input_series(vp.without_spec_series(vp.real_page()), vp.IDLE)
    assert any(s["series"].startswith("vllm:num_requests_running{") for s in series)
    firing = {"SpecDecodeMetricsMissing": [{
        "exp_labels": alert_labels(rule, "SpecDecodeMetricsMissing"),
        "exp_annotations": expected_annotations(rule, "SpecDecodeMetricsMissing", "")}]}
    proc = run_promtool(tmp_path, rule, [{"interval": "1m", "input_series": series,
                                          "alert_rule_test": alert_tests(rule, firing)}])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_thresholds_move_the_alerts(tmp_path):
    """min_acceptance_rate 0.85: the healthy 0.8 service is now low."""
    rule = rule_for(min_acceptance_rate=0.85, warn_acceptance_rate=0.9)
    series = input_series(vp.real_page(), vp.HEALTHY)
    firing = {"SpecDecodeLowAcceptance": [{
        "exp_labels": alert_labels(rule, "SpecDecodeLowAcceptance"),
        "exp_annotations": expected_annotations(rule, "SpecDecodeLowAcceptance", "80%")}]}
    proc = run_promtool(tmp_path, rule, [{"interval": "1m", "input_series": series,
                                          "alert_rule_test": alert_tests(rule, firing)}])
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("version", ["0.6.3", "0.8.3", "0.8.5", "0.10.1", "0.11.0", "0.32.0", "0.33.0"])
def test_every_rendered_expression_is_valid_promql(tmp_path, version):
    """promtool check rules on the rule and on every dashboard query (as recording rules)."""
    out = sm.render("svc", "ml", version, {"method": "eagle3", "num_speculative_tokens": 3})
    groups = copy.deepcopy(out["prometheus_rule"]["spec"]["groups"])
    records = [{"record": "specpilot:check:%d" % i, "expr": t["expr"].replace("$__rate_interval", "5m")}
               for i, t in enumerate(t for p in out["dashboard"]["panels"] for t in p["targets"])]
    records += [{"record": "specpilot:expr:%s" % k, "expr": v} for k, v in out["expressions"].items()]
    groups.append({"name": "dashboard", "rules": records})
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": groups}))
    proc = subprocess.run([str(PROMTOOL), "check", "rules", "rules.yml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
