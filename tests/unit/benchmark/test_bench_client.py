"""The streaming load generator (module_utils/benchmark/bench_client.py) against benchmarks/stream_server.py."""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import sys
import urllib.request

import pytest
from bench_helpers import ROOT, WORKLOADS, StreamServer, run_tasks

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_analysis as ba
from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_client as bc
from ansible_collections.specpilot.core.plugins.module_utils.benchmark import bench_load

CLIENT = ROOT / "collections/ansible_collections/specpilot/core/plugins/module_utils/benchmark/bench_client.py"
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


def sha(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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
    # the output-equivalence and client-CPU facts travel in the Job's result too
    assert all(q["text_sha256"] == sha(" tok" * 4) for r in doc["runs"] for q in r["requests"])
    assert all(q["text_head"] == " tok" * 4 for r in doc["runs"] for q in r["requests"])
    for r in doc["runs"]:
        assert r["client_cpu_s"] >= 0
        assert r["client_cpu_share"] == pytest.approx(r["client_cpu_s"] / r["duration_s"])
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


# ------------------------------------------------------------------ output text and client CPU


@pytest.mark.parametrize(
    "api,args",
    [
        ("completions", ("--step-ms", "1", "--speculative-config", SPEC)),  # 3.4 tokens per chunk
        ("chat", ("--step-ms", "1", "--tokens-per-step", "2")),
        ("completions", ("--ignore-stream",)),  # one JSON body: choices[0].text
        ("chat", ("--ignore-stream",)),  # one JSON body: choices[0].message.content
    ],
)
def test_requests_record_the_hash_and_head_of_their_whole_output(server, api, args):
    """text_sha256 hashes the whole output in order (every chunk), text_head keeps 80 characters."""
    s = server(*args)
    res = bc.run_one(
        {
            "base_url": s.url,
            "api": api,
            "prompts": ["a", "b"],
            "runs_per_prompt": 2,
            "warmup_requests": 1,
            "concurrency": 2,
            "sampling": {"max_tokens": 30},
            "progress_interval": 0,
        }
    )
    expected = " tok" * 30  # what the fake server generates: 120 characters
    reqs = res["requests"]
    assert len(reqs) == 4 and all(r["ok"] for r in reqs)
    for r in reqs:
        assert r["text_sha256"] == sha(expected)
        assert r["text_head"] == expected[:80] and len(r["text_head"]) == 80
    if "--ignore-stream" not in args:
        assert all(r["chunks"] > 1 for r in reqs)


def test_chunk_text_of_every_kind_is_hashed():
    assert bc._chunk_output({"text": "ab", "finish_reason": None}, "completions") == (True, None, None, "ab")
    assert bc._chunk_output({"text": None}, "completions")[::3] == (False, "")
    assert bc._chunk_output({"delta": {"reasoning_content": "think"}}, "chat")[3] == "think"
    assert bc._chunk_output({"delta": {"reasoning": "r"}}, "chat")[3] == "r"
    assert bc._chunk_output({"delta": {"role": "assistant"}}, "chat")[::3] == (False, "")
    msg = {"message": {"role": "assistant", "reasoning_content": "why. ", "content": "answer"}}
    assert bc._reply_text(msg, "chat") == "why. answer"
    assert bc._reply_text({"message": {"content": None}}, "chat") == ""
    assert bc._reply_text({"text": "x"}, "completions") == "x"


def test_failed_requests_carry_no_text_fields(server):
    s = server()
    res = bc.run_one(
        {
            "base_url": s.url + "/nope",
            "prompts": ["a"],
            "runs_per_prompt": 1,
            "warmup_requests": 0,
            "concurrency": 1,
            "progress_interval": 0,
            "scrape_metrics": False,
        }
    )
    r = res["requests"][0]
    assert not r["ok"] and "text_sha256" not in r and "text_head" not in r


def test_run_records_the_client_cpu_time_of_the_timed_window(server, monkeypatch):
    s = server("--step-ms", "20")
    cpu = iter([100.0, 101.5])  # process_time is read once before and once after the timed window
    monkeypatch.setattr(bc.time, "process_time", lambda: next(cpu))
    res = bc.run_one(
        {
            "base_url": s.url,
            "prompts": ["a"],
            "runs_per_prompt": 2,
            "warmup_requests": 1,
            "concurrency": 1,
            "sampling": {"max_tokens": 3},
            "progress_interval": 0,
        }
    )
    assert res["duration_s"] >= 0.08  # 2 requests x 2 steps of 20 ms
    assert res["client_cpu_s"] == pytest.approx(1.5)
    assert res["client_cpu_share"] == pytest.approx(1.5 / res["duration_s"])
    monkeypatch.undo()
    res = bc.run_one(
        {
            "base_url": s.url,
            "prompts": ["a"],
            "runs_per_prompt": 1,
            "warmup_requests": 0,
            "concurrency": 1,
            "sampling": {"max_tokens": 3},
            "progress_interval": 0,
        }
    )
    assert 0 <= res["client_cpu_s"] <= res["duration_s"] * (os.cpu_count() or 1) + 0.05


def test_vllm_load_finish_carries_cpu_tag_and_request_fields():
    raw = {
        "level": {"qps": None, "concurrency": 2, "key": "qps=inf,c=2"},
        "label": "x",
        "duration_s": 2.0,
        "client_cpu_s": 0.5,
        "client_cpu_share": 0.25,
        "config": {"model": "tiny"},
        "requests": [
            {
                "index": 0,
                "prompt_id": "p0",
                "run": 0,
                "ok": True,
                "error": None,
                "ttft_s": 0.01,
                "e2e_s": 0.1,
                "itl_s": [0.01],
                "tpot_s": 0.01,
                "output_tokens": 10,
                "token_source": "usage",
                "queue_s": 0.0,
                "text_sha256": sha("hi"),
                "text_head": "hi",
            }
        ],
    }
    tag = {"sweep": "temperature", "temperature": 0.4}
    p = {"side": "speculative", "return_requests": True, "tag": tag}
    (run,) = bench_load.finish([raw], p)
    assert run["client_cpu_s"] == 0.5 and run["client_cpu_share"] == 0.25
    assert run["tag"] == tag
    assert run["requests"][0]["text_sha256"] == sha("hi") and run["requests"][0]["text_head"] == "hi"
    (run,) = bench_load.finish([dict(raw, client_cpu_s=None, client_cpu_share=None)], dict(p, tag=None))
    assert run["tag"] is None and run["client_cpu_share"] is None and "requests" in run


def test_vllm_load_module_returns_tag_cpu_and_text_fields(server, tmp_path):
    """Through ansible-playbook: the tag option is accepted and copied into every run, from the
    controller and from a Job's output alike; return_requests keeps the text fields."""
    s = server("--step-ms", "1")
    tag = {"sweep": "temperature", "temperature": 0.4}
    job_run = bc.run_one(
        {
            "base_url": s.url,
            "prompts": ["a"],
            "runs_per_prompt": 1,
            "warmup_requests": 0,
            "concurrency": 1,
            "sampling": {"max_tokens": 5},
            "progress_interval": 0,
        }
    )
    job_log = "progress\n%s\n%s\n%s\n" % (
        bc.BEGIN_MARKER,
        json.dumps({"format": 1, "runs": [job_run]}),
        bc.END_MARKER,
    )
    results, _log = run_tasks(
        tmp_path,
        [
            {
                "specpilot.core.vllm_load": {
                    "url": s.url,
                    "prompts": ["a", "b"],
                    "runs_per_prompt": 1,
                    "warmup_requests": 1,
                    "levels": [{"qps": None, "concurrency": 2}, {"concurrency": 1}],
                    "temperature": 0.4,
                    "max_tokens": 6,
                    "side": "speculative",
                    "tag": tag,
                    "return_requests": True,
                    "output_path": str(tmp_path / "sweep-0.json"),
                }
            },
            {"specpilot.core.vllm_load": {"job_output": job_log, "side": "baseline", "tag": {"n": 1}}},
        ],
    )
    ctl, job = results
    assert not ctl.get("failed") and not job.get("failed"), (ctl, job)
    assert [r["tag"] for r in ctl["runs"]] == [tag, tag]
    for r in ctl["runs"]:
        assert r["config"]["sampling"]["temperature"] == 0.4
        assert r["client_cpu_s"] >= 0
        assert r["client_cpu_share"] == pytest.approx(r["client_cpu_s"] / r["duration_s"])
        assert [q["text_sha256"] for q in r["requests"]] == [sha(" tok" * 6)] * 2
        assert [q["text_head"] for q in r["requests"]] == [" tok" * 6] * 2
    assert json.loads((tmp_path / "sweep-0.json").read_text())["tag"] == tag
    (jr,) = job["runs"]
    assert jr["tag"] == {"n": 1} and jr["client_cpu_s"] == job_run["client_cpu_s"]
    assert jr["client_cpu_share"] == job_run["client_cpu_share"]
    assert "requests" not in jr  # without return_requests


def test_output_text_keeps_the_hash_of_everything_and_80_characters():
    out = bc._OutputText()
    pieces = ["é" * 50, "", None, "x" * 50, "tail"]
    for piece in pieces:
        out.add(piece)
    whole = "é" * 50 + "x" * 50 + "tail"
    assert out.fields() == {"text_sha256": sha(whole), "text_head": whole[:80]}
    assert bc._OutputText().fields() == {"text_sha256": sha(""), "text_head": ""}
