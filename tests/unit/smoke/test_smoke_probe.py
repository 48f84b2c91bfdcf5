"""The probe client (module_utils/verify/smoke_probe.py) against a local stand-in engine, from the
controller and through the in-pod command that the filter smoke_exec_command builds."""

from __future__ import annotations

import base64
import json
import shlex
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.specpilot.core.plugins.filter.smoke import (
    smoke_exec_command,
    smoke_log_window,
    smoke_pick_pod,
)
from ansible_collections.specpilot.core.plugins.module_utils.verify import smoke_probe, smoke_schedule


class Engine:
    """/v1/completions, /v1/chat/completions, /metrics on 127.0.0.1 and a free port."""

    def __init__(self, model="svc"):
        self.model = model
        self.bodies = []
        self.scrapes = 0
        self.headers = []
        self.running = 0  # requests in flight: vllm:num_requests_running
        self.delay = 0.0  # seconds a completion takes
        self.models_status = 200  # GET /v1/models
        engine = self

        class H(BaseHTTPRequestHandler):
            def _send(self, code, body, ctype="application/json"):
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                engine.headers.append(dict(self.headers))
                if self.path == "/metrics":
                    engine.scrapes += 1
                    self._send(
                        200,
                        'vllm:spec_decode_num_drafts_total{engine="0",model_name="svc"} %d.0\n'
                        'vllm:num_requests_running{engine="0",model_name="svc"} %d.0\n'
                        % (engine.scrapes * 10, engine.running),
                        "text/plain",
                    )
                elif self.path == "/v1/models":
                    self._send(engine.models_status, json.dumps({"object": "list", "data": [{"id": engine.model}]}))
                else:
                    self._send(404, "{}")

            def do_POST(self):
                engine.running += 1
                try:
                    time.sleep(engine.delay)
                    self._post()
                finally:
                    engine.running -= 1

            def _post(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                engine.bodies.append(body)
                if body.get("model") != engine.model:
                    self._send(
                        404,
                        json.dumps({"error": {"message": "The model `%s` does not exist." % body["model"]}}),
                    )
                elif body.get("prompt") == "not json":
                    self._send(200, "<html>", "text/html")
                elif self.path == "/v1/chat/completions":
                    self._send(
                        200,
                        json.dumps(
                            {
                                "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
                                "usage": {"completion_tokens": 1, "prompt_tokens": 3},
                            }
                        ),
                    )
                else:
                    n = int(body.get("max_tokens", 1))
                    self._send(
                        200,
                        json.dumps(
                            {
                                "choices": [{"text": " x" * n, "finish_reason": "length"}],
                                "usage": {"completion_tokens": n, "prompt_tokens": 3},
                            }
                        ),
                    )

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def engine():
    e = Engine()
    yield e
    e.close()


def test_build_requests_cycles_prompts_and_merges_params():
    bodies = smoke_probe.build_requests("m", ["a", "b"], 5, 32, 0, {"ignore_eos": True, "temperature": 0.7})
    assert [b["prompt"] for b in bodies] == ["a", "b", "a", "b", "a"]
    assert bodies[0] == {
        "model": "m",
        "max_tokens": 32,
        "temperature": 0.7,
        "prompt": "a",
        "ignore_eos": True,
    }
    chat = smoke_probe.build_requests("m", ["hello"], 1, 8, 0, endpoint="chat")
    assert chat[0]["messages"] == [{"role": "user", "content": "hello"}]
    for args in ((["a"], 0), ([], 1)):
        with pytest.raises(ValueError):
            smoke_probe.build_requests("m", args[0], args[1], 8, 0)


def test_run_scrapes_around_the_probes(engine):
    out = smoke_probe.run(
        {
            "url": engine.url,
            "requests": smoke_probe.build_requests("svc", ["p"], 3, 4, 0),
            "headers": {"Authorization": "Bearer t"},
        }
    )
    assert out["ok"] and out["requests"] == 3 and out["succeeded"] == 3 and out["completion_tokens"] == 12
    # the page before the probes is the first read; the one after them the last (the sampler reads between)
    assert 'drafts_total{engine="0",model_name="svc"} 10.0' in out["metrics_before"]
    assert 'drafts_total{engine="0",model_name="svc"} %d.0' % (engine.scrapes * 10) in out["metrics_after"]
    assert [r["status"] for r in out["results"]] == [200, 200, 200]
    assert engine.headers[0]["Authorization"] == "Bearer t"


def test_running_requests_are_read_while_the_probes_run(engine):
    """The sampler reads vllm:num_requests_running while each probe is in flight and keeps only that
    gauge's lines; the verdict's parser reads 1 request at once from them (the probes run one by one)."""
    engine.delay = 0.4
    out = smoke_probe.run({"url": engine.url, "requests": smoke_probe.build_requests("svc", ["p"], 2, 4, 0)})
    samples = out["running_samples"]
    assert out["ok"] and len(samples) >= 4
    assert all(
        set(x["text"].splitlines())
        <= {
            'vllm:num_requests_running{engine="0",model_name="svc"} 0.0',
            'vllm:num_requests_running{engine="0",model_name="svc"} 1.0',
        }
        for x in samples
    )
    reads = smoke_schedule.running_reads(samples)
    assert max(reads) == 1.0 and len(reads) == len(samples)
    assert (
        smoke_probe.run({"url": engine.url, "requests": [], "metrics": False}).get("running_samples") is None
    )


def test_failures_are_reported_not_raised(engine):
    bodies = smoke_probe.build_requests("other", ["p"], 1, 4, 0) + smoke_probe.build_requests(
        "svc", ["not json"], 1, 4, 0
    )
    out = smoke_probe.run({"url": engine.url, "requests": bodies, "metrics": False})
    assert not out["ok"] and out["failed"] == 2
    assert out["results"][0]["status"] == 404 and "does not exist" in out["results"][0]["error"]
    assert "not JSON" in out["results"][1]["error"]
    assert out["metrics_before"] is None
    closed = Engine()
    url = closed.url
    closed.close()
    out = smoke_probe.run(
        {"url": url, "requests": smoke_probe.build_requests("svc", ["p"], 1, 4, 0), "timeout": 2}
    )
    assert not out["ok"] and out["results"][0]["status"] is None and out["metrics_error"]


def test_chat_endpoint(engine):
    out = smoke_probe.run(
        {
            "url": engine.url,
            "endpoint": "chat",
            "requests": smoke_probe.build_requests("svc", ["p"], 1, 4, 0, endpoint="chat"),
        }
    )
    assert out["ok"] and out["results"][0]["text"] == "hi"


def run_in_pod(command: str) -> subprocess.CompletedProcess:
    """What specpilot.core.pod_exec does with a command string (shlex.split), with this Python as the pod's."""
    argv = shlex.split(command)
    assert argv[0] == "python3"
    return subprocess.run(
        [sys.executable] + argv[1:], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}
    )


