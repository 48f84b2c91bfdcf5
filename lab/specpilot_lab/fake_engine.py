"""The lab's stand-in for ``vllm serve`` (vLLM 0.32 V1), for fast
tests through the lab controller: the log lines the smoke role reads (non-default args, the
engine-init line, ``Application startup complete.``, uvicorn access lines, ``SpecDecoding metrics:``
windows) and a Prometheus /metrics page with the V1 spec-decode counters.

Behaviour comes from the environment (the InferenceService's env):
FAKE_ACCEPTANCE   per-position acceptance, e.g. "0.9,0.8,0.7" (default 0.95 ... for k positions)
FAKE_LOG_INTERVAL seconds between log windows (default 1)
FAKE_NO_SPEC_METRICS=1  run with a speculative config but export no vllm:spec_decode_* series
and at run time from ``POST /fake/config`` ({"acceptance": [...], "no_spec_metrics": bool}), so that
a test can change them without a rollout.

The lab runs it instead of vLLM when the controller is started with ``--engine fake``
(``SPECPILOT_LAB_ENGINE=fake``): the roles' runs through the lab in seconds where the engine
itself is not under test (molecule's deploy, smoke and rollback scenarios). It is not vLLM: it
loads no model and refuses only what vLLM refuses before it serves (a model directory without
config.json, num_speculative_tokens < 1), so what only the real engine can prove (its other errors,
its acceptance) is proven with ``--engine vllm``, the default.
"""

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# run as ``vllm serve [MODEL] [options]`` (the lab's wrapper passes ``serve`` on) or as the module path
# (``--model``): the model is --model, else vllm serve's positional argument, wherever it stands
p = argparse.ArgumentParser()
p.add_argument("words", nargs="*")
p.add_argument("--model", default=None)
p.add_argument("--port", type=int, default=8080)
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--served-model-name", default=None)
p.add_argument("--speculative-config", default=None)
p.add_argument("--data-parallel-size", type=int, default=1)
args, _unknown = p.parse_known_intermixed_args()
args.model = args.model or next((w for w in args.words if w != "serve"), "/mnt/models")
PID = os.getpid()
NAME = args.served_model_name or args.model
SPEC = json.loads(args.speculative_config) if args.speculative_config else None
K = int((SPEC or {}).get("num_speculative_tokens") or 3)
RATES = [float(x) for x in os.environ.get("FAKE_ACCEPTANCE", "").split(",") if x.strip()] or [
    max(0.0, 0.95 - 0.05 * i) for i in range(K)
]
RATES = (RATES + [RATES[-1]] * K)[:K]
INTERVAL = float(os.environ.get("FAKE_LOG_INTERVAL", "1"))
NO_SPEC_METRICS = os.environ.get("FAKE_NO_SPEC_METRICS") == "1"
LOCK = threading.Lock()
TOTAL = {
    "drafts": 0,
    "draft_tokens": 0,
    "accepted": 0,
    "per_pos": [0] * K,
    "gen": 0,
    "requests": 0,
    "e2e_sum": 0.0,
}
WINDOW = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": [0] * K}
CREATED = time.time()
RUNNING = [0]  # requests being answered: vllm:num_requests_running


def stamp():
    return time.strftime("%m-%d %H:%M:%S")


def log(proc, level, where, msg):
    print("(%s pid=%d) %s %s [%s] %s" % (proc, PID, level, stamp(), where, msg), flush=True)


# What vLLM refuses before it serves, refused the same way (a client sees the exit code and the log):
# a model directory without config.json (transformers' OSError), num_speculative_tokens < 1.
for model_dir in [args.model] + ([SPEC["model"]] if SPEC and SPEC.get("model") else []):
    if os.path.isabs(model_dir) and not os.path.isfile(os.path.join(model_dir, "config.json")):
        print("OSError: %s does not appear to have a file named config.json." % model_dir, flush=True)
        sys.exit(1)
if SPEC and int(SPEC.get("num_speculative_tokens", 1)) < 1:
    # vLLM 0.32's SpeculativeConfig declares num_speculative_tokens with gt=0 (pydantic's message)
    print(
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig\n"
        "num_speculative_tokens\n  Input should be greater than 0 [type=greater_than, input_value="
        "%s, input_type=int]" % SPEC["num_speculative_tokens"],
        flush=True,
    )
    sys.exit(1)

