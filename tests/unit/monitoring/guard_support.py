"""Test harness of the acceptance guard: engines' /metrics pages served from a local HTTP server
(built from the real vLLM 0.32.0 page, see vllm_pages), InferenceServices in the API emulator, an
inventory, and ansible-playbook runs of playbooks/guard.yml."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

import vllm_pages as vp

ROOT = vp.ROOT
PLAYBOOK = ROOT / "playbooks" / "guard.yml"
STUB_ROLES = ROOT / "tests" / "data" / "roles"
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
NGRAM_ARG = '--speculative-config={"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}'
ISVC_PATH = "/apis/serving.kserve.io/v1beta1/namespaces/{ns}/inferenceservices"



def send_metrics_page(handler: BaseHTTPRequestHandler, text: str) -> None:
    """Answer ``handler``'s request with a /metrics page (Prometheus' text format)."""
    body = text.encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)

class MetricsServer:
    """One /metrics page per service at /svc/<name>/metrics; every GET is one unit (a "minute") of
    that service's traffic later than the previous one."""

    def __init__(self):
        self.base = vp.real_page()
        self.services: dict[str, dict] = {}
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server API)
                parts = self.path.strip("/").split("/")
                if len(parts) != 3 or parts[0] != "svc" or parts[2] != "metrics" or parts[1] not in server.services:
                    self.send_error(404)
                    return
                send_metrics_page(self, server.page(parts[1]))

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def add(self, name: str, traffic: vp.Traffic, spec: bool = True) -> str:
        with self.lock:
            self.services[name] = {"traffic": traffic, "spec": spec, "minutes": 0, "scrapes": 0}
        return self.url(name)

    def set(self, name: str, **changes) -> None:
        with self.lock:
            self.services[name].update(changes)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/svc/{name}"

    def scrapes(self, name: str) -> int:
        return self.services[name]["scrapes"]

    def page(self, name: str) -> str:
        with self.lock:
            svc = self.services[name]
            svc["scrapes"] += 1
            svc["minutes"] += 1
            minutes, traffic, spec = svc["minutes"], svc["traffic"], svc["spec"]
        # KServe serves the model under the InferenceService name (--served-model-name={{.Name}})
        page = vp.advance(self.base, traffic, minutes).replace(f'model_name="{vp.MODEL}"', f'model_name="{name}"')
        return page if spec else vp.without_spec_series(page)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def create_namespace(emu, ns: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    resp = emu.request("POST", "/api/v1/namespaces", body)
    assert resp.status in (201, 409), resp


def create_isvc(emu, ns: str, name: str, url: str | None, speculative: bool = True, vllm_version: str = "0.32.0"):
    args = ["--model=/mnt/models/target", "--max-model-len=512"] + ([NGRAM_ARG] if speculative else [])
    body = {
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": name, "namespace": ns,
                     "annotations": {"serving.kserve.io/deploymentMode": "Standard",
                                     "specpilot.io/vllm-version": vllm_version}},
        "spec": {"predictor": {"model": {"modelFormat": {"name": "vLLM"}, "runtime": "vllm-cpu", "args": args}}},
    }
    resp = emu.request("POST", ISVC_PATH.format(ns=ns), body)
    assert resp.status == 201, resp
    if url:
        status = {"status": {"url": url, "address": {"url": url},
                             "conditions": [{"type": "Ready", "status": "True"}]}}
        resp = emu.request("PATCH", ISVC_PATH.format(ns=ns) + f"/{name}/status", status,
                           content_type="application/merge-patch+json")
        assert resp.status == 200, resp
    return get_isvc(emu, ns, name)


def get_isvc(emu, ns: str, name: str) -> dict:
    resp = emu.request("GET", ISVC_PATH.format(ns=ns) + f"/{name}")
    assert resp.status == 200, resp
    return resp.json()


def get_configmap(emu, ns: str, name: str) -> dict | None:
    resp = emu.request("GET", f"/api/v1/namespaces/{ns}/configmaps/{name}")
    return resp.json() if resp.status == 200 else None