def test_exec_command_runs_the_same_probes(engine):
    settings = {
        "url": engine.url,
        "model": "svc",
        "prompts": ["one", "two"],
        "count": 3,
        "max_tokens": 5,
        "temperature": 0,
        "request_params": {"seed": 1},
        "endpoint": "completions",
        "timeout": 30,
    }
    cmd = smoke_exec_command(settings, "python3")
    assert cmd.startswith("python3 -c ")
    proc = run_in_pod(cmd)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ok"] and out["requests"] == 3 and out["completion_tokens"] == 15
    assert [b["prompt"] for b in engine.bodies] == ["one", "two", "one"] and engine.bodies[0]["seed"] == 1
    assert out["metrics_before"] and out["metrics_after"]
    # the code shipped is exactly module_utils/verify/smoke_probe.py, with no other import of the collection
    src = base64.b64decode(shlex.split(cmd)[3]).decode()
    assert src == open(smoke_probe.__file__).read()
    assert "ansible" not in src.replace("ansible_collections.specpilot", "")


def test_exec_command_quoting_of_a_python_path_and_a_bad_job(tmp_path):
    cmd = smoke_exec_command(
        {"url": "http://127.0.0.1:1", "model": "m", "prompts": ['it\'s "quoted" $HOME']},
        "/opt/my python/bin/python3",
    )
    argv = shlex.split(cmd)
    assert argv[0] == "/opt/my python/bin/python3"
    job = json.loads(base64.b64decode(argv[4]))
    assert job["requests"][0]["prompt"] == 'it\'s "quoted" $HOME'
    argv[0], argv[4] = sys.executable, "!!notbase64"
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and json.loads(proc.stdout)["error"].startswith("bad job")


