"""The lab kubelet's CPU manager (lab/specpilot_lab/controller/cpus.py) and `make lab-traffic`'s bounds
(lab/specpilot_lab/traffic.py), without a lab: issue 39 items 0 and 3."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specpilot_lab import traffic
from specpilot_lab.controller import cpus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize(
    ("cores", "text"), [([0], "0"), ([0, 1], "0-1"), ([0, 1, 2, 5], "0-2,5"), ([3, 1, 7, 6], "1,3,6-7")]
)
def test_cpu_lists_are_written_as_linux_writes_them(cores, text):
    assert cpus.cpu_list(cores) == text


@pytest.mark.parametrize(
    ("resources", "cores"),
    [
        ({"requests": {"cpu": "1"}}, 1),
        ({"requests": {"cpu": "1500m"}}, 2),
        ({"requests": {"cpu": "250m"}}, 1),
        ({"limits": {"cpu": "2"}}, 2),  # the limit when nothing is requested, as Kubernetes defaults it
        ({"requests": {"memory": "4Gi"}}, 0),
        ({}, 0),
    ],
)
def test_a_pod_asks_for_whole_cores_rounded_up(resources, cores):
    assert cpus.requested_cores({"resources": resources}) == cores


def test_cores_are_held_alone_while_there_are_enough_then_the_rest_share_without_binding(tmp_path):
    mgr = cpus.CpuManager(tmp_path, cores=[0, 1, 2])
    a, b = mgr.allocate("ns/a", 1), mgr.allocate("ns/b", 2)
    assert (a.cores, a.exclusive, b.cores, b.exclusive) == ((0,), True, (1, 2), True)
    assert mgr.allocate("ns/a", 1) is a  # the same cores for the pod's life (restarts included)
    short = mgr.allocate("ns/c", 1)
    assert short.cores == (0, 1, 2) and not short.exclusive  # every core, no binding: never all on core 0
    assert short.env({}) == {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}
    assert a.env({}) == {"VLLM_CPU_OMP_THREADS_BIND": "0"} and b.env({}) == {"VLLM_CPU_OMP_THREADS_BIND": "1-2"}
    # the container's own setting wins
    assert b.env({"VLLM_CPU_OMP_THREADS_BIND": "auto"}) == {}
    assert short.env({"OMP_NUM_THREADS": "4"}) == {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    mgr.release("ns/a")
    nothing = mgr.allocate("ns/d", 0)
    assert nothing.cores == (0,) and not nothing.exclusive  # no request: the shared pool, core 0 is free
    assert mgr.allocate("ns/e", 1).cores == (0,)
    state = json.loads((tmp_path / "cpus.json").read_text())
    assert state["node_cores"] == [0, 1, 2] and state["engines"]["ns/b"] == {
        "cores": [1, 2],
        "exclusive": True,
        "requested": 2,
    }
    lines = cpus.describe(tmp_path)
    assert lines[0] == "node cores 0-2 (this machine's, for the engines)"
    assert "engine ns/b: cores 1-2 (exclusive; requests 2 cpu)" in lines
    assert "engine ns/c: cores 0-2 (shared pool, no binding (cores short); requests 1 cpu)" in lines
    assert "engine ns/d: cores 0 (shared pool, no binding (no cpu request); requests 0 cpu)" in lines


def test_the_taskset_prefix_holds_the_process_and_its_children_to_the_cores():
    core = max(os.sched_getaffinity(0))
    cpuset = cpus.CpuSet((core,), True, 1)
    child = "import os, subprocess, sys; print(sorted(os.sched_getaffinity(0))); sys.stdout.flush(); " + (
        "subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'])"
    )
    out = subprocess.run(
        cpuset.taskset() + [sys.executable, "-c", child], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [f"[{core}]", f"[{core}]"]


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8080", "http://localhost:1/v1", "http://127.3.4.5:99", "http://[::1]:80"],
)
def test_lab_traffic_goes_to_this_machine(url):
    assert traffic.loopback_url(url) == url


@pytest.mark.parametrize("url", ["http://10.0.0.5:80", "https://lab-ngram.example.com", "", "http://0.0.0.0:1"])
def test_lab_traffic_refuses_any_other_address(url):
    with pytest.raises(traffic.TrafficError, match="loopback addresses only"):
        traffic.loopback_url(url)


@pytest.mark.parametrize(("seconds", "qps"), [(0, 1), (1801, 1), (60, 0), (60, 10.5), (-5, 1)])
def test_lab_traffic_is_bounded_in_time_and_rate(seconds, qps):
    with pytest.raises(traffic.TrafficError, match="give"):
        traffic.bounded(seconds, qps)
    assert traffic.bounded(1800, 10) == (1800, 10)


def test_lab_traffic_sends_repetitive_greedy_requests_at_the_rate_asked():
    cfg = traffic.batch_config("http://127.0.0.1:1", "lab-ngram", 2, 10, 32)
    assert cfg["qps"] == 2 and cfg["sampling"] == {"temperature": 0.0, "max_tokens": 32}
    assert len(cfg["prompts"]) * cfg["runs_per_prompt"] >= 20 and cfg["model"] == "lab-ngram"
    assert all(p["prompt"].split()[0] in p["prompt"].split()[1:] for p in cfg["prompts"])  # repetitive


def test_make_lab_traffic_without_a_service_says_how_to_call_it():
    proc = subprocess.run(["make", "-s", "lab-traffic"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0 and "make lab-traffic SERVICE=" in proc.stderr
    assert "[MAX_TOKENS=32]" in proc.stderr


def test_make_lab_traffic_passes_the_tokens_a_request_the_readme_asks_for():
    """The README's k change sends 256 tokens a request (make lab-traffic MAX_TOKENS=256); the default is 32."""

    def dry(*extra):
        cmd = ["make", "-s", "-n", "lab-traffic", "SERVICE=lab-ngram", *extra]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout

    assert "specpilot_lab.traffic lab-ngram --seconds 120 --qps 1 --max-tokens 32" in dry()
    assert "--seconds 900 --qps 4 --max-tokens 256" in dry("SECONDS=900", "QPS=4", "MAX_TOKENS=256")
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert "make lab-traffic SERVICE=lab-ngram SECONDS=900 QPS=4 MAX_TOKENS=256 &" in readme
