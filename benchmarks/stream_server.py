"""A small OpenAI-style streaming server for the load generator's tests and benchmarks.

Standard library only (asyncio streams, HTTP/1.1 keep-alive, chunked Server-Sent Events).
It answers what ``specpilot.core`` bench_client asks a vLLM server:

* ``POST /v1/completions`` and ``/v1/chat/completions``, streamed (``stream: true``, with the
  final usage chunk when ``stream_options.include_usage``) or as one JSON body;
* ``GET /health``, ``/version``, ``/v1/models``, ``/metrics`` (Prometheus text with vLLM's
  speculative-decoding counters when started with ``--speculative-config``).

Timing model (all optional, default: as fast as it can): the first chunk after ``--ttft-ms``,
then one decode *step* every ``--step-ms``, each step emitting ``--tokens-per-step`` tokens
(1 without a speculative config; a speculative config defaults it to 1 + its acceptance).
``--contention`` stretches every step by that fraction per other request in flight, and
``--spec-step-cost`` is the relative cost of a speculative step, so a "speculative" server
can be faster at low concurrency and slower at high concurrency, like the real thing.
``--starve-above N`` plays an API server starved of CPU: a request that starts while more than
N others are in flight gets its whole output in one burst at the end (what the benchmark saw
on a 2-core lab at qps=4: TPOT 0.01 ms, TTFT 1.7 s), so validity checks can be tested.

Run: ``python benchmarks/stream_server.py --port 0 --ready-file F`` (the port is written to F).
Unknown vLLM arguments (``--model``, ``--dtype``...) are accepted and ignored, so the lab
controller can start it in place of ``python -m vllm.entrypoints.openai.api_server``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time


def _bounds(text):
    return [float(x) for x in text.split()]


# vLLM 0.32's histogram buckets (tests/data/vllm/lab_0.32.0/*/metrics.txt), seconds
_PER_TOKEN = _bounds(
    "0.01 0.025 0.05 0.075 0.1 0.15 0.2 0.3 0.4 0.5 0.75 1.0 2.5 5.0 7.5 10.0 20.0 40.0 80.0"
)
BUCKETS = {
    "vllm:time_to_first_token_seconds": _bounds(
        "0.001 0.005 0.01 0.02 0.04 0.06 0.08 0.1 0.25 0.5 0.75 1.0 2.5 5.0 7.5 10.0 20.0 40.0 80.0 160.0 640.0 2560.0"
    ),
    "vllm:inter_token_latency_seconds": _PER_TOKEN,
    "vllm:request_time_per_output_token_seconds": _PER_TOKEN,
    "vllm:e2e_request_latency_seconds": _bounds(
        "0.3 0.5 0.8 1.0 1.5 2.0 2.5 5.0 10.0 15.0 20.0 30.0 40.0 50.0 60.0 120.0 240.0 480.0 960.0 1920.0 7680.0"
    ),
}
HIST = dict((name, {"buckets": [0] * len(b), "count": 0, "sum": 0.0}) for name, b in BUCKETS.items())

STATE = {
    "in_flight": 0,
    "requests": 0,
    "drafts": 0,
    "draft_tokens": 0,
    "accepted": 0,
    "gen_tokens": 0,
    "per_pos": [],
    "finished": 0,
}


def observe(name, value):
    """One observation of a vLLM histogram (cumulative buckets, as prometheus_client keeps them)."""
    h = HIST[name]
    h["count"] += 1
    h["sum"] += value
    for i, le in enumerate(BUCKETS[name]):
        if value <= le:
            h["buckets"][i] += 1


def _observe_request(t0, first, last, n, gaps):
    """What vLLM records when a request finishes (v1/metrics/stats.py: TTFT, the inter-token
    gaps, the request's TPOT, E2E) and request_success{finished_reason="length"}."""
    observe("vllm:time_to_first_token_seconds", first - t0)
    for gap in gaps:
        observe("vllm:inter_token_latency_seconds", gap)
    observe("vllm:request_time_per_output_token_seconds", (last - first) / (n - 1) if n > 1 else 0.0)
    observe("vllm:e2e_request_latency_seconds", last - t0)
    STATE["finished"] += 1


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ready-file", default=None)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--model", default="fake-model")
    p.add_argument("--speculative-config", default=None)
    p.add_argument("--version-string", default="0.32.0")
    p.add_argument("--tokens", type=int, default=16, help="output tokens when the request has no max_tokens")
    p.add_argument("--ttft-ms", type=float, default=0.0)
    p.add_argument("--step-ms", type=float, default=0.0)
    p.add_argument("--tokens-per-step", type=float, default=None)
    p.add_argument("--spec-step-cost", type=float, default=1.0)
    p.add_argument("--contention", type=float, default=0.0)
    p.add_argument("--starve-above", type=int, default=None)
    p.add_argument(
        "--ignore-stream", action="store_true", help="answer with one JSON body even when asked to stream"
    )
    args, _unknown = p.parse_known_args(argv)
    args.spec = json.loads(args.speculative_config) if args.speculative_config else None
    if args.tokens_per_step is None:
        args.tokens_per_step = 1.0
        if args.spec:
            args.tokens_per_step = 1.0 + 0.8 * int(args.spec.get("num_speculative_tokens", 3))
    args.name = args.served_model_name or args.model
    return args