def guard_history(emu, ns: str, name: str) -> list[dict]:
    cm = get_configmap(emu, ns, f"{name}-specpilot-guard")
    return json.loads(cm["data"]["history"]) if cm else []


def write_inventory(path: Path, ns: str, services: list[str], extra: dict | None = None,
                    host_vars: dict | None = None) -> Path:
    hosts = {s: dict((host_vars or {}).get(s, {})) for s in services}
    inv = {"specpilot_services": {"hosts": hosts, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "specpilot_namespace": ns, "specpilot_vllm_version": "0.32.0", **(extra or {})}}}
    path.write_text(yaml.safe_dump(inv))
    return path


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, report_dir: Path):
        self.proc = proc
        self.rc = proc.returncode
        self.out = proc.stdout + proc.stderr
        # the next run overwrites the files: keep this run's
        json_file, md_file = report_dir / "guard.json", report_dir / "guard.md"
        self.report = json.loads(json_file.read_text()) if json_file.is_file() else None
        self.markdown = md_file.read_text() if md_file.is_file() else None
        for stale in (json_file, md_file):
            if stale.is_file():
                stale.unlink()

    @property
    def recap(self) -> dict:
        return {m.group(1): {"ok": int(m.group(2)), "changed": int(m.group(3)), "failed": int(m.group(5))}
                for m in RECAP.finditer(self.proc.stdout)}

    def service(self, name: str) -> dict:
        return next(s for s in self.report["services"] if s["name"] == name)


def run_guard(emu, tmp_path: Path, inventory: Path, *args: str, extra: dict | None = None,
              roles_path: Path | None = None, timeout: int = 300, env_extra: dict | None = None) -> Run:
    report_dir = tmp_path / "report"
    env = dict(os.environ, **(env_extra or {}))
    env.update(
        K8S_AUTH_KUBECONFIG=str(emu.kubeconfig),
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        TMPDIR=str(emu.state_dir / "tmp"),  # kubernetes.core caches discovery under TMPDIR
        ANSIBLE_NOCOLOR="1",
    )
    (emu.state_dir / "tmp").mkdir(parents=True, exist_ok=True)
    if roles_path is not None:
        env["ANSIBLE_ROLES_PATH"] = f"{ROOT / 'roles'}:{roles_path}"
    variables = {"specpilot_guard_window_seconds": 1, "specpilot_guard_min_draft_tokens": 20,
                 "specpilot_guard_report_dir": str(report_dir),
                 "specpilot_guard_verdict_dirs": [str(tmp_path / "verdicts" / k) for k in ("benchmark", "canary")],
                 **(extra or {})}
    cmd = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory),
           "-e", json.dumps(variables), str(PLAYBOOK), *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return Run(proc, report_dir)


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


class Prometheus:
    """A real Prometheus (Debian's build, unpacked by `make`) scraping the MetricsServer every second,
    with the namespace target label a PodMonitor would add (and a service's own target labels, ``labels``:
    the pod label of a canary's arms), or with the given ``scrape_configs``."""

    BINARY = ROOT / ".venv" / "bin" / "prometheus"

    def __init__(self, workdir: Path, server: MetricsServer | None, ns: str, services: list[str],
                 labels: dict[str, dict] | None = None, scrape_configs: list[dict] | None = None):
        import socket
        import time

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                  "scrape_configs": scrape_configs or [{"job_name": name, "metrics_path": f"/svc/{name}/metrics",
                                      "static_configs": [{"targets": [f"127.0.0.1:{server.port}"],
                                                          "labels": {"namespace": ns,
                                                                     **(labels or {}).get(name, {})}}]}
                                     for name in services]}
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = open(workdir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [str(self.BINARY), f"--config.file={workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                fetch(self.url + "/-/ready")
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.2)
        self.close()
        raise RuntimeError("prometheus did not start: " + (workdir / "prometheus.log").read_text()[-2000:])

    def query(self, expr: str) -> list:
        import urllib.parse

        query = urllib.parse.urlencode({"query": expr})
        return json.loads(fetch(self.url + "/api/v1/query?" + query))["data"]["result"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
