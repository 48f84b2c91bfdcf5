"""Issue 37 item 6: the guard reports the share of time a service ran above the crossover its live speculative
config carries (the schedule's last k > 0, monitoring.crossover_of): from scrapes, the share of this config's
readings whose vllm:num_requests_running was above it; from Prometheus, monitoring's share expression."""

from __future__ import annotations

import json

import pytest
from test_guard_logic import NGRAM, CannedPrometheus, isvc, reading

import vllm_pages as vp
from ansible_collections.specpilot.core.plugins.module_utils.operate import acceptance_guard as g

SCHEDULED = dict(NGRAM, num_speculative_tokens_per_batch_size=[[1, 2, 3], [3, 4, 0]])
ON_SCHEDULE = isvc(["--model=/m", "--speculative-config=" + json.dumps(SCHEDULED)])


def with_running(value):
    return dict(reading(vp.HEALTHY), running=value)


def test_scrape_readings_give_the_share_of_readings_above_the_crossover():
    history = None
    for running in (1.0, 3.0, 4.0, 2.0):
        out = g.evaluate(ON_SCHEDULE, with_running(running), history, {"min_draft_tokens": 20}, now=0)
        history = out["history_json"]
    assert [e["run"] for e in out["history"]] == [1.0, 3.0, 4.0, 2.0]
    assert out["load"] == {
        "crossover": 2,
        "source": "num_speculative_tokens_per_batch_size",
        "share_above": 0.5,
        "basis": "of 4 reading(s) of vllm:num_requests_running",
        "text": "above its crossover of 2 concurrent requests 50% of 4 reading(s) of vllm:num_requests_running",
    }
    assert out["message"].endswith(
        "; above its crossover of 2 concurrent requests 50% of 4 reading(s) of " "vllm:num_requests_running"
    )


def test_a_new_config_counts_its_own_readings_only():
    first = g.evaluate(ON_SCHEDULE, with_running(4.0), None, {"min_draft_tokens": 20}, now=0)
    other = isvc(
        [
            "--model=/m",
            "--speculative-config="
            + json.dumps(dict(NGRAM, num_speculative_tokens_per_batch_size=[[1, 4, 3], [5, 8, 0]])),
        ]
    )
    out = g.evaluate(other, with_running(4.0), first["history_json"], {"min_draft_tokens": 20}, now=0)
    assert out["load"]["crossover"] == 4 and out["load"]["share_above"] == 0.0


@pytest.mark.parametrize(
    "obj",
    [isvc(["--model=/m", "--speculative-config=" + json.dumps(NGRAM)]), isvc(["--model=/m"])],
    ids=["no-schedule", "off"],
)
def test_without_a_crossover_there_is_no_load_figure(obj):
    out = g.evaluate(obj, with_running(9.0), None, {"min_draft_tokens": 20}, now=0)
    assert out["load"] is None and "crossover" not in out["message"]


class SharePrometheus(CannedPrometheus):
    """The canned API, answering the share expression too."""

    def __call__(self, url, headers, timeout, validate_certs):
        import urllib.parse

        expr = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)["query"][0]
        if "> bool 2)[15m:30s]" in expr:
            self.queries.append(expr)
            data = {
                "resultType": "vector",
                "result": [{"metric": {"namespace": "ml", "model_name": "svc"}, "value": [0, "0.25"]}],
            }
            return json.dumps({"status": "success", "data": data}).encode()
        return super().__call__(url, headers, timeout, validate_certs)


def test_prometheus_gives_the_share_of_the_window():
    fake = SharePrometheus(vp.HEALTHY)
    r = g.prometheus_reading(
        "http://prom:9090",
        {"namespace": "ml", "model_name": "svc"},
        "15m",
        "0.32.0",
        fetch=fake,
        at=1.0,
        crossover=2,
    )
    assert r["above_crossover"] == 0.25
    out = g.evaluate(ON_SCHEDULE, r, None, {})
    assert out["load"]["share_above"] == 0.25 and out["load"]["basis"] == "of the last 15m (Prometheus)"
    assert "above its crossover of 2 concurrent requests 25% of the last 15m (Prometheus)" in out["message"]
