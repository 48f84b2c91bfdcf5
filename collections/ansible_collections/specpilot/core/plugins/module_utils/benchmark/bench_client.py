# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Streaming load generator for OpenAI-compatible vLLM servers (the specpilot benchmark).

Self-contained on purpose: it imports only the standard library and ``aiohttp``, so the same
file runs on the Ansible controller (imported by the ``specpilot.core.vllm_load`` module) and
as a plain script inside the cluster, in a Job whose image has Python and aiohttp (every vLLM
image has both)::

    python bench_client.py --config runs.json [--output result.json]

A *run* sends a fixed list of prompts, in the same order every time, ``runs_per_prompt``
times, after ``warmup_requests`` discarded sequential warm-ups, at a fixed request rate
(``qps``: Poisson or constant arrivals from a seeded generator) and/or a fixed concurrency
(``concurrency``: at most that many requests in flight). Every request streams
(``stream: true`` with ``stream_options.include_usage``) and records:

* ``ttft_s``: time to the first chunk that carries output;
* ``itl_s``: the gaps between successive output chunks (one chunk may carry several tokens
  with speculative decoding);
* ``e2e_s``: time to the last output chunk;
* ``output_tokens``: ``usage.completion_tokens`` of the final usage chunk, else the number of
  logprob tokens, else the number of output chunks (``token_source`` says which);
