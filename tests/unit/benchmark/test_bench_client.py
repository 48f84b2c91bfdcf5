"""The streaming load generator (module_utils/bench_client.py) against benchmarks/stream_server.py."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import urllib.request

import pytest
from bench_helpers import ROOT, WORKLOADS, StreamServer

from ansible_collections.specpilot.core.plugins.module_utils import bench_analysis as ba
from ansible_collections.specpilot.core.plugins.module_utils import bench_client as bc

CLIENT = ROOT / "collections/ansible_collections/specpilot/core/plugins/module_utils/bench_client.py"
SPEC = json.dumps({"method": "ngram", "num_speculative_tokens": 3})


@pytest.fixture
def server(tmp_path):
    servers = []

    def start(*args):
        s = StreamServer(tmp_path, *args)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


def metric(url, name):
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


# ------------------------------------------------------------------ pure parts


def test_arrivals_are_seeded_and_paced():
    a = bc.arrival_offsets(2000, 5.0, "poisson", seed=7)
    assert a == bc.arrival_offsets(2000, 5.0, "poisson", seed=7)
    assert a != bc.arrival_offsets(2000, 5.0, "poisson", seed=8)
    assert a[0] == 0.0 and all(x <= y for x, y in zip(a, a[1:]))
    gaps = [y - x for x, y in zip(a, a[1:])]
    assert statistics.mean(gaps) == pytest.approx(0.2, rel=0.1)
    assert bc.arrival_offsets(4, 2.0, "constant") == [0.0, 0.5, 1.0, 1.5]
    assert bc.arrival_offsets(3, None) == [0.0, 0.0, 0.0]


def test_same_prompts_in_the_same_order_every_run():
    prompts = [{"id": "a"}, {"id": "b"}, {"id": "c"}]
    assert bc.request_order(prompts, 3) == [0, 1, 2, 0, 1, 2, 0, 1, 2]
    assert bc.request_order(prompts, 3, max_requests=4) == [0, 1, 2, 0]


def test_bundled_workloads_load(tmp_path):
    code = bc.load_workload(str(WORKLOADS / "code-edit.jsonl"))
    chat = bc.load_workload(str(WORKLOADS / "chat.jsonl"))
    assert len(code) >= 5 and len(chat) >= 5
    assert len({p["id"] for p in code}) == len(code)
    assert all(p["category"] == "code-edit" and "```" in p["prompt"] or "SQL" in p["prompt"] for p in code)
    f = tmp_path / "w.jsonl"
    f.write_text(
        '# comment\n\n"plain text prompt"\n{"messages": [{"role": "user", "content": "hi"}], "id": "m"}\n'
    )
    items = bc.load_workload(str(f))
    assert items[0] == {"prompt": "plain text prompt", "id": "p0"} and items[1]["id"] == "m"
    with pytest.raises(bc.RunConfigError, match="use api 'chat'"):
        bc.load_workload(str(f), api="completions")
    f.write_text('{"text": "x"}\n')
    with pytest.raises(bc.RunConfigError, match="'prompt' or a 'messages'"):
        bc.load_workload(str(f))
    f.write_text("{nope\n")
    with pytest.raises(bc.RunConfigError, match="not JSON"):
        bc.load_workload(str(f))


def test_config_validation():
    base = {"base_url": "http://x/", "prompts": ["a"]}
    cfg = bc.normalise_config(dict(base, qps="inf", concurrency=4))
    assert cfg["qps"] is None and cfg["level"]["key"] == "qps=inf,c=4"
    assert cfg["base_url"] == "http://x" and cfg["metrics_url"] == "http://x/metrics"
    assert bc.normalise_config(dict(base, qps=2, scrape_metrics=False))["metrics_url"] is None
    assert bc.normalise_config(dict(base, qps=0.5))["level"]["key"] == "qps=0.5"
    for bad in (
        {"qps": -1},
        {"concurrency": -1},
        {"concurrency": "x"},
        {"api": "embeddings"},
        {"arrival": "burst"},
        {"runs_per_prompt": 0},
        {"prompts": []},
        {"base_url": None},
    ):
        with pytest.raises(bc.RunConfigError):
            bc.normalise_config(dict(base, **bad))
    payload = bc.build_payload(
        bc.normalise_config(dict(base, sampling={"temperature": 0, "max_tokens": 9, "extra": {"top_k": 1}})),
        {"id": "p0", "prompt": "a", "max_tokens": 5},
    )
    assert payload == {
        "stream": True,
        "prompt": "a",
        "temperature": 0,
        "max_tokens": 5,
        "seed": 42,
        "stream_options": {"include_usage": True},
        "top_k": 1,
    }


# ------------------------------------------------------------------ against a streaming server


def test_paced_run_records_every_metric_and_discards_warmups(server):
    s = server(
        "--step-ms", "2", "--ttft-ms", "5", "--speculative-config", SPEC, "--served-model-name", "tiny"
    )
    res = bc.run_one(
        {
            "base_url": s.url,
            "prompts": ["one", "two", "three"],
            "runs_per_prompt": 3,
            "warmup_requests": 3,
            "qps": 50,
            "arrival": "constant",
            "sampling": {"temperature": 0, "max_tokens": 20},
            "progress_interval": 0,
        }
    )
    assert res["server"]["version"] == "0.32.0" and res["server"]["models"] == ["tiny"]
    assert res["config"]["model"] == "tiny"  # taken from /v1/models
    assert res["warmup"] == {"requests": 3, "ok": 3, "errors": []}
    reqs = res["requests"]
    assert len(reqs) == 9 and all(r["ok"] for r in reqs)
    assert [r["prompt_id"] for r in reqs] == ["p0", "p1", "p2"] * 3
    assert [r["run"] for r in reqs] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    # the server saw 3 warm-ups + 9 timed requests
    assert metric(s.url, "vllm:generation_tokens_total") == 12 * 20
    for r in reqs:
        assert r["output_tokens"] == 20 and r["token_source"] == "usage" and r["prompt_tokens"] == 8
        assert r["ttft_s"] >= 0.004
        assert r["e2e_s"] > r["ttft_s"]
        # 1 + 3 * 0.8 = 3.4 tokens per step: fewer chunks than tokens
        assert r["chunks"] < 20 and len(r["itl_s"]) == r["chunks"] - 1
        assert r["tpot_s"] == pytest.approx((r["e2e_s"] - r["ttft_s"]) / 19)
    # constant arrivals 20 ms apart
    assert [r["arrival_s"] for r in reqs][:3] == pytest.approx([0.0, 0.02, 0.04])
    assert all(r["start_s"] >= r["arrival_s"] - 1e-3 for r in reqs)
    assert res["duration_s"] >= 0.16
    # acceptance of the timed requests only (scraped after the warm-ups)
    acc = ba.acceptance_from_scrapes(res["metrics_before"], res["metrics_after"], model_name="tiny")
    assert acc["spec_decode_enabled"] and acc["num_drafts"] > 0
    assert acc["mean_acceptance_length"] == pytest.approx(3.4, abs=0.3)
    s0 = ba.summarise_run(res)
    assert s0["ok"] == 9 and s0["metrics"]["tpot_ms"]["p50"] > 0


def test_concurrency_limit_queues_requests(server):
    s = server("--step-ms", "5")
    res = bc.run_one(
        {
            "base_url": s.url,
            "prompts": ["a", "b"],
            "runs_per_prompt": 4,
            "warmup_requests": 0,
            "concurrency": 2,
            "sampling": {"max_tokens": 6},
            "progress_interval": 0,
        }
    )
    reqs = res["requests"]
    assert len(reqs) == 8 and all(r["ok"] for r in reqs)
    # all 8 arrive at 0; at most 2 run at once, so later ones queue
    assert all(r["arrival_s"] == 0.0 for r in reqs)
    queued = sorted(r["queue_s"] for r in reqs)
    assert queued[-1] > 0.05 and queued[1] < 0.02
    spans = [(r["start_s"], r["start_s"] + r["e2e_s"]) for r in reqs]
    for t, _ in spans:
        assert sum(1 for a, b in spans if a <= t + 1e-4 and b > t + 1e-3) <= 2


def test_chat_api_token_counting_fallbacks_and_progress(server):
    s = server("--step-ms", "1", "--tokens-per-step", "2")
    lines = []
    res = bc.run_one(
        {
            "base_url": s.url,
            "api": "chat",
            "prompts": [{"id": "c", "messages": [{"role": "user", "content": "hi"}]}],
            "runs_per_prompt": 3,
            "warmup_requests": 1,
            "concurrency": 1,
            "include_usage": False,
            "sampling": {"max_tokens": 9},
            "progress_interval": 0.01,
        },
        progress=lines.append,
    )
    r = res["requests"][0]
    # no usage chunk: one token per chunk is the fallback (the server sent 2 tokens per chunk)
    assert r["token_source"] == "chunks" and r["output_tokens"] == r["chunks"] == 5
    assert lines and lines[-1]["done"] == 3 and lines[-1]["total"] == 3


def test_server_ignoring_stream_and_http_errors_are_recorded(server):
    s = server("--ignore-stream")
    res = bc.run_one(
        {
            "base_url": s.url,
            "prompts": ["a"],
            "runs_per_prompt": 2,
            "warmup_requests": 0,
            "concurrency": 1,
            "sampling": {"max_tokens": 7},
            "progress_interval": 0,
        }
    )
    r = res["requests"][0]
    assert r["ok"] and r["output_tokens"] == 7 and r["ttft_s"] == r["e2e_s"] and r["itl_s"] == []
    # a wrong path: every request fails with the HTTP status, the run still completes
    res = bc.run_one(
        {
            "base_url": s.url + "/nope",
            "prompts": ["a"],
            "runs_per_prompt": 2,
            "warmup_requests": 1,
            "concurrency": 1,
            "progress_interval": 0,
            "scrape_metrics": False,
        }
    )
    assert res["warmup"]["ok"] == 0 and "HTTP 404" in res["warmup"]["errors"][0]
    assert all(not r["ok"] and r["status"] == 404 for r in res["requests"])
    assert res["server"]["errors"]
    # nothing listening
    res = bc.run_one(
        {
            "base_url": "http://127.0.0.1:9",
            "prompts": ["a"],
            "runs_per_prompt": 1,
            "warmup_requests": 0,
            "concurrency": 1,
            "progress_interval": 0,
        }
    )
    assert not res["requests"][0]["ok"] and "Connect" in res["requests"][0]["error"]
    assert res["metrics_errors"]


def test_script_mode_prints_the_result_between_markers(server, tmp_path):
    """The in-cluster Job runs the same file as a script; its log holds the result block."""
    s = server("--step-ms", "1")
    cfg = tmp_path / "runs.json"
    cfg.write_text(
        json.dumps(
            {
                "runs": [
                    {
                        "base_url": s.url,
                        "prompts": ["a", "b"],
                        "runs_per_prompt": 2,
                        "warmup_requests": 1,
                        "qps": 40,
                        "sampling": {"max_tokens": 4},
                        "label": "baseline qps=40",
                        "progress_interval": 0.05,
                    },
                    {
                        "base_url": s.url,
                        "prompts": ["a", "b"],
                        "runs_per_prompt": 2,
                        "warmup_requests": 1,
                        "concurrency": 2,
                        "sampling": {"max_tokens": 4},
                    },
                ]
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, str(CLIENT), "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    log = proc.stderr + proc.stdout  # a pod log interleaves both
    doc = bc.extract_job_output(log)
    assert [r["level"]["key"] for r in doc["runs"]] == ["qps=40", "qps=inf,c=2"]
    assert all(q["ok"] for r in doc["runs"] for q in r["requests"])
    assert "[specpilot-bench] baseline qps=40: 4/4 done" in proc.stderr
    with pytest.raises(bc.RunConfigError):
        bc.extract_job_output("no markers here")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"prompts": ["a"]}))
    proc = subprocess.run(
        [sys.executable, str(CLIENT), "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and "base_url is required" in proc.stderr