@pytest.mark.parametrize(
    "settings,python,needle",
    [
        ({"url": "u", "model": "m"}, "python3", "prompts is required"),
        ({"url": "u", "model": "m", "prompts": ["p"], "bogus": 1}, "python3", "unknown setting"),
        ({"url": "u", "model": "m", "prompts": ["p"], "endpoint": "x"}, "python3", "endpoint must be"),
        ({"url": "u", "model": "m", "prompts": ["p"]}, " ", "python must name"),
        ("not a dict", "python3", "expects a mapping"),
    ],
)
def test_exec_command_refuses_bad_settings(settings, python, needle):
    with pytest.raises(AnsibleFilterError, match=needle):
        smoke_exec_command(settings, python)


def test_log_window_filter_counts_after_the_marker():
    text = "\n".join(
        [
            "(APIServer pid=1) INFO 11-21 05:07:57 [metrics.py:120] SpecDecoding metrics: "
            "Mean acceptance length: 3.85, Accepted throughput: 8.91 tokens/s, "
            "Drafted throughput: 9.39 tokens/s, Accepted: 94 tokens, Drafted: 99 "
            "tokens, Per-position acceptance rate: 0.970, 0.939, 0.939, Avg Draft acceptance rate: 94.9%",
            'INFO:     127.0.0.1:5 - "GET /metrics HTTP/1.1" 200 OK',
            "(APIServer pid=1) INFO 11-21 05:08:07 [metrics.py:120] SpecDecoding metrics: "
            "Mean acceptance length: 2.00, Accepted throughput: 1.00 tokens/s, "
            "Drafted throughput: 3.00 tokens/s, Accepted: 10 tokens, Drafted: 30 "
            "tokens, Per-position acceptance rate: 0.500, 0.300, 0.200, Avg Draft acceptance rate: 33.3%",
        ]
    )
    after = smoke_log_window(text, 'INFO:     127.0.0.1:5 - "GET /metrics HTTP/1.1" 200 OK')
    assert after["since_found"] and after["windows"] == 1 and after["drafted_tokens"] == 30
    assert smoke_log_window(text, "")["drafted_tokens"] == 129
    assert smoke_log_window(None)["windows"] == 0
    with pytest.raises(AnsibleFilterError):
        smoke_log_window(["a list"])