* ``tpot_s``: ``(e2e - ttft) / (output_tokens - 1)`` (vLLM's definition);
* ``queue_s``: how long a request waited for a concurrency slot after its arrival time;
* ``text_sha256`` and ``text_head``: the SHA-256 (hex) of the whole output text and its first
  80 characters (``choices[0].text`` of completions, ``delta.content`` - or a reasoning
  field - of chat chunks, concatenated in order), so that the outputs of two servers can be
  compared (same prompt, temperature 0) without keeping the texts.

A run also records ``client_cpu_s``, the CPU time this process used during the timed window
(the one ``duration_s`` measures), and ``client_cpu_share`` (``client_cpu_s / duration_s``):
near 1 means the client was CPU-bound, and its latencies include its own queueing.

The run also reads ``/version`` and ``/v1/models`` once, and the raw ``/metrics`` page right
after the warm-ups and right after the last request, so that counter deltas (acceptance)
cover exactly the timed requests. Parsing those pages is left to the caller.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import json
import math
import random
import sys
import time

# aiohttp is imported the first time requests are sent (_aiohttp), not when this file loads: the plugins
# that only read a workload (bench_plan) load it in every playbook, and aiohttp costs ~0.1 s of CPU there.
HAS_AIOHTTP = importlib.util.find_spec("aiohttp") is not None
AIOHTTP_IMPORT_ERROR = None if HAS_AIOHTTP else ImportError("No module named 'aiohttp'")
_AIOHTTP = []


def _aiohttp():
    if not _AIOHTTP:
        import aiohttp

        _AIOHTTP.append(aiohttp)
    return _AIOHTTP[0]


__all__ = [
    "BEGIN_MARKER",
    "END_MARKER",
    "HAS_AIOHTTP",
    "KEEP_EVERY",
    "LoadStopped",
    "RunConfigError",
    "arrival_offsets",
    "extract_job_output",
    "level_key",
    "load_workload",
    "normalise_config",
    "request_order",
    "run_many",
    "run_one",
]

BEGIN_MARKER = "SPECPILOT-BENCH-RESULT-BEGIN"
END_MARKER = "SPECPILOT-BENCH-RESULT-END"
RESULT_FORMAT = 1
TEXT_HEAD_CHARS = 80

DEFAULTS = {
    "api": "completions",
    "model": None,
    "runs_per_prompt": 5,
    "warmup_requests": 3,
    "qps": None,
    "arrival": "poisson",
    "concurrency": None,
    "seed": 42,
    "sampling": {"temperature": 0.0, "max_tokens": 128, "seed": 42},
    "headers": {},
    "timeout": 600.0,
    "verify_ssl": True,
    "metrics_url": None,
    "scrape_metrics": True,
    "include_usage": True,
    "label": None,
    "progress_interval": 10.0,
    "max_requests": None,
    # a new connection per request: a Service that balances per connection (kube-proxy, the lab's)
    # then spreads the requests, as a gateway that splits per request would (the canary's traffic)
    "force_close": False,
}
APIS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


class RunConfigError(ValueError):
    """A run configuration or a workload file is not usable."""


class LoadStopped(RuntimeError):
    """``keep`` (run_many) said the load must stop (the lock it runs under is lost)."""


# seconds between two calls of run_many's ``keep`` while the load runs
KEEP_EVERY = 1.0


# --------------------------------------------------------------------------- workloads


def load_workload(path, api=None):
    """Prompts from a JSONL file: one JSON object per line with ``prompt`` (a string, for
    the completions API) or ``messages`` (a chat message list); optional ``id``,
    ``max_tokens`` (per-prompt override) and ``category``. Blank lines and lines starting
    with ``#`` are skipped. Returns a list of dicts with an ``id`` each."""
    prompts = []
    with open(path, "r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                item = json.loads(text)
            except ValueError as exc:
                raise RunConfigError("%s:%d: not JSON: %s" % (path, lineno, exc))
            if isinstance(item, str):
                item = {"prompt": item}
            if not isinstance(item, dict) or not ("prompt" in item or "messages" in item):
                raise RunConfigError("%s:%d: each line needs a 'prompt' or a 'messages' key" % (path, lineno))
            item.setdefault("id", "p%d" % len(prompts))
            prompts.append(item)
    if not prompts:
        raise RunConfigError("%s holds no prompts" % path)
    return _check_prompts(prompts, api)


def _check_prompts(prompts, api=None):
    out = []
    for i, item in enumerate(prompts):
        if isinstance(item, str):
            item = {"prompt": item}
        if not isinstance(item, dict) or not ("prompt" in item or "messages" in item):
            raise RunConfigError("prompt %d needs a 'prompt' or a 'messages' key" % i)
        item = dict(item)
        item.setdefault("id", "p%d" % i)
        item["id"] = str(item["id"])
        if api == "completions" and "prompt" not in item:
            raise RunConfigError("prompt %s has only 'messages': use api 'chat'" % item["id"])
        out.append(item)
    return out


# --------------------------------------------------------------------------- config


def _float_or_none(value, name):
    if value is None or value == "" or (isinstance(value, str) and value.lower() in ("inf", "none")):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise RunConfigError("%s must be a number, not %r" % (name, value))
    if math.isinf(out):
        return None
    if out <= 0:
        raise RunConfigError("%s must be > 0 (omit it for no limit)" % name)
    return out


def level_key(qps, concurrency):
    """A stable name for a load level: ``qps=2``, ``qps=inf,c=4``, ``qps=0.5,c=8``."""
    q = "inf" if qps is None else ("%g" % qps)
    return "qps=%s" % q + ("" if not concurrency else ",c=%d" % concurrency)


def _concurrency(conc):
    """The concurrency of a run: None (open loop) for empty or 0, else an integer >= 1."""
    if conc in ("", 0, None):
        return None
    try:
        conc = int(conc)
    except (TypeError, ValueError):
        raise RunConfigError("concurrency must be an integer, not %r" % (conc,))
    if conc < 1:
        raise RunConfigError("concurrency must be >= 1")
    return conc


def _count(cfg, key, least):
    try:
        value = int(cfg[key])
    except (TypeError, ValueError):
        raise RunConfigError("%s must be an integer" % key)
    if value < least:
        raise RunConfigError("%s is out of range" % key)
    return value


def _metrics_url(cfg):
    """Where the run scrapes the engine's /metrics: none when scrape_metrics is off, else the one given or
    the base URL's."""
    if not cfg.get("scrape_metrics", True):
        return None
    if cfg.get("metrics_url") is None:
        return cfg["base_url"] + "/metrics"
    return cfg["metrics_url"]


def normalise_config(config):
    """A run configuration with defaults applied and values checked (a new dict)."""
    if not isinstance(config, dict):
        raise RunConfigError("a run configuration is a mapping")
    cfg = dict(DEFAULTS)
    cfg.update({k: v for k, v in config.items() if v is not None or k in ("qps", "concurrency")})
    sampling = dict(DEFAULTS["sampling"])
    sampling.update(config.get("sampling") or {})
    cfg["sampling"] = sampling
    if not cfg.get("base_url"):
        raise RunConfigError("base_url is required")
    cfg["base_url"] = str(cfg["base_url"]).rstrip("/")
    if cfg["api"] not in APIS:
        raise RunConfigError("api must be one of %s" % ", ".join(APIS))
    if cfg.get("workload") and not cfg.get("prompts"):
        cfg["prompts"] = load_workload(cfg["workload"], cfg["api"])
    if not cfg.get("prompts"):
        raise RunConfigError("no prompts: give prompts or a workload file")
    cfg["prompts"] = _check_prompts(cfg["prompts"], cfg["api"])
    cfg["qps"] = _float_or_none(cfg.get("qps"), "qps")
    cfg["concurrency"] = _concurrency(cfg.get("concurrency"))
    if cfg["arrival"] not in ("poisson", "constant"):
        raise RunConfigError("arrival must be 'poisson' or 'constant'")
    cfg["runs_per_prompt"] = _count(cfg, "runs_per_prompt", 1)
    cfg["warmup_requests"] = _count(cfg, "warmup_requests", 0)
    cfg["timeout"] = float(cfg["timeout"])
    cfg["seed"] = int(cfg["seed"]) if cfg.get("seed") is not None else 0
    cfg["metrics_url"] = _metrics_url(cfg)
    cfg["level"] = {
        "qps": cfg["qps"],
        "concurrency": cfg["concurrency"],
        "key": level_key(cfg["qps"], cfg["concurrency"]),
    }
    return cfg


def public_config(cfg):
    """What a result may carry: no headers (tokens), no prompt texts."""
    out = {k: v for k, v in cfg.items() if k not in ("headers", "prompts", "progress")}
    out["num_prompts"] = len(cfg["prompts"])
    out["prompt_ids"] = [p["id"] for p in cfg["prompts"]]
    return out


# --------------------------------------------------------------------------- schedule


def request_order(prompts, runs_per_prompt, max_requests=None):
    """Indices into prompts: the whole list in order, ``runs_per_prompt`` times."""
    order = [i for _unused in range(runs_per_prompt) for i in range(len(prompts))]
    return order[:max_requests] if max_requests else order


def arrival_offsets(n, qps, arrival="poisson", seed=0):
    """Send times in seconds from the start of the run. ``qps`` None: all at 0 (the
    concurrency limit alone paces the run). Poisson: exponential gaps from
    ``random.Random(seed)``, first request at 0; constant: ``i / qps``."""
    if qps is None:
        return [0.0] * n
    if arrival == "constant":
        return [i / qps for i in range(n)]
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        out.append(t)
        t += rng.expovariate(qps)
    return out


def build_payload(cfg, prompt):
    sampling = dict(cfg["sampling"])
    extra = sampling.pop("extra", None) or {}
    per_prompt_max = prompt.get("max_tokens")
    body = {"model": cfg["model"], "stream": True}
    if cfg["api"] == "chat":
        body["messages"] = prompt.get("messages") or [{"role": "user", "content": prompt["prompt"]}]
    else:
        body["prompt"] = prompt["prompt"]
    for key, value in sampling.items():
        if value is not None:
            body[key] = value
    if per_prompt_max:
        body["max_tokens"] = int(per_prompt_max)
    if cfg.get("include_usage", True):
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    if body.get("model") is None:
        body.pop("model")
    return body


# --------------------------------------------------------------------------- one request


def _chunk_output(choice, api):
    """(carries output, tokens by logprobs or None, finish_reason, text) for one streamed choice."""
    if api == "chat":
        delta = choice.get("delta") or {}
        text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
        has = bool(text)
        lp = choice.get("logprobs")
        ntok = len(lp["content"]) if isinstance(lp, dict) and isinstance(lp.get("content"), list) else None
    else:
        text = choice.get("text")
        has = text is not None
        lp = choice.get("logprobs")
        ntok = len(lp["tokens"]) if isinstance(lp, dict) and isinstance(lp.get("tokens"), list) else None
    if ntok:
        has = True
    return has, ntok, choice.get("finish_reason"), text if isinstance(text, str) else ""


def _reply_text(choice, api):
    """The output text of a whole (non-streamed) reply's choice; a chat message's reasoning
    comes first, as it streams first."""
    if api == "chat":
        msg = choice.get("message") or {}
        parts = (msg.get("reasoning_content") or msg.get("reasoning"), msg.get("content"))
    else:
        parts = (choice.get("text"),)
    return "".join(p for p in parts if isinstance(p, str))


class _OutputText:
    """The SHA-256 and the first TEXT_HEAD_CHARS characters of an output text given in pieces."""

    def __init__(self):
        self.digest = hashlib.sha256()
        self.head = ""

    def add(self, text):
        if text:
            self.digest.update(text.encode("utf-8"))
            if len(self.head) < TEXT_HEAD_CHARS:
                self.head = (self.head + text)[:TEXT_HEAD_CHARS]

    def fields(self):
        return {"text_sha256": self.digest.hexdigest(), "text_head": self.head}


class _Reply(object):
    """What one streamed reply delivered, chunk by chunk: the times of its chunks, its tokens, its text."""

    __slots__ = (
        "start",
        "itl",
        "ttft",
        "last",
        "chunks",
        "lp_tokens",
        "lp_seen",
        "usage",
        "finish",
        "output",
    )

    def __init__(self, start):
        self.start = start
        self.itl = []
        self.ttft = None
        self.last = None
        self.chunks = 0
        self.lp_tokens = 0
        self.lp_seen = True
        self.usage = None
        self.finish = None
        self.output = _OutputText()

    def whole(self, data, api, now):
        """A server that ignored stream=true: one JSON body, TTFT = e2e."""
        self.ttft = now - self.start
        self.last = now
        choice = (data.get("choices") or [{}])[0]
        self.finish = choice.get("finish_reason")
        self.output.add(_reply_text(choice, api))
        self.usage = data.get("usage")
        self.chunks = 1
        self.lp_seen = False

    def event(self, obj, api, clock):
        """One server-sent event's object; the error message when the stream reports one, else None."""
        if obj.get("error"):
            err = obj["error"]
            return "stream error: %s" % (err.get("message") if isinstance(err, dict) else err)
        choices = obj.get("choices")
        if choices:
            self._choice(choices[0], api, clock)
        u = obj.get("usage")
        if isinstance(u, dict) and u.get("completion_tokens") is not None:
            self.usage = u
        return None

    def _choice(self, choice, api, clock):
        has, ntok, fr, text = _chunk_output(choice, api)
        if fr:
            self.finish = fr
        self.output.add(text)
        if not has:
            return
        now = clock()
        if self.ttft is None:
            self.ttft = now - self.start
        else:
            self.itl.append(now - self.last)
        self.last = now
        self.chunks += 1
        if ntok is None:
            self.lp_seen = False
        else:
            self.lp_tokens += ntok

    def fill(self, record):
        """Write the reply's figures into ``record`` (an error when no output chunk came)."""
        if self.ttft is None:
            record["error"] = "no output chunk received"
            return
        e2e = self.last - self.start
        record["ok"] = True
        record["ttft_s"] = self.ttft
        record["e2e_s"] = e2e
        record["itl_s"] = self.itl
        record["chunks"] = self.chunks
        record["finish_reason"] = self.finish
        record.update(self.output.fields())
        self._tokens(record)
        n = record["output_tokens"]
        record["tpot_s"] = (e2e - self.ttft) / (n - 1) if n and n > 1 else None

    def _tokens(self, record):
        """The output token count: from usage, else the logprobs of every chunk, else the chunks."""
        if self.usage is not None:
            record["output_tokens"] = int(self.usage["completion_tokens"])
            record["prompt_tokens"] = self.usage.get("prompt_tokens")
            record["token_source"] = "usage"
        elif self.lp_seen and self.lp_tokens:
            record["output_tokens"] = self.lp_tokens
            record["token_source"] = "logprobs"
        else:
            record["output_tokens"] = self.chunks
            record["token_source"] = "chunks"


async def _read_reply(resp, reply, api, clock):
    """Read one response into ``reply``; the error message of a failed one, else None."""
    if resp.status != 200:
        body = await resp.text()
        return "HTTP %d: %s" % (resp.status, body[:300])
    if "text/event-stream" not in resp.headers.get("Content-Type", ""):
        reply.whole(json.loads(await resp.read()), api, clock())
        return None
    async for raw in resp.content:
        line = raw.strip()
        if not line or not line.startswith(b"data:"):
            continue  # blank separators, SSE comments / pings, event: lines
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        error = reply.event(json.loads(data), api, clock)
        if error:
            return error
    return None


async def _one_request(session, url, payload, headers, api, record, clock=time.perf_counter):
    """Send one streaming request and fill ``record`` in place."""
    start = clock()
    record["sent"] = start
    reply = _Reply(start)
    try:
        async with session.post(url, json=payload, headers=headers) as resp:
            record["status"] = resp.status
            error = await _read_reply(resp, reply, api, clock)
            if error:
                record["error"] = error
                return
    except asyncio.TimeoutError:
        record["error"] = "timeout"
        return
    except Exception as exc:  # noqa: BLE001 - every failure is recorded, the run goes on
        record["error"] = "%s: %s" % (type(exc).__name__, exc)
        return
    finally:
        record["end"] = clock()
    reply.fill(record)


# --------------------------------------------------------------------------- a run


def _stderr_progress(info):
    sys.stderr.write(
        "[specpilot-bench] %(label)s: %(done)d/%(total)d done, %(failed)d failed, %(in_flight)d in flight, "
        "%(elapsed).1fs\n" % info
    )
    sys.stderr.flush()


async def _get_text(session, url, headers, timeout):
    async with session.get(url, headers=headers, timeout=_aiohttp().ClientTimeout(total=timeout)) as resp:
        text = await resp.text()
        if resp.status != 200:
            raise RuntimeError("HTTP %d from %s" % (resp.status, url))
        return text


async def _server_info(session, cfg, headers):
    info = {"version": None, "models": None, "max_model_len": None, "errors": []}
    try:
        info["version"] = json.loads(await _get_text(session, cfg["base_url"] + "/version", headers, 30)).get(
            "version"
        )
    except Exception as exc:  # noqa: BLE001 - not every server has /version
        info["errors"].append("/version: %s" % exc)
    try:
        data = (
            json.loads(await _get_text(session, cfg["base_url"] + "/v1/models", headers, 30)).get("data")
            or []
        )
        info["models"] = [m.get("id") for m in data]
        if data and data[0].get("max_model_len"):
            info["max_model_len"] = data[0]["max_model_len"]
    except Exception as exc:  # noqa: BLE001
        info["errors"].append("/v1/models: %s" % exc)
    return info


async def _scrape(session, cfg, headers, result, key):
    if not cfg.get("metrics_url"):
        return
    try:
        result[key] = await _get_text(session, cfg["metrics_url"], headers, 30)
        result[key + "_at"] = time.time()
    except Exception as exc:  # noqa: BLE001
        result.setdefault("metrics_errors", []).append("%s: %s" % (key, exc))


def _clean_record(rec, t0):
    out = {k: v for k, v in rec.items() if k not in ("sent", "end", "arrival")}
    out["arrival_s"] = rec["arrival"]
    out["start_s"] = rec["sent"] - t0 if rec.get("sent") is not None else None
    out["queue_s"] = (out["start_s"] - rec["arrival"]) if out["start_s"] is not None else None
    return out


async def _run(cfg, session, progress=None):
    headers = dict(cfg.get("headers") or {})
    api_url = cfg["base_url"] + APIS[cfg["api"]]
    prompts = cfg["prompts"]
    label = cfg.get("label") or cfg["level"]["key"]
    result = {
        "format": RESULT_FORMAT,
        "label": label,
        "level": cfg["level"],
        "config": public_config(cfg),
        "metrics_before": None,
        "metrics_after": None,
    }
    result["server"] = await _server_info(session, cfg, headers)
    if cfg.get("model") is None and result["server"]["models"]:
        cfg["model"] = result["server"]["models"][0]
        result["config"]["model"] = cfg["model"]

    # warm-ups: sequential, the first prompts in order, discarded
    warm = []
    for i in range(cfg["warmup_requests"]):
        prompt = prompts[i % len(prompts)]
        rec = {"prompt_id": prompt["id"], "ok": False, "error": None, "arrival": 0.0}
        await _one_request(session, api_url, build_payload(cfg, prompt), headers, cfg["api"], rec)
        warm.append(rec)
    result["warmup"] = {
        "requests": len(warm),
        "ok": sum(1 for r in warm if r["ok"]),
        "errors": sorted({r["error"] for r in warm if r.get("error")})[:5],
    }

    await _scrape(session, cfg, headers, result, "metrics_before")

    order = request_order(prompts, cfg["runs_per_prompt"], cfg.get("max_requests"))
    offsets = arrival_offsets(len(order), cfg["qps"], cfg["arrival"], cfg["seed"])
    sem = asyncio.Semaphore(cfg["concurrency"]) if cfg["concurrency"] else None
    records = []
    state = {"done": 0, "failed": 0, "in_flight": 0}
    progress = progress or _stderr_progress
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    result["started_at"] = time.time()

    async def fire(rec, payload):
        if sem is not None:
            await sem.acquire()
        state["in_flight"] += 1
        try:
            await _one_request(session, api_url, payload, headers, cfg["api"], rec)
        finally:
            state["in_flight"] -= 1
            state["done"] += 1
            if not rec["ok"]:
                state["failed"] += 1
            if sem is not None:
                sem.release()

    async def reporter():
        interval = float(cfg.get("progress_interval") or 0)
        if interval <= 0:
            return
        while True:
            await asyncio.sleep(interval)
            progress(dict(state, label=label, total=len(order), elapsed=time.perf_counter() - t0))

    rep = asyncio.ensure_future(reporter())
    tasks = []
    try:
        for n, (idx, offset) in enumerate(zip(order, offsets)):
            delay = t0 + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            prompt = prompts[idx]
            rec = {
                "index": n,
                "prompt_id": prompt["id"],
                "run": n // len(prompts),
                "ok": False,
                "error": None,
                "arrival": offset,
            }
            records.append(rec)
            tasks.append(asyncio.ensure_future(fire(rec, build_payload(cfg, prompt))))
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        rep.cancel()
        for t in tasks:
            t.cancel()
    t_end = time.perf_counter()
    cpu_end = time.process_time()
    result["duration_s"] = t_end - t0
    result["client_cpu_s"] = cpu_end - cpu0
    result["client_cpu_share"] = (
        result["client_cpu_s"] / result["duration_s"] if result["duration_s"] > 0 else None
    )
    await _scrape(session, cfg, headers, result, "metrics_after")
    progress(dict(state, label=label, total=len(order), elapsed=result["duration_s"]))
    result["requests"] = [_clean_record(r, t0) for r in records]
    return result


async def _kept(work, keep, every=KEEP_EVERY, clock=time.monotonic):
    """``await work`` while ``keep(clock())`` runs at once and then every ``every`` seconds in a thread
    (it may block on the network: the requests in flight go on meanwhile). A message from ``keep``
    cancels ``work`` and raises LoadStopped. The same loop as the rollout's wait (action/rollout_wait.py
    ``wait``), here beside the requests rather than between polls."""
    task = asyncio.ensure_future(work)
    if keep is None:
        return await task
    loop = asyncio.get_running_loop()
    try:
        while True:
            lost = await loop.run_in_executor(None, keep, clock())
            if lost:
                raise LoadStopped(lost)
            done, _pending = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def _run_many_async(configs, progress=None):
    results = []
    timeout = max(c["timeout"] for c in configs)
    limit = max([c["concurrency"] or 0 for c in configs] + [0])
    ssl = all(bool(c.get("verify_ssl", True)) for c in configs)
    force_close = any(bool(c.get("force_close")) for c in configs)
    aiohttp = _aiohttp()
    connector = aiohttp.TCPConnector(limit=limit or 0, ssl=ssl, force_close=force_close)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=timeout), auto_decompress=True
    ) as session:
        for cfg in configs:
            results.append(await _run(cfg, session, progress))
    return results