nondefault = {"model_tag": args.model, "port": args.port, "model": args.model, "served_model_name": [NAME]}
if SPEC:
    nondefault["speculative_config"] = SPEC
log("APIServer", "INFO", "api_utils.py:286", "non-default args: %r" % (nondefault,))
if SPEC and SPEC.get("method") in ("ngram", "suffix"):
    log(
        "APIServer",
        "WARNING",
        "vllm.py:1605",
        "Async scheduling not supported with %s-based speculative decoding "
        "and will be disabled." % SPEC["method"],
    )
if SPEC and SPEC.get("num_speculative_tokens_per_batch_size") and args.data_parallel_size > 1:
    # vLLM 0.32 vllm/config/vllm.py VllmConfig._maybe_disable_dynamic_sd_for_data_parallel
    log(
        "APIServer",
        "WARNING",
        "vllm.py:1066",
        "Dynamic speculative decoding is not supported with data parallelism because data-parallel ranks "
        "can select different speculative-token counts, causing DP divergence and deadlocks. Disabling "
        "num_speculative_tokens_per_batch_size and falling back to static num_speculative_tokens=%d." % K,
    )
if SPEC:
    spec_repr = "SpeculativeConfig(method=%r, model=%r, num_spec_tokens=%d)" % (
        SPEC.get("method"),
        SPEC.get("model"),
        K,
    )
else:
    spec_repr = "None"
log(
    "EngineCore",
    "INFO",
    "core.py:133",
    "Initializing a V1 LLM engine (v0.32.0) with config: model=%r, "
    "speculative_config=%s, tokenizer=%r, skip_tokenizer_init=False, dtype=torch.float32, max_seq_len=512, "
    "tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=%d, seed=0, served_model_name=%s, "
    "enable_prefix_caching=True" % (args.model, spec_repr, args.model, args.data_parallel_size, NAME),
)
if SPEC:
    log(
        "Worker",
        "WARNING",
        "__init__.py:211",
        "min_p and logit_bias parameters won't work with speculative decoding.",
    )
print("INFO:     Started server process [%d]" % PID, flush=True)
print("INFO:     Waiting for application startup.", flush=True)
print("INFO:     Application startup complete.", flush=True)


def account(max_tokens):
    """Drafts and accepted tokens of one request at the configured per-position rates."""
    if not SPEC:
        return
    mean = sum(RATES)
    drafts = max(1, int(round(max_tokens / (1.0 + mean))))
    per_pos = [int(round(drafts * r)) for r in RATES]
    with LOCK:
        for d in (TOTAL, WINDOW):
            d["drafts"] += drafts
            d["draft_tokens"] += drafts * K
            d["accepted"] += sum(per_pos)
            d["per_pos"] = [a + b for a, b in zip(d["per_pos"], per_pos)]


def logger_loop():
    while True:
        time.sleep(INTERVAL)
        with LOCK:
            w = dict(WINDOW, per_pos=list(WINDOW["per_pos"]))
            WINDOW.update(drafts=0, draft_tokens=0, accepted=0, per_pos=[0] * K)
        if not w["drafts"]:
            continue
        log(
            "APIServer",
            "INFO",
            "loggers.py:335",
            "Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 20.0 tokens/s, "
            "Running: 0 reqs, Waiting: 0 reqs, CPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%",
        )
        pos = ", ".join("%.3f" % (a / w["drafts"]) for a in w["per_pos"])
        log(
            "APIServer",
            "INFO",
            "metrics.py:120",
            "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, "
            "Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, "
            "Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%"
            % (
                1 + w["accepted"] / w["drafts"],
                w["accepted"] / INTERVAL,
                w["draft_tokens"] / INTERVAL,
                w["accepted"],
                w["draft_tokens"],
                pos,
                100.0 * w["accepted"] / w["draft_tokens"],
            ),
        )