def _sse(obj):
    data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _response(code, body, ctype="application/json"):
    data = body if isinstance(body, bytes) else body.encode()
    reason = {200: "OK", 404: "Not Found", 400: "Bad Request"}.get(code, "OK")
    return (
        b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
        % (code, reason.encode(), ctype.encode(), len(data))
    ) + data


def metrics_text(args):
    lbl = 'engine="0",model_name="%s"' % args.name
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        "vllm:num_requests_running{%s} %d" % (lbl, STATE["in_flight"]),
        "# TYPE vllm:generation_tokens_total counter",
        "vllm:generation_tokens_total{%s} %d" % (lbl, STATE["gen_tokens"]),
    ]
    lines += [
        "# TYPE vllm:request_success_total counter",
        'vllm:request_success_total{%s,finished_reason="length"} %d' % (lbl, STATE["finished"]),
    ]
    for name, h in HIST.items():
        lines.append("# TYPE %s histogram" % name)
        for le, n in zip(BUCKETS[name], h["buckets"]):
            lines.append('%s_bucket{%s,le="%s"} %d' % (name, lbl, le, n))
        lines.append('%s_bucket{%s,le="+Inf"} %d' % (name, lbl, h["count"]))
        lines.append("%s_count{%s} %d" % (name, lbl, h["count"]))
        lines.append("%s_sum{%s} %r" % (name, lbl, h["sum"]))
    if args.spec:
        k = int(args.spec.get("num_speculative_tokens", 3))
        for name, key in (
            ("num_drafts", "drafts"),
            ("num_draft_tokens", "draft_tokens"),
            ("num_accepted_tokens", "accepted"),
        ):
            lines += [
                "# TYPE vllm:spec_decode_%s_total counter" % name,
                "vllm:spec_decode_%s_total{%s} %d" % (name, lbl, STATE[key]),
            ]
        lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
        pos = STATE["per_pos"] or [0] * k
        for i in range(k):
            lines.append(
                'vllm:spec_decode_num_accepted_tokens_per_pos_total{%s,position="%d"} %d'
                % (lbl, i, pos[i] if i < len(pos) else 0)
            )
    return "\n".join(lines) + "\n"


def _account_spec(args, tokens_this_step):
    """Counters as vLLM would count one speculative step that emitted tokens_this_step."""
    k = int(args.spec.get("num_speculative_tokens", 3))
    accepted = max(0, min(k, tokens_this_step - 1))
    STATE["drafts"] += 1
    STATE["draft_tokens"] += k
    STATE["accepted"] += accepted
    if len(STATE["per_pos"]) < k:
        STATE["per_pos"] += [0] * (k - len(STATE["per_pos"]))
    for i in range(accepted):
        STATE["per_pos"][i] += 1


