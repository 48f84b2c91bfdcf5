"""The two fact modules run through ansible-playbook (their action plugins, in the worker; the module
files themselves: test_fact_modules_main.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from vllm_samples import CPU_RUN, DATA, ROOT, real, real_log

TOKEN = "s3cr3t-t0ken-for-tests"
BIN = Path(sys.executable).parent
INTERNAL_KEYS = {"changed", "invocation", "failed", "msg", "warnings", "deprecations", "_ansible_no_log",
                 "ansible_facts", "skipped", "skip_reason", "exception"}


def _env(tmp_path):
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
        "ANSIBLE_REMOTE_TEMP": str(tmp_path / "ansible-remote"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_DEPRECATION_WARNINGS": "0",
    })
    return env


def run_tasks(tmp_path, tasks, check=False):
    """Run ``tasks`` (module invocations) on localhost; returns the registered results in order."""
    out = tmp_path / "results.json"
    play_tasks = []
    for i, task in enumerate(tasks):
        play_tasks.append(dict(task, register=f"r{i}", ignore_errors=True))
    collected = "{" + ", ".join(f'"r{i}": r{i}' for i in range(len(tasks))) + "}"
    play_tasks.append({"name": "save", "ansible.builtin.copy": {"content": "{{ %s | to_json }}" % collected,
                                                                 "dest": str(out)},
                       "check_mode": False})
    playbook = [{"hosts": "localhost", "gather_facts": False, "connection": "local",
                 "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}"},
                 "tasks": play_tasks}]
    (tmp_path / "play.yml").write_text(json.dumps(playbook))
    (tmp_path / "hosts").write_text("localhost\n")
    cmd = [str(BIN / "ansible-playbook"), "-i", str(tmp_path / "hosts"), str(tmp_path / "play.yml")]
    if check:
        cmd.append("--check")
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    return [data[f"r{i}"] for i in range(len(tasks))], proc.stdout + proc.stderr


def return_keys(module):
    proc = subprocess.run([str(BIN / "ansible-doc"), "-j", f"specpilot.core.{module}"], cwd=ROOT,
                          env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg")),
                          capture_output=True, text=True, check=True)
    doc = json.loads(proc.stdout)[f"specpilot.core.{module}"]
    assert doc["doc"]["version_added"] and doc["examples"].strip()
    return set(doc["return"])


class _MetricsHandler(BaseHTTPRequestHandler):
    page = b""
    seen = []

    def do_GET(self):  # noqa: N802 (http.server API)
        type(self).seen.append(self.headers.get("Authorization"))
        if self.path != "/metrics":
            self.send_error(404)
            return
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.send_error(401)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(self.page)))
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *args):
        pass


@pytest.fixture
def metrics_server():
    _MetricsHandler.page = real(CPU_RUN / "metrics.txt").read_bytes()
    _MetricsHandler.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _MetricsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_modules_through_ansible(tmp_path, metrics_server):
    l13 = real_log("L13")
    cpu_log = real(CPU_RUN / "server.log")
    marker = [ln for ln in cpu_log.read_text().splitlines() if "SpecDecoding metrics:" in ln][0]
    url = metrics_server + "/metrics"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    results, output = run_tasks(tmp_path, [
        {"specpilot.core.vllm_log_facts": {"path": str(l13)}},
        {"specpilot.core.vllm_log_facts": {"content": cpu_log.read_text(), "since": marker, "max_windows": 5}},
        {"specpilot.core.vllm_log_facts": {"path": str(tmp_path / "missing.log")}},
        {"specpilot.core.vllm_log_facts": {"path": str(DATA / "v1_0.16_unknown_key.log")}},
        {"specpilot.core.vllm_metrics_facts": {"path": str(CPU_RUN / "metrics.txt")}},
        {"specpilot.core.vllm_metrics_facts": {"url": url, "headers": headers, "model_name": "tiny"}},
        {"specpilot.core.vllm_metrics_facts": {"url": url, "headers": headers, "previous": "{{ r5 }}"}},
        {"specpilot.core.vllm_metrics_facts": {"url": url}},
        {"specpilot.core.vllm_metrics_facts": {"content": "not a metrics page {"}},
    ])
    log_l13, log_cpu, log_missing, log_error, m_path, m_url, m_delta, m_denied, m_bad = results

    assert log_l13["changed"] is False and not log_l13.get("failed")
    assert log_l13["summary"]["accepted_tokens"] == 5027 and log_l13["summary"]["drafted_tokens"] == 6981
    assert len(log_l13["windows"]) == 12 and log_l13["windows"][0]["per_position_acceptance"] == [0.077, 0.0, 0.0]
    assert log_l13["log_warnings"] == [] and log_l13["log_errors"] == []

    assert log_cpu["since_found"] is True and len(log_cpu["windows"]) == 1
    assert log_cpu["speculative_config"]["method"] == "ngram" and log_cpu["vllm_version"] == "0.32.0"

    assert log_missing["failed"] is True and "not found" in log_missing["msg"]
    assert [e["code"] for e in log_error["log_errors"]] == ["UNKNOWN_SPEC_KEY"]

    assert m_path["changed"] is False and m_path["counters"]["num_drafts"] == 66
    assert m_path["derived"]["draft_acceptance_rate"] == pytest.approx(188 / 198)
    assert m_url["source"] == url and m_url["counters"]["accepted_per_position"] == [64, 62, 62]
    assert m_url["derived"]["mean_acceptance_length"] == pytest.approx(1 + 188 / 66)
    assert m_delta["derived"]["window"] == "delta" and m_delta["derived"]["num_drafts"] == 0
    assert m_delta["derived"]["interval_seconds"] >= 0
    assert m_delta["latency"]["ttft"]["window_count"] == 0
    assert m_denied["failed"] is True and "401" in m_denied["msg"]
    assert m_bad["failed"] is True and "not valid Prometheus text" in m_bad["msg"]

    # the token went to the server, never into results or output
    assert f"Bearer {TOKEN}" in _MetricsHandler.seen
    if "invocation" in m_url:
        assert m_url["invocation"]["module_args"]["headers"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    assert TOKEN not in output and TOKEN not in json.dumps(results)

    # RETURN documents every key the modules return
    assert set(log_l13) - INTERNAL_KEYS <= return_keys("vllm_log_facts")
    assert set(m_path) - INTERNAL_KEYS <= return_keys("vllm_metrics_facts")


def test_check_mode(tmp_path):
    results, _ = run_tasks(tmp_path, [
        {"specpilot.core.vllm_log_facts": {"path": str(real_log("L06"))}},
        {"specpilot.core.vllm_metrics_facts": {"path": str(real(CPU_RUN / "metrics.txt"))}},
    ], check=True)
    log, metrics = results
    assert log["changed"] is False and not log.get("skipped") and len(log["windows"]) == 2
    assert metrics["changed"] is False and not metrics.get("skipped") and metrics["counters"]["num_drafts"] == 66


def test_adhoc_command(tmp_path):
    """`ansible localhost -m specpilot.core.vllm_log_facts -a path=...` as an operator would run it."""
    env = _env(tmp_path)
    env["ANSIBLE_LOAD_CALLBACK_PLUGINS"] = "1"
    env["ANSIBLE_STDOUT_CALLBACK"] = "oneline"
    proc = subprocess.run(
        [str(BIN / "ansible"), "localhost", "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}",
         "-m", "specpilot.core.vllm_log_facts", "-a", f"path={real_log('L04')}"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("localhost | SUCCESS"))
    result = json.loads(line.split("=>", 1)[1])
    assert result["summary"]["draft_acceptance_rate"] == 0.675 and result["engine"] == "v0"