def _pod(name, ts, ready, deleting=False):
    md = {"name": name, "creationTimestamp": ts}
    if deleting:
        md["deletionTimestamp"] = ts
    return {
        "metadata": md,
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_pick_pod_prefers_the_newest_ready_pod():
    old_ready = _pod("a", "2026-11-21T06:00:00Z", True)
    new_starting = _pod("b", "2026-11-21T06:05:00Z", False)
    leaving = _pod("c", "2026-11-21T06:06:00Z", True, deleting=True)
    assert smoke_pick_pod([new_starting, leaving, old_ready]) == {"pod": old_ready, "ready": True}
    assert smoke_pick_pod([new_starting, _pod("z", "2026-11-21T05:00:00Z", False)]) == {
        "pod": new_starting,
        "ready": False,
    }
    assert smoke_pick_pod([]) == {"pod": None, "ready": False}
    assert smoke_pick_pod(None) == {"pod": None, "ready": False}


def test_the_module_and_its_action_task_probe_alike(engine):
    """specpilot.core.smoke_probe runs in the worker (its action plugin, fact_tasks.smoke_probe: issue 40,
    no Python process a service); its module file (ansible -m) runs the same task: the same requests,
    the same result but for the timings, the same refusal."""
    from fact_task_support import as_task, run_main

    from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks

    def as_module(args):
        return run_main("smoke_probe", args)

    def as_task_(args):
        return as_task(fact_tasks.smoke_probe, args, fact_tasks.SMOKE_PROBE_ARGS)

    timing = {"elapsed_s", "latency_mean_s", "invocation", "results", "metrics_before", "metrics_after",
              "metrics_before_at", "metrics_after_at",
              "running_samples"}
    args = {"url": engine.url, "model": "svc", "prompts": ["a", "b"], "count": 2, "max_tokens": 3}
    by_module, failed = as_module(args)
    by_task = as_task_(args)
    assert not failed and by_module["ok"] and by_module["succeeded"] == 2 and by_module["changed"] is False
    assert {k: v for k, v in by_module.items() if k not in timing} == {
        k: v for k, v in by_task.items() if k not in timing
    }
    assert [len(r["results"]) for r in (by_module, by_task)] == [2, 2]
    # /metrics before and after each run, and the running-requests sampler's reads between (issue 37)
    sampled = len(by_module["running_samples"]) + len(by_task["running_samples"])
    assert [b["prompt"] for b in engine.bodies] == ["a", "b", "a", "b"] and engine.scrapes == 4 + sampled
    refused, failed = as_module(dict(args, max_tokens=0))
    assert failed and refused["msg"] == "max_tokens must be >= 1"
    with pytest.raises(fact_tasks.TaskFailure, match="max_tokens must be >= 1"):
        as_task_(dict(args, max_tokens=0))


def test_metrics_facts_returns_the_parsed_pages_not_their_text(engine):
    """With metrics_facts (as the smoke role probes), the result holds the facts of both pages for the served
    model, the second with its deltas against the first, and no page."""
    from fact_task_support import as_task

    from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks

    args = {"url": engine.url, "model": "svc", "prompts": ["a"], "count": 1, "max_tokens": 3, "metrics_facts": True}
    out = as_task(fact_tasks.smoke_probe, args, fact_tasks.SMOKE_PROBE_ARGS)
    assert out["ok"] and out["metrics_before"] is None and out["metrics_after"] is None
    before, after = out["metrics_before_facts"], out["metrics_after_facts"]
    # the engine counts 10 drafts a scrape: the delta is 10 for every scrape after the first
    scrapes_between = len(out["running_samples"]) + 1
    assert after["derived"]["num_drafts"] == 10 * scrapes_between and before["derived"]["window"] != "delta"


def test_reach_probes_only_an_engine_whose_url_answers(engine):
    """With reach (the smoke role's route from the controller), GET /v1/models comes first: an engine that answers
    is probed as without it (reached true); a URL that does not answer, one that answers another status, or no URL
    is reached false with the reason, nothing else sent and no failure (the role then goes through the pod)."""
    from fact_task_support import as_task

    from ansible_collections.specpilot.core.plugins.module_utils import fact_tasks

    def probe(url):
        args = {"url": url, "model": "svc", "prompts": ["a"], "count": 1, "max_tokens": 3, "reach": True}
        return as_task(fact_tasks.smoke_probe, args, fact_tasks.SMOKE_PROBE_ARGS)

    out = probe(engine.url)
    assert out["reached"] is True and out["ok"] and out["succeeded"] == 1 and len(engine.bodies) == 1
    engine.models_status = 503
    out = probe(engine.url + "/")
    assert out == {"changed": False, "ok": False, "reached": False, "url": engine.url + "/",
                   "reach_error": engine.url + "/v1/models does not answer: HTTP 503 Service Unavailable",
                   "msg": engine.url + "/v1/models does not answer: HTTP 503 Service Unavailable"}
    engine.close()
    out = probe(engine.url)
    assert out["reached"] is False and out["reach_error"].startswith(engine.url + "/v1/models does not answer: URLError")
    assert probe("")["reach_error"] == "no URL to probe"
    assert len(engine.bodies) == 1 and "reached" not in as_task(
        fact_tasks.smoke_probe, {"url": engine.url, "model": "svc", "prompts": ["a"], "count": 1}, fact_tasks.SMOKE_PROBE_ARGS
    )