async def _stream(writer, args, body, chat):
    n = int(body.get("max_tokens") or args.tokens)
    usage = (body.get("stream_options") or {}).get("include_usage")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    t0 = time.time()
    stamps = []
    if args.ttft_ms:
        await asyncio.sleep(args.ttft_ms / 1000.0)
    emitted, carry, first = 0, 0.0, True
    cid = "cmpl-%d" % STATE["requests"]
    starved = args.starve_above is not None and STATE["in_flight"] - 1 > args.starve_above
    held = []
    while emitted < n:
        if first:
            step = 1
            first = False
        else:
            if args.step_ms:
                cost = args.spec_step_cost if args.spec else 1.0
                stretch = 1.0 + args.contention * max(0, STATE["in_flight"] - 1)
                await asyncio.sleep(args.step_ms * cost * stretch / 1000.0)
            carry += args.tokens_per_step
            step = int(carry)
            carry -= step
            step = max(1, min(step, n - emitted))
            if args.spec:
                _account_spec(args, step)
        emitted += step
        STATE["gen_tokens"] += step
        text = " tok" * step
        fin = "length" if emitted >= n else None
        if chat:
            choice = {"index": 0, "delta": {"content": text}, "finish_reason": fin}
            obj = {"id": cid, "object": "chat.completion.chunk", "model": args.name, "choices": [choice]}
        else:
            obj = {
                "id": cid,
                "object": "text_completion",
                "model": args.name,
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": fin}],
            }
        if starved:
            held.append(_sse(obj))
            continue
        writer.write(_sse(obj))
        await writer.drain()
        stamps += [time.time()] * step
    if held:
        writer.write(b"".join(held))
        stamps += [time.time()] * (n - len(stamps))
    if stamps:
        _observe_request(t0, stamps[0], stamps[-1], n, [b - a for a, b in zip(stamps, stamps[1:])])
    if usage:
        writer.write(
            _sse(
                {
                    "id": cid,
                    "object": "text_completion",
                    "model": args.name,
                    "choices": [],
                    "usage": {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": n + 8},
                }
            )
        )
    writer.write(_sse(b"[DONE]") + b"0\r\n\r\n")
    await writer.drain()


async def handle(reader, writer, args):
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
            length = 0
            for ln in lines[1:]:
                if ln[:15].lower() == "content-length:":
                    length = int(ln[15:].strip())
            raw = await reader.readexactly(length) if length else b""
            path = path.split("?", 1)[0]
            if method == "GET":
                if path == "/health":
                    writer.write(_response(200, b""))
                elif path == "/version":
                    writer.write(_response(200, json.dumps({"version": args.version_string})))
                elif path == "/v1/models":
                    writer.write(
                        _response(
                            200,
                            json.dumps(
                                {
                                    "object": "list",
                                    "data": [{"id": args.name, "object": "model", "max_model_len": 2048}],
                                }
                            ),
                        )
                    )
                elif path == "/metrics":
                    writer.write(_response(200, metrics_text(args), "text/plain; version=0.0.4"))
                else:
                    writer.write(_response(404, b"{}"))
                await writer.drain()
                continue
            if path not in ("/v1/completions", "/v1/chat/completions"):
                writer.write(_response(404, b"{}"))
                await writer.drain()
                continue
            body = json.loads(raw or b"{}")
            STATE["requests"] += 1
            STATE["in_flight"] += 1
            try:
                chat = path.endswith("chat/completions")
                if body.get("stream") and not args.ignore_stream:
                    await _stream(writer, args, body, chat)
                else:
                    n = int(body.get("max_tokens") or args.tokens)
                    STATE["gen_tokens"] += n
                    choice = (
                        {"index": 0, "message": {"role": "assistant", "content": " tok" * n}}
                        if chat
                        else {"index": 0, "text": " tok" * n}
                    )
                    choice["finish_reason"] = "length"
                    writer.write(
                        _response(
                            200,
                            json.dumps(
                                {
                                    "choices": [choice],
                                    "usage": {
                                        "prompt_tokens": 8,
                                        "completion_tokens": n,
                                        "total_tokens": n + 8,
                                    },
                                }
                            ),
                        )
                    )
                    await writer.drain()
            finally:
                STATE["in_flight"] -= 1
    except ConnectionError:
        return
    finally:
        writer.close()


async def serve(args):
    server = await asyncio.start_server(lambda r, w: handle(r, w, args), args.host, args.port, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    # the lines vLLM logs at startup, so log parsers see a familiar engine
    spec = "None"
    if args.spec:
        spec = "SpeculativeConfig(method=%r, model=%r, num_spec_tokens=%d)" % (
            args.spec.get("method"),
            args.spec.get("model"),
            int(args.spec.get("num_speculative_tokens", 3)),
        )
    print(
        "(EngineCore pid=%d) INFO [core.py:133] Initializing a V1 LLM engine (v%s) with config: model=%r, "
        "speculative_config=%s, tokenizer=%r"
        % (os.getpid(), args.version_string, args.model, spec, args.model),
        flush=True,
    )
    print(
        "(APIServer pid=%d) INFO [entry.py:140] stream_server listening on http://%s:%d serving %s"
        % (os.getpid(), args.host, port, args.name),
        flush=True,
    )
    print("INFO:     Application startup complete.", flush=True)
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(str(port))
        os.replace(tmp, args.ready_file)
    async with server:
        await server.serve_forever()


def main(argv=None):
    args = parse_args(argv)
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass
    return 0


def start_subprocess(ready_dir, *extra, python=None, cpu=None):
    """Start this server in a child process on a free port; returns (Popen, base_url).
    ``cpu``: pin it to that CPU set (a list of ints) where the OS allows it."""
    import subprocess

    ready = os.path.join(str(ready_dir), "stream-server-%d.port" % time.monotonic_ns())
    cmd = [python or sys.executable, os.path.abspath(__file__), "--port", "0", "--ready-file", ready]
    cmd += [str(a) for a in extra]
    preexec = None
    if cpu is not None and hasattr(os, "sched_setaffinity"):

        def preexec():  # noqa: E306 - runs in the child
            try:
                os.sched_setaffinity(0, set(cpu))
            except OSError:
                pass

    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=preexec)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if os.path.exists(ready):
            with open(ready) as fh:
                port = int(fh.read())
            os.unlink(ready)
            return proc, "http://127.0.0.1:%d" % port
        if proc.poll() is not None:
            raise RuntimeError("stream_server exited with %s" % proc.returncode)
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("stream_server did not start")


if __name__ == "__main__":
    sys.exit(main())
