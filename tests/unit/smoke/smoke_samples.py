"""Inputs of the smoke verdict built the way the role builds them: plans from the validator (lab
inventory specs), facts from the real log and metrics parsers, Kubernetes objects shaped like the
lab's (and KServe's)."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from ansible_collections.specpilot.core.plugins.module_utils.service import render
from ansible_collections.specpilot.core.plugins.module_utils.service.spec import assemble_from_vars
from ansible_collections.specpilot.core.plugins.module_utils.service.validator import validate
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_logs import parse_log_text
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_metrics import parse_metrics_text

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "vllm"
SHARED = ROOT.parent / "shared" / "reference"
CPU_RUN = SHARED / "vllm-cpu-lab-run" / "ngram"
LAB = ROOT / "inventories" / "lab"


def lab_vars(host: str, **changes) -> dict:
    with open(LAB / "group_vars" / "specpilot_services.yml") as fh:
        variables = yaml.safe_load(fh)
    with open(LAB / "host_vars" / f"{host}.yml") as fh:
        variables.update(yaml.safe_load(fh))
    for key, value in changes.items():
        variables["specpilot_" + key] = value
    return variables


def plan_for(host: str = "lab-ngram", **changes) -> dict:
    spec, _unknown = assemble_from_vars(lab_vars(host, **changes), host)
    result = validate(spec, {"read_local_files": False})
    assert result["ok"], result.get("report")
    return result["plan"]


def isvc_for(plan: dict, ready: bool = True, args: list[str] | None = None, message: str = "") -> dict:
    isvc = copy.deepcopy(plan.get("serving") or plan["inferenceservice"])  # the plan's kind's object
    if args is not None:
        isvc["spec"]["predictor"]["model"]["args"] = list(args)
    cond = (
        {"type": "Ready", "status": "True"}
        if ready
        else {"type": "Ready", "status": "False", "reason": "MinimumReplicasUnavailable", "message": message}
    )
    isvc["status"] = {
        "url": "http://127.0.0.1:40000",
        "address": {"url": "http://127.0.0.1:40000"},
        "conditions": [{"type": "IngressReady", "status": "True"}, cond],
    }
    return isvc


def pod_for(
    plan: dict,
    ready: bool = True,
    args: list[str] | None = None,
    restarts: int = 0,
    name: str = "svc-predictor-abc-xyz",
) -> dict:
    # as KServe makes it: the runtime's command and args, the InferenceService's args appended, {{.Name}}
    # replaced in the merged container
    runtime = ((plan.get("servingruntime") or {}).get("spec") or {}).get("containers") or [{}]
    command, runtime_args = runtime[0].get("command") or ["vllm", "serve"], runtime[0].get("args") or []
    model_args = render.in_pod(
        runtime_args + (plan["args"] if args is None else list(args)), plan["name"], plan["namespace"]
    )
    status = {
        "containerStatuses": [
            {
                "name": "kserve-container",
                "ready": ready,
                "restartCount": restarts,
                "state": {"running": {}} if ready else {"waiting": {"reason": "CrashLoopBackOff"}},
            }
        ],
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    return {
        "metadata": {
            "name": name,
            "namespace": plan["namespace"],
            "creationTimestamp": "2026-11-21T06:00:00Z",
        },
        "spec": {
            "containers": [
                {
                    "name": "kserve-container",
                    "command": command,
                    "args": model_args,
                }
            ]
        },
        "status": status,
    }


def metrics_page(
    model: str = "lab-ngram",
    drafts: int = 0,
    draft_tokens: int = 0,
    accepted: int = 0,
    per_pos: list[int] | tuple = (),
    spec: bool = True,
    created: float = 1795237666.9,
) -> str:
    """A vLLM 0.32 (V1) /metrics page with the spec-decode counters (when spec)."""
    lbl = f'engine="0",model_name="{model}"'
    lines = [
        "# HELP vllm:num_requests_running Number of requests running.",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{lbl}}} 0.0",
    ]

    def counter(name, value, extra=""):
        lines.extend(
            [
                f"# HELP {name}_total {name}",
                f"# TYPE {name}_total counter",
                f"{name}_total{{{lbl}{extra}}} {float(value)}",
                f"# HELP {name}_created {name}",
                f"# TYPE {name}_created gauge",
                f"{name}_created{{{lbl}{extra}}} {created}",
            ]
        )

    if spec:
        counter("vllm:spec_decode_num_drafts", drafts)
        counter("vllm:spec_decode_num_draft_tokens", draft_tokens)
        counter("vllm:spec_decode_num_accepted_tokens", accepted)
        lines += [
            "# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total per position",
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
        ]
        for i, v in enumerate(per_pos):
            lines.append(
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lbl},position="{i}"}} {float(v)}'
            )
    return "\n".join(lines) + "\n"


def metrics_pair(
    model="lab-ngram", drafts=0, draft_tokens=0, accepted=0, per_pos=(), spec=True, base=(10, 30, 20)
):
    """(before, after) metrics facts whose deltas are the given counts."""
    k = len(per_pos) or 3
    b_drafts, b_tokens, b_acc = base
    before = parse_metrics_text(
        metrics_page(model, b_drafts, b_tokens, b_acc, [b_acc // k] * k if spec else (), spec),
        model_name=model,
    )
    after = parse_metrics_text(
        metrics_page(
            model,
            b_drafts + drafts,
            b_tokens + draft_tokens,
            b_acc + accepted,
            [b_acc // k + v for v in per_pos] if spec else (),
            spec,
        ),
        model_name=model,
        previous=before,
    )
    return before, after


def log_text(
    plan: dict | None,
    windows: list[dict] = (),
    ready: bool = True,
    extra: str = "",
    served: str = "lab-ngram",
    version: str = "0.32.0",
) -> str:
    """A vLLM 0.32 log: non-default args, engine-init line (the plan's config or None), startup,
    a marker access line, then one SpecDecoding line per window {accepted, drafted, per_pos}."""
    cfg = (plan or {}).get("speculative_config")
    nondefault = {"model": "/mnt/models/target", "served_model_name": [served]}
    if cfg:
        nondefault["speculative_config"] = cfg
        k = cfg.get("num_speculative_tokens")
        method, model = cfg.get("method"), cfg.get("model")
        rep = f"SpeculativeConfig(method={method!r}, model={model!r}, num_spec_tokens={k})"
    else:
        rep = "None"
    lines = [
        f"(APIServer pid=7) INFO 11-21 06:00:00 [api_utils.py:286] non-default args: {nondefault!r}",
        f"(EngineCore pid=9) INFO 11-21 06:00:05 [core.py:133] Initializing a V1 LLM engine (v{version}) "
        f"with config: model='/mnt/models/target', speculative_config={rep}, tokenizer='/mnt/models/target', "
        f"served_model_name={served}, enable_prefix_caching=True",
        "INFO:     Started server process [7]",
        "INFO:     Waiting for application startup.",
    ]
    if ready:
        lines.append("INFO:     Application startup complete.")
    lines.append('INFO:     127.0.0.1:50000 - "GET /metrics HTTP/1.1" 200 OK')
    if extra:
        lines.append(extra)
    for i, w in enumerate(windows):
        drafts = w.get("drafts") or 10
        pos = ", ".join("%.3f" % p for p in w["per_pos"])
        lines.append(
            f"(APIServer pid=7) INFO 11-21 06:01:{10 + i:02d} [metrics.py:120] SpecDecoding metrics: "
            f"Mean acceptance length: {1 + w['accepted'] / drafts:.2f}, Accepted throughput: 1.00 tokens/s, "
            f"Drafted throughput: 1.00 tokens/s, Accepted: {w['accepted']} tokens, Drafted: {w['drafted']} "
            f"tokens, Per-position acceptance rate: {pos}, "
            f"Avg Draft acceptance rate: {100.0 * w['accepted'] / w['drafted']:.1f}%"
        )
    return "\n".join(lines) + "\n"


MARKER = 'INFO:     127.0.0.1:50000 - "GET /metrics HTTP/1.1" 200 OK'


def probes_ok(n: int = 8, tokens: int = 64) -> dict:
    results = [
        {
            "status": 200,
            "ok": True,
            "latency_s": 0.2,
            "completion_tokens": tokens,
            "prompt_tokens": 10,
            "finish_reason": "length",
            "text": "x",
            "error": None,
        }
        for _ in range(n)
    ]
    return {
        "format": 1,
        "url": "http://127.0.0.1:40000",
        "endpoint": "completions",
        "results": results,
        "requests": n,
        "succeeded": n,
        "failed": 0,
        "ok": True,
        "completion_tokens": n * tokens,
        "prompt_tokens": n * 10,
        "latency_mean_s": 0.2,
        "elapsed_s": 2.0,
        "metrics_before": "",
        "metrics_after": "",
        "metrics_error": None,
    }


def data_for(plan: dict, rate_counts=(27, 30, 10, (10, 9, 8)), windows=None, **over) -> dict:
    """Verdict inputs of a healthy run; rate_counts = (accepted, drafted tokens, drafts, per_pos)."""
    accepted, drafted, drafts, per_pos = rate_counts
    served = plan["name"]
    before, after = metrics_pair(served, drafts, drafted, accepted, per_pos)
    if windows is None:
        windows = [
            {
                "accepted": accepted,
                "drafted": drafted,
                "drafts": drafts,
                "per_pos": [v / drafts for v in per_pos],
            }
        ]
    text = log_text(plan, windows, served=served)
    data = {
        "service": plan["name"],
        "expect": "on",
        "plan": plan,
        "inferenceservice": isvc_for(plan),
        "pod": pod_for(plan),
        "log_facts": parse_log_text(log_text(plan, [], served=served)),
        "log_window": parse_log_text(text, since=MARKER),
        "metrics_before": before,
        "metrics_after": after,
        "probes": probes_ok(),
        "access": {"mode": "url", "url": "http://127.0.0.1:40000"},
        "request": {"prompts": ["p"], "count": 8, "max_tokens": 64, "temperature": 0.0, "request_params": {}},
        "thresholds": {},
    }
    data.update(over)
    return data
