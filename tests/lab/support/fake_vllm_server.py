"""A stand-in for ``python -m vllm.entrypoints.openai.api_server`` for fast controller tests.

Logs the lines the real engine logs (non-default args, the engine-init line with
``speculative_config=SpeculativeConfig(method=...``), refuses what vLLM refuses
(num_speculative_tokens < 1, a --model without config.json), serves /health (after
--fake-health-delay seconds, and once the file --fake-health-gate names exists), /v1/models, /v1/completions and /metrics (spec-decode
counters only with a speculative config). --fake-exit-code N --fake-exit-after S make it die.
"""

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# run as ``vllm serve [MODEL] [options]`` (the lab passes ``serve`` on) or as the module path (``--model``)
p = argparse.ArgumentParser()
p.add_argument("words", nargs="*")
p.add_argument("--model", default=None)
p.add_argument("--port", type=int, default=8000)
p.add_argument("--host", default="0.0.0.0")
p.add_argument("--served-model-name", default=None)
p.add_argument("--speculative-config", default=None)
p.add_argument("--fake-health-delay", type=float, default=0.0)
p.add_argument("--fake-health-gate", default=None)
p.add_argument("--fake-exit-code", type=int, default=None)
p.add_argument("--fake-exit-after", type=float, default=0.0)
args, unknown = p.parse_known_intermixed_args()
args.model = args.model or next((w for w in args.words if w != "serve"), "facebook/opt-125m")
name = args.served_model_name or args.model
print(
    f"(APIServer pid={os.getpid()}) INFO [api_utils.py:286] non-default args: "
    f"{json.dumps({'model': args.model, 'port': args.port, 'served_model_name': [name], 'rest': unknown})}",
    flush=True,
)
print(
    f"(APIServer pid={os.getpid()}) INFO env HF_HOME={os.environ.get('HF_HOME')} "
    f"CUSTOM={os.environ.get('CUSTOM_ENV', '')}",
    flush=True,
)
spec = json.loads(args.speculative_config) if args.speculative_config else None
if spec is not None and int(spec.get("num_speculative_tokens", 1)) < 1:
    print(
        'Traceback (most recent call last):\n  File "arg_utils.py", line 2099, in create_speculative_config'
    )
    print(
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig\n"
        "num_speculative_tokens\n  Input should be greater than 0 [type=greater_than, input_value="
        f"{spec['num_speculative_tokens']}, input_type=int]",
        flush=True,
    )
    sys.exit(1)
if not os.path.isfile(os.path.join(args.model, "config.json")):
    print(f"OSError: {args.model} does not appear to have a file named config.json.", flush=True)
    sys.exit(1)
method = spec.get("method") if spec else None
print(
    f"(EngineCore pid={os.getpid()}) INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
    f"model='{args.model}', speculative_config="
    + (
        f"SpeculativeConfig(method='{method}', model={spec.get('model')!r}, "
        f"num_spec_tokens={spec.get('num_speculative_tokens', 3)})"
        if spec
        else "None"
    ),
    flush=True,
)
started = time.time()
counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0}


class H(BaseHTTPRequestHandler):
    def _send(self, code, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            ok = time.time() - started >= args.fake_health_delay
            ok = ok and (args.fake_health_gate is None or os.path.exists(args.fake_health_gate))
            self._send(200 if ok else 503, "" if ok else "starting")
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [{"id": name, "object": "model"}]}))
        elif self.path == "/metrics":
            lines = [f'vllm:num_requests_running{{engine="0",model_name="{name}"}} 0.0']
            if spec:
                lbl = f'engine="0",model_name="{name}"'
                lines += [
                    f"vllm:spec_decode_num_drafts_total{{{lbl}}} {counters['drafts']}.0",
                    f"vllm:spec_decode_num_draft_tokens_total{{{lbl}}} {counters['draft_tokens']}.0",
                    f"vllm:spec_decode_num_accepted_tokens_total{{{lbl}}} {counters['accepted']}.0",
                ]
            self._send(200, "\n".join(lines) + "\n", "text/plain")
        else:
            self._send(404, "{}")

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        if spec:
            counters["drafts"] += 4
            counters["draft_tokens"] += 12
            counters["accepted"] += 10
        self._send(
            200,
            json.dumps(
                {
                    "object": "text_completion",
                    "model": name,
                    "choices": [{"index": 0, "text": " fake", "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "prompt": body.get("prompt")},
                }
            ),
        )

    def log_message(self, fmt, *a):
        print('INFO:     127.0.0.1 - "%s"' % (fmt % a), flush=True)


server = ThreadingHTTPServer((args.host, args.port), H)
print(
    f"(APIServer pid={os.getpid()}) INFO [entry.py:140] Starting vLLM server on http://{args.host}:{args.port}",
    flush=True,
)
if args.fake_exit_code is not None:

    def die():
        time.sleep(args.fake_exit_after)
        print(f"RuntimeError: fake engine failure (exit {args.fake_exit_code})", flush=True)
        os._exit(args.fake_exit_code)

    threading.Thread(target=die, daemon=True).start()
server.serve_forever()