def metrics_page():
    lbl = 'engine="0",model_name="%s"' % NAME
    out = []

    def counter(name, help_, value, extra=""):
        out.append("# HELP %s_total %s" % (name, help_))
        out.append("# TYPE %s_total counter" % name)
        out.append("%s_total{%s%s} %s" % (name, lbl, extra, float(value)))
        out.append("# HELP %s_created %s" % (name, help_))
        out.append("# TYPE %s_created gauge" % name)
        out.append("%s_created{%s%s} %s" % (name, lbl, extra, CREATED))

    with LOCK:
        t = dict(TOTAL, per_pos=list(TOTAL["per_pos"]))
    out.append("# HELP vllm:num_requests_running Number of requests in model execution batches.")
    out.append("# TYPE vllm:num_requests_running gauge")
    out.append("vllm:num_requests_running{%s} %s" % (lbl, float(RUNNING[0])))
    counter("vllm:generation_tokens", "Number of generation tokens processed.", t["gen"])
    # every request ends at its max_tokens (vLLM 0.32: finished_reason "length"); the canary counts them per arm
    counter("vllm:request_success", "Count of successfully processed requests.", t["requests"], ',finished_reason="length"')
    out.append("# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.")
    out.append("# TYPE vllm:e2e_request_latency_seconds histogram")
    out.append('vllm:e2e_request_latency_seconds_bucket{%s,le="+Inf"} %s' % (lbl, float(t["requests"])))
    out.append("vllm:e2e_request_latency_seconds_count{%s} %s" % (lbl, float(t["requests"])))
    out.append("vllm:e2e_request_latency_seconds_sum{%s} %s" % (lbl, t["e2e_sum"]))
    if SPEC and not NO_SPEC_METRICS:
        counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", t["drafts"])
        counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", t["draft_tokens"])
        counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", t["accepted"])
        out.append(
            "# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position."
        )
        out.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
        for i, v in enumerate(t["per_pos"]):
            out.append(
                'vllm:spec_decode_num_accepted_tokens_per_pos_total{%s,position="%d"} %s' % (lbl, i, float(v))
            )
    return "\n".join(out) + "\n"


class Handler(BaseHTTPRequestHandler):
    def _send(self, code, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self._send(200, "")
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [{"id": NAME, "object": "model"}]}))
        elif self.path == "/metrics":
            self._send(200, metrics_page(), "text/plain; version=0.0.4")
        else:
            self._send(404, "{}")

    def do_POST(self):
        global RATES, NO_SPEC_METRICS
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        if self.path == "/fake/config":
            if "acceptance" in body:
                RATES = ([float(x) for x in body["acceptance"]] + [float(body["acceptance"][-1])] * K)[:K]
            if "no_spec_metrics" in body:
                NO_SPEC_METRICS = bool(body["no_spec_metrics"])
            self._send(200, json.dumps({"acceptance": RATES, "no_spec_metrics": NO_SPEC_METRICS}))
            return
        if body.get("model") != NAME:
            self._send(
                404, json.dumps({"error": {"message": "The model `%s` does not exist." % body.get("model")}})
            )
            return
        t0 = time.time()
        max_tokens = int(body.get("max_tokens") or 16)
        with LOCK:
            RUNNING[0] += 1
        account(max_tokens)
        time.sleep(0.01)
        with LOCK:
            RUNNING[0] -= 1
            TOTAL["gen"] += max_tokens
            TOTAL["requests"] += 1
            TOTAL["e2e_sum"] += time.time() - t0
        text = " tok" * max_tokens
        self._send(
            200,
            json.dumps(
                {
                    "object": "text_completion",
                    "model": NAME,
                    "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
                    "usage": {
                        "prompt_tokens": 8,
                        "completion_tokens": max_tokens,
                        "total_tokens": 8 + max_tokens,
                    },
                }
            ),
        )

    def log_message(self, fmt, *a):
        print(
            'INFO:     %s - "%s" %s'
            % (
                self.client_address[0] + ":" + str(self.client_address[1]),
                self.requestline,
                a[1] if len(a) > 1 else "",
            ),
            flush=True,
        )


threading.Thread(target=logger_loop, daemon=True).start()
ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()
sys.exit(0)
