# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Probe requests against a vLLM OpenAI server, with /metrics read before and after.

One implementation for both ways the smoke role reaches an engine:

* from the Ansible controller, through the module ``specpilot.core.smoke_probe``
  (``status.address.url`` of the InferenceService);
* from inside the predictor pod, with the pod's own Python: the filter
  ``specpilot.core.smoke_exec_command`` ships the source of this file to
  ``specpilot.core.pod_exec`` and :func:`main` runs there against ``127.0.0.1``.

That second use is why this file is self-contained: the standard library only, no other
module_utils, Python 3.6+ syntax, and nothing at import time but definitions.
"""

import json
import socket
import ssl
import sys
import threading
import time

from urllib.error import HTTPError, URLError
from urllib.request import HTTPSHandler, Request, build_opener

RESULT_FORMAT = 1
ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
MAX_TEXT = 200
# vllm:num_requests_running read during the probes: its lines only, at most MAX_RUNNING_READS reads
RUNNING = "vllm:num_requests_running"
RUNNING_INTERVAL = 0.1
MAX_RUNNING_READS = 2000


def build_requests(
    model, prompts, count, max_tokens, temperature, request_params=None, endpoint="completions"
):
    """The request bodies: ``count`` requests cycling through ``prompts``.

    ``request_params`` are merged last (they may override max_tokens/temperature)."""
    if not prompts:
        raise ValueError("at least one probe prompt is needed")
    if int(count) < 1:
        raise ValueError("count must be >= 1")
    if endpoint not in ENDPOINTS:
        raise ValueError("endpoint must be one of %s" % ", ".join(sorted(ENDPOINTS)))
    bodies = []
    for i in range(int(count)):
        prompt = prompts[i % len(prompts)]
        body = {"model": model, "max_tokens": int(max_tokens), "temperature": float(temperature)}
        if endpoint == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        body.update(request_params or {})
        bodies.append(body)
    return bodies


def _opener(validate_certs):
    """The standard library's default opener (what urllib's module-level open uses), its HTTPS handler
    verifying certificates unless told otherwise."""
    if validate_certs:
        return build_opener()
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return build_opener(HTTPSHandler(context=ctx))


def http(method, url, body=None, headers=None, timeout=60.0, validate_certs=True):
    """(status, text, error): status None when no HTTP answer came back."""
    hdrs = {"Accept": "*/*"}
    hdrs.update(headers or {})
    data = None
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        hdrs["Content-Type"] = "application/json"
    req = Request(url, data=data, headers=hdrs, method=method)
    try:
        resp = _opener(validate_certs).open(req, timeout=timeout)
        try:
            return resp.status, resp.read().decode("utf-8", "replace"), None
        finally:
            resp.close()
    except HTTPError as exc:
        try:
            text = exc.read().decode("utf-8", "replace")
        except Exception:  # noqa: BLE001 - the body of an error is best effort
            text = ""
        return exc.code, text, "HTTP %s %s" % (exc.code, exc.reason)
    except (URLError, socket.timeout, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, "", "%s: %s" % (type(exc).__name__, reason)


def _completion_text(answer, endpoint):
    choices = answer.get("choices") or []
    if not choices:
        return None
    first = choices[0] or {}
    if endpoint == "chat":
        return ((first.get("message") or {}).get("content")) or ""
    return first.get("text") or ""


def probe_one(base_url, body, endpoint="completions", headers=None, timeout=60.0, validate_certs=True):
    """Send one request; a dict describing what came back."""
    t0 = time.time()
    status, text, error = http(
        "POST", base_url.rstrip("/") + ENDPOINTS[endpoint], body, headers, timeout, validate_certs
    )
    out = {
        "status": status,
        "ok": False,
        "latency_s": round(time.time() - t0, 4),
        "error": error,
        "prompt": (body.get("prompt") if "prompt" in body else json.dumps(body.get("messages")))[:MAX_TEXT],
        "completion_tokens": None,
        "prompt_tokens": None,
        "finish_reason": None,
        "text": None,
    }
    if status != 200:
        if error is None:
            error = "HTTP %s" % status
        out["error"] = "%s %s" % (error, text[:MAX_TEXT]) if text else error
        return out
    try:
        answer = json.loads(text)
    except ValueError:
        out["error"] = "the answer is not JSON: %s" % text[:MAX_TEXT]
        return out
    completion = _completion_text(answer, endpoint)
    usage = answer.get("usage") or {}
    out["completion_tokens"] = usage.get("completion_tokens")
    out["prompt_tokens"] = usage.get("prompt_tokens")
    choices = answer.get("choices") or [{}]
    out["finish_reason"] = (choices[0] or {}).get("finish_reason")
    out["text"] = None if completion is None else completion[:MAX_TEXT]
    if completion is None:
        out["error"] = "the answer has no choices"
    elif not completion and not out["completion_tokens"]:
        out["error"] = "the answer has no generated tokens"
    else:
        out["ok"] = True
    return out


def scrape(base_url, headers=None, timeout=30.0, validate_certs=True):
    """(text, error) of GET /metrics."""
    status, text, error = http(
        "GET", base_url.rstrip("/") + "/metrics", None, headers, timeout, validate_certs
    )
    if status != 200:
        return None, error or ("HTTP %s" % status)
    return text, None


def running_lines(text):
    """The lines of a /metrics page that carry the running-requests gauge (the rest is dropped here,
    in the pod; the controller parses these with engine/vllm_metrics.py ``running_requests``)."""
    return "\n".join(
        line for line in text.splitlines() if line.startswith(RUNNING + "{") or line.startswith(RUNNING + " ")
    )


class RunningSampler(threading.Thread):
    """Reads /metrics every ``interval`` seconds until stopped; keeps ``{t, text}`` of the gauge's
    lines (t: seconds since the sampler started)."""

    def __init__(self, url, headers, timeout, certs, interval=RUNNING_INTERVAL):
        threading.Thread.__init__(self)
        self.daemon = True
        self.args = (url, headers, timeout, certs)
        self.interval = interval
        self.samples = []
        self.done = threading.Event()

    def run(self):
        t0 = time.time()
        while not self.done.is_set() and len(self.samples) < MAX_RUNNING_READS:
            text, err = scrape(*self.args)
            if text is not None:
                self.samples.append({"t": round(time.time() - t0, 3), "text": running_lines(text)})
            self.done.wait(self.interval)

    def stop(self):
        self.done.set()
        self.join()
        return self.samples


def run(job):
    """Run a job: {url, requests: [bodies], endpoint, headers, timeout, validate_certs, metrics: bool}.

    Returns {format, url, metrics_before, metrics_after, metrics_error, metrics_before_at and metrics_after_at
    (when each page was asked for, epoch seconds of the clock where it ran), running_samples (the
    vllm:num_requests_running lines read while the probes ran), results, requests,
    succeeded, failed, ok, completion_tokens, prompt_tokens, latency_mean_s, elapsed_s}."""
    url = job["url"]
    endpoint = job.get("endpoint") or "completions"
    headers = job.get("headers") or {}
    timeout = float(job.get("timeout") or 60)
    certs = bool(job.get("validate_certs", True))
    want_metrics = bool(job.get("metrics", True))
    out = {
        "format": RESULT_FORMAT,
        "url": url,
        "endpoint": endpoint,
        "metrics_before": None,
        "metrics_after": None,
        "metrics_error": None,
    }
    t0 = time.time()
    if want_metrics:
        out["metrics_before_at"] = round(time.time(), 3)
        out["metrics_before"], out["metrics_error"] = scrape(url, headers, timeout, certs)
    sampler = RunningSampler(url, headers, timeout, certs) if want_metrics else None
    if sampler is not None:
        sampler.start()
    results = [probe_one(url, body, endpoint, headers, timeout, certs) for body in job.get("requests") or []]
    if sampler is not None:
        out["running_samples"] = sampler.stop()
    if want_metrics:
        out["metrics_after_at"] = round(time.time(), 3)
        out["metrics_after"], err = scrape(url, headers, timeout, certs)
        out["metrics_error"] = out["metrics_error"] or err
    out.update(summary(results))
    out["elapsed_s"] = round(time.time() - t0, 3)
    return out


def summary(results):
    """What the probe results add up to: counts, tokens of the good ones, their mean latency."""
    good = [r for r in results if r["ok"]]
    latencies = [r["latency_s"] for r in good]
    return {
        "results": results,
        "requests": len(results),
        "succeeded": len(good),
        "failed": len(results) - len(good),
        "ok": bool(results) and len(good) == len(results),
        "completion_tokens": sum(int(r["completion_tokens"] or 0) for r in good),
        "prompt_tokens": sum(int(r["prompt_tokens"] or 0) for r in good),
        "latency_mean_s": round(sum(latencies) / len(latencies), 4) if latencies else None,
    }


def main(job_b64=None):
    """Entry point inside the pod: the job as base64 JSON (argv[1]); prints the result as JSON."""
    import base64

    raw = job_b64 if job_b64 is not None else (sys.argv[1] if len(sys.argv) > 1 else "")
    try:
        job = json.loads(base64.b64decode(raw).decode("utf-8"))
    except (ValueError, TypeError) as exc:
        sys.stdout.write(
            json.dumps({"format": RESULT_FORMAT, "ok": False, "error": "bad job: %s" % exc}) + "\n"
        )
        return 2
    sys.stdout.write(json.dumps(run(job)) + "\n")
    sys.stdout.flush()
    return 0
