"""specpilot_benchmark client: vllm_bench against the API emulator, the test playing the Job
controller: the role's measure_side.yml renders one `vllm bench serve` Job per level, waits for it
with specpilot.core.k8s_job_wait, reads its pod log (REAL vllm bench serve output, from
tests/data/vllm: the Job's own sh -c wrapper around vLLM 0.32.0, its printed block and then its
--save-result --save-detailed JSON) and parses it into the run the report compares, with per-request
samples; the Job is deleted after a
success, kept after a failure (with the log tail in the error); check mode creates nothing.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
from deploy_helpers import ROOT, Run, create_namespace, get  # noqa: E402

from specpilot_lab import podlogs  # noqa: E402

from ansible_collections.specpilot.core.plugins.module_utils.benchmark import vllm_bench as vb  # noqa: E402

pytestmark = pytest.mark.slow

LOG = (ROOT / "tests" / "data" / "vllm" / "bench_serve_0.32.0_detailed_speculative.log").read_text()
URL = "http://svc-predictor.%s.svc.cluster.local"
# the connection as the project's playbooks pass it to every role (no variable is set here: KUBECONFIG)
MODULE_DEFAULTS = yaml.safe_load((ROOT / "playbooks" / "benchmark.yml").read_text())[0]["module_defaults"]


class FakeJobController(threading.Thread):
    """Completes (or fails) every Job of the namespace with a pod whose log is ``log``."""

    def __init__(self, emu, ns, log, fail=False):
        super().__init__(daemon=True)
        self.emu, self.ns, self.log, self.fail = emu, ns, log, fail
        self.jobs: dict[str, dict] = {}
        self.stop = threading.Event()

    def run(self):
        client = self.emu.dynamic_client()
        jobs = client.resources.get(api_version="batch/v1", kind="Job")
        pods = client.resources.get(api_version="v1", kind="Pod")
        while not self.stop.wait(0.2):
            for job in jobs.get(namespace=self.ns).to_dict()["items"]:
                name = job["metadata"]["name"]
                if name in self.jobs:
                    continue
                self.jobs[name] = job
                pod = name + "-x1"
                container = job["spec"]["template"]["spec"]["containers"][0]["name"]
                pods.create(
                    namespace=self.ns,
                    body={
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": pod, "labels": {"job-name": name}},
                        "spec": job["spec"]["template"]["spec"],
                    },
                )
                podlogs.append(self.emu.state_dir, self.ns, pod, container, self.log.splitlines())
                code = 1 if self.fail else 0
                self._status(
                    "/api/v1/namespaces/%s/pods/%s/status" % (self.ns, pod),
                    {
                        "phase": "Failed" if self.fail else "Succeeded",
                        "containerStatuses": [
                            {
                                "name": container,
                                "state": {"terminated": {"exitCode": code, "reason": "Completed"}},
                            }
                        ],
                    },
                )
                cond = {"type": "Failed" if self.fail else "Complete", "status": "True"}
                if self.fail:
                    cond["reason"] = "BackoffLimitExceeded"
                self._status(
                    "/apis/batch/v1/namespaces/%s/jobs/%s/status" % (self.ns, name),
                    {"conditions": [cond], ("failed" if self.fail else "succeeded"): 1},
                )

    def _status(self, path, status):
        r = self.emu.request("PATCH", path, {"status": status}, content_type="application/merge-patch+json")
        assert r.status == 200, (path, r.status, r.text)


def plan_vars(ns):
    """What benchmark_plan reads of the validated plan (the twin's parts are not used by these runs)."""
    return {
        "__specpilot_benchmark_plan": {
            "name": "svc",
            "namespace": ns,
            "args_without_speculative": [],
            "spec_digest": "0" * 64,
            "inferenceservice": {"metadata": {"name": "svc"}},
        },
        "__specpilot_benchmark_service": {
            "runtime": {"image": "vllm/vllm-openai:v0.32.0"},
            "target": {"uri": "hf://org/model@main"},
        },
        "__specpilot_benchmark_runs": [],
    }


def _playbook(tmp: Path, ns: str, extra: dict | None = None) -> Path:
    play = {
        "hosts": "localhost",
        "gather_facts": False,
        "connection": "local",
        "module_defaults": MODULE_DEFAULTS,
        "vars": dict(
            {
                "specpilot_benchmark_client": "vllm_bench",
                "specpilot_benchmark_runs_per_prompt": 2,
                "specpilot_benchmark_max_tokens": 16,
                "specpilot_benchmark_vllm_bench_poll_interval": 0.3,
                "specpilot_benchmark_vllm_bench_api_key_secret": {"name": "bench-token", "key": "token"},
                "specpilot_benchmark_qps_levels": [4],
                **plan_vars(ns),
            },
            **(extra or {}),
        ),
        "tasks": [
            {
                "name": "Plan the benchmark (levels, workload, the arguments of vllm bench serve)",
                "ansible.builtin.include_role": {"name": "specpilot_benchmark", "tasks_from": "plan.yml"},
            },
            {
                "name": "Measure one side",
                "ansible.builtin.include_role": {
                    "name": "specpilot_benchmark",
                    "tasks_from": "measure_side.yml",
                },
                "vars": {
                    "__specpilot_benchmark_side": "speculative",
                    "__specpilot_benchmark_side_url": URL % ns,
                    "__specpilot_benchmark_side_isvc": "svc",
                },
            },
            {
                "name": "Save the runs",
                "ansible.builtin.copy": {
                    "content": "{{ __specpilot_benchmark_runs | to_json }}",
                    "dest": str(tmp / "runs.json"),
                    "mode": "0644",
                },
                "when": "not ansible_check_mode",
            },
        ],
    }
    path = tmp / "play.yml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return path


def _run(emulator, tmp, ns, *args, log=LOG, fail=False, extra=None):
    ctl = FakeJobController(emulator, ns, log, fail)
    ctl.start()
    inv = tmp / "hosts.yml"
    inv.write_text("localhost:\n")
    try:
        run = Run(emulator, tmp, inv, *args, playbook=str(_playbook(tmp, ns, extra))).wait(300)
    finally:
        ctl.stop.set()
        ctl.join(5)
    return run, ctl.jobs


def _jobs(emulator, ns):
    client = emulator.dynamic_client()
    return [
        j["metadata"]["name"]
        for j in client.resources.get(api_version="batch/v1", kind="Job").get(namespace=ns).to_dict()["items"]
    ]


def test_job_spec_parsed_log_and_cleanup(emulator, tmp_path):
    ns = "vb-ok-%d" % time.monotonic_ns()
    create_namespace(emulator, ns)
    run, jobs = _run(emulator, tmp_path, ns)
    assert run.rc == 0, run.out[-6000:]
    assert list(jobs) == ["svc-vbench-spec-0"]
    job = jobs["svc-vbench-spec-0"]
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "vllm/vllm-openai:v0.32.0"
    # vllm bench serve under sh -c, which prints the result JSON after it
    assert c["command"] == ["sh", "-c", vb.JOB_SCRIPT, "vllm-bench-serve", "vllm", "bench", "serve"]
    args = c["args"]

    def arg(flag):
        return args[args.index(flag) + 1]

    assert arg("--base-url") == URL % ns and arg("--endpoint") == "/v1/completions"
    assert arg("--model") == "org/model" and arg("--served-model-name") == "svc"
    assert arg("--request-rate") == "4" and arg("--num-prompts") == str(2 * 6)
    assert arg("--dataset-name") == "sharegpt" and arg("--sharegpt-output-len") == "16"
    assert arg("--percentile-metrics") == "ttft,tpot,itl,e2el" and "--disable-shuffle" in args
    assert "--max-concurrency" not in args
    assert "--save-detailed" in args and arg("--result-dir") == vb.RESULT_DIR
    # the token comes from the Secret, never from the arguments
    assert {
        "name": "OPENAI_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "bench-token", "key": "token"}},
    } in c["env"]
    assert not any("token" in a.lower() for a in args)
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    # the log became the run the report compares
    runs = json.loads((tmp_path / "runs.json").read_text())
    assert len(runs) == 1 and runs[0]["side"] == "speculative"
    assert runs[0]["level"]["key"] == "qps=4"
    s = runs[0]["summary"]
    flat = vb.parse_any(LOG)
    assert s["client"] == "vllm bench serve" and s["ok"] == 24 and len(s["samples"]) == 24
    assert s["metrics"]["tpot_ms"]["p50"] == pytest.approx(flat["median_tpot_ms"])
    assert s["metrics"]["ttft_ms"]["p99"] == pytest.approx(flat["p99_ttft_ms"])
    assert s["metrics"]["request_tok_s"]["count"] == 24 and s["samples"][0]["text_sha256"]
    assert runs[0]["config"]["sampling"]["temperature"] == 0.0
    # succeeded: Job and ConfigMap deleted
    assert _jobs(emulator, ns) == []
    assert get(emulator, "v1", "ConfigMap", "svc-vbench-spec-0", ns) is None


def test_failed_job_is_kept_with_its_log_tail(emulator, tmp_path):
    ns = "vb-fail-%d" % time.monotonic_ns()
    create_namespace(emulator, ns)
    log = "Starting main benchmark run...\nConnectionRefusedError: [Errno 111] Connect call failed\n"
    run, _ = _run(emulator, tmp_path, ns, log=log, fail=True)
    assert run.rc != 0
    assert "ConnectionRefusedError" in run.out and "svc-vbench-spec-0" in run.out
    assert "The Job is kept" in run.out
    assert _jobs(emulator, ns) == ["svc-vbench-spec-0"]


def test_check_mode_creates_nothing(emulator, tmp_path):
    ns = "vb-check-%d" % time.monotonic_ns()
    create_namespace(emulator, ns)
    run, jobs = _run(emulator, tmp_path, ns, "--check")
    assert run.rc == 0, run.out[-6000:]
    assert jobs == {} and _jobs(emulator, ns) == []
    assert get(emulator, "v1", "ConfigMap", "svc-vbench-spec-0", ns) is None
