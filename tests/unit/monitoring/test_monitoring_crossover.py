"""Issue 37 item 6: the measured crossover in monitoring. The schedule a tuning run wrote
(num_speculative_tokens_per_batch_size) carries it - its last range with k > 0 ends at it and k = 0 runs
above - so the rendered PrometheusRule alerts when the busiest engine runs above it for a sustained window
(SpecDecodeAboveCrossover, promtool on vllm:num_requests_running series), and the share of time above it is
one PromQL expression the guard reads."""

from __future__ import annotations

import pytest
from test_monitoring_promtool import PROMTOOL, SERVICE, SERVICE_LABELS, labels_text, run_promtool

from ansible_collections.specpilot.core.plugins.module_utils.operate import monitoring as sm

NS = "lab"
SCHEDULE = {
    "method": "ngram",
    "num_speculative_tokens": 3,
    "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 4, 1], [5, 256, 0]],
}


@pytest.mark.parametrize(
    "speculative,crossover",
    [
        (SCHEDULE, {"concurrency": 4, "source": "num_speculative_tokens_per_batch_size"}),
        # speculation at every batch size of the table: no crossover was measured within it
        (
            {
                "method": "ngram",
                "num_speculative_tokens": 3,
                "num_speculative_tokens_per_batch_size": [[1, 256, 3]],
            },
            None,
        ),
        (
            {
                "method": "ngram",
                "num_speculative_tokens": 3,
                "num_speculative_tokens_per_batch_size": [[1, 256, 0]],
            },
            None,
        ),
        (
            {"method": "ngram", "num_speculative_tokens": 3, "disable_by_batch_size": 5},
            {"concurrency": 4, "source": "disable_by_batch_size"},
        ),
        ({"method": "ngram", "num_speculative_tokens": 3}, None),
        (None, None),
    ],
)
def test_the_crossover_is_what_the_speculative_config_carries(speculative, crossover):
    assert sm.crossover_of(speculative) == crossover


def test_render_adds_the_alert_and_the_share_only_with_a_crossover():
    out = sm.render(SERVICE, NS, "0.32.0", SCHEDULE)
    alerts = {r["alert"]: r for r in out["prometheus_rule"]["spec"]["groups"][0]["rules"]}
    assert out["crossover"]["concurrency"] == 4
    assert alerts["SpecDecodeAboveCrossover"]["expr"] == (
        'max by (model_name, namespace) (avg_over_time(vllm:num_requests_running{model_name="%s",'
        'namespace="lab"}[15m])) > 4' % SERVICE
    )
    assert out["expressions"]["above_crossover_share"] == (
        'max by (model_name, namespace) (avg_over_time((vllm:num_requests_running{model_name="%s",'
        'namespace="lab"} > bool 4)[15m:30s]))' % SERVICE
    )
    plain = sm.render(SERVICE, NS, "0.32.0", {"method": "ngram", "num_speculative_tokens": 3})
    assert plain["crossover"] is None and "above_crossover_share" not in plain["expressions"]
    assert "SpecDecodeAboveCrossover" not in {
        r["alert"] for r in plain["prometheus_rule"]["spec"]["groups"][0]["rules"]
    }


def running_series(values: str, engine: str = "0") -> dict:
    return {
        "series": 'vllm:num_requests_running{engine="%s",model_name="%s",namespace="%s"}'
        % (engine, SERVICE, NS),
        "values": values,
    }


@pytest.mark.skipif(
    not PROMTOOL.exists(), reason="promtool missing: run `make` (Debian prometheus, unpacked)"
)
def test_the_alert_fires_above_the_crossover_for_a_sustained_window_and_the_share_is_right(tmp_path):
    """Engine 0 runs 1 request for 15 minutes, then 6 (above 4); engine 1 runs 2 throughout. The busiest engine's
    15-minute average passes 4 at 24m, the alert fires 5 minutes later (at 30m with its value, 6); at 22m the
    busiest engine had been above the crossover at 15 of the subquery's 31 steps of 30 s (0.48 of the window). Running 3 (below 4) raises nothing.
    """
    out = sm.render(SERVICE, NS, "0.32.0", SCHEDULE)
    rule = out["prometheus_rule"]
    (alert,) = [r for r in rule["spec"]["groups"][0]["rules"] if r["alert"] == "SpecDecodeAboveCrossover"]
    busy = [running_series("1x14 6x16", "0"), running_series("2x30", "1")]
    share = out["expressions"]["above_crossover_share"]
    firing = [
        {
            "exp_labels": dict(alert["labels"], **SERVICE_LABELS),
            "exp_annotations": {
                k: v.replace("{{ $value | humanize }}", "6") for k, v in alert["annotations"].items()
            },
        }
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": busy,
            "alert_rule_test": [
                {"eval_time": "30m", "alertname": "SpecDecodeAboveCrossover", "exp_alerts": firing}
            ],
            "promql_expr_test": [
                {
                    "expr": "round(%s, 0.01)" % share,
                    "eval_time": "22m",
                    "exp_samples": [{"labels": labels_text(SERVICE_LABELS), "value": 0.48}],
                }
            ],
        },
        {
            "interval": "1m",
            "input_series": busy,
            "alert_rule_test": [
                {"eval_time": "27m", "alertname": "SpecDecodeAboveCrossover", "exp_alerts": []}
            ],
        },
        {
            "interval": "1m",
            "input_series": [running_series("3x30", "0")],
            "alert_rule_test": [
                {"eval_time": "30m", "alertname": "SpecDecodeAboveCrossover", "exp_alerts": []}
            ],
        },
    ]
    proc = run_promtool(tmp_path, rule, tests)
    assert proc.returncode == 0, proc.stdout + proc.stderr