def run_many(configs, progress=None, keep=None, keep_every=KEEP_EVERY, clock=time.monotonic):
    """Run the configurations one after the other (one client session); returns their results.
    ``keep(now)``, when given, is called every ``keep_every`` seconds (``now``: ``clock()``) while they
    run, warm-ups and scrapes included (the renewal of the lock the load runs under,
    plugin_utils/lease_client.py Renewer): a message from it stops the load (LoadStopped)."""
    if not HAS_AIOHTTP:
        raise AIOHTTP_IMPORT_ERROR
    cfgs = [normalise_config(c) for c in configs]
    return asyncio.run(_kept(_run_many_async(cfgs, progress), keep, keep_every, clock))


def run_one(config, progress=None):
    return run_many([config], progress)[0]


# --------------------------------------------------------------------------- job output


def extract_job_output(text):
    """The result document a script run printed between the markers (e.g. a Job's pod log,
    where progress lines are interleaved)."""
    start = text.rfind(BEGIN_MARKER)
    end = text.rfind(END_MARKER)
    if start < 0 or end < start:
        raise RunConfigError("no %s ... %s block in the output" % (BEGIN_MARKER, END_MARKER))
    return json.loads(text[start + len(BEGIN_MARKER) : end])


def main(argv=None):
    parser = argparse.ArgumentParser(description="specpilot streaming load generator for vLLM")
    parser.add_argument(
        "--config",
        required=True,
        help="JSON file ('-' for stdin): one run configuration, a list of them, or {runs: [...]}",
    )
    parser.add_argument(
        "--output", default="-", help="where the result JSON goes ('-': stdout, between markers)"
    )
    args = parser.parse_args(argv)
    raw = sys.stdin.read() if args.config == "-" else open(args.config, "r", encoding="utf-8").read()
    doc = json.loads(raw)
    configs = doc.get("runs") if isinstance(doc, dict) and "runs" in doc else doc
    if isinstance(configs, dict):
        configs = [configs]
    try:
        results = run_many(configs)
    except RunConfigError as exc:
        sys.stderr.write("error: %s\n" % exc)
        return 2
    out = json.dumps({"format": RESULT_FORMAT, "runs": results})
    if args.output == "-":
        sys.stdout.write("%s\n%s\n%s\n" % (BEGIN_MARKER, out, END_MARKER))
        sys.stdout.flush()
    else:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(out)
    failed = sum(1 for r in results for q in r["requests"] if not q["ok"])
    sys.stderr.write("[specpilot-bench] %d run(s), %d failed request(s)\n" % (len(results), failed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
