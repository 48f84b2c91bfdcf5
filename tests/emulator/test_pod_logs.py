"""pods/log over the podlogs file contract, with every parameter kubectl uses."""

from __future__ import annotations

import http.client
import threading
import time

import pytest
from emulator_helpers import ADMIN_HEADERS, make_namespace

from specpilot_lab import podlogs


@pytest.fixture(scope="module")
def emu(emulator_factory):
    return emulator_factory(crds=[], name="logs")


def make_pod(emu, ns: str, name: str, containers=("main",), init=()) -> None:
    spec = {"containers": [{"name": c, "image": "img"} for c in containers]}
    if init:
        spec["initContainers"] = [{"name": c, "image": "img"} for c in init]
    r = emu.request(
        "POST",
        f"/api/v1/namespaces/{ns}/pods",
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec},
    )
    assert r.status == 201, r


def log(emu, ns: str, pod: str, query: str = "") -> tuple[int, str, str]:
    r = emu.request("GET", f"/api/v1/namespaces/{ns}/pods/{pod}/log{query}", accept="*/*")
    return r.status, r.header("Content-Type"), r.text


def test_plain_log_strips_timestamps(emu):
    ns = make_namespace(emu)
    make_pod(emu, ns, "p")
    podlogs.append(emu.state_dir, ns, "p", "main", ["first", "second", "third"])
    status, ctype, text = log(emu, ns, "p")
    assert status == 200 and ctype == "text/plain"
    assert text == "first\nsecond\nthird\n"
    status, _, text = log(emu, ns, "p", "?timestamps=true")
    lines = text.splitlines()
    assert lines[0].endswith(" first") and lines[0][:4].isdigit() and "T" in lines[0].split()[0]
    assert lines[0].split()[0].endswith("Z")


def test_tail_lines_and_limit_bytes(emu):
    ns = make_namespace(emu)
    make_pod(emu, ns, "p")
    podlogs.append(emu.state_dir, ns, "p", "main", [f"line {i}" for i in range(10)])
    assert log(emu, ns, "p", "?tailLines=2")[2] == "line 8\nline 9\n"
    assert log(emu, ns, "p", "?tailLines=0")[2] == ""
    assert log(emu, ns, "p", "?limitBytes=8")[2] == "line 0\nl"


def test_since_seconds_and_since_time(emu):
    ns = make_namespace(emu)
    make_pod(emu, ns, "p")
    old = time.time_ns() - 3600 * 10**9
    podlogs.append(emu.state_dir, ns, "p", "main", ["old line"], ts_ns=old)
    podlogs.append(emu.state_dir, ns, "p", "main", ["new line"])
    assert log(emu, ns, "p", "?sinceSeconds=60")[2] == "new line\n"
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 7200))
    assert log(emu, ns, "p", f"?sinceTime={since}")[2] == "old line\nnew line\n"


def test_container_choice(emu):
    ns = make_namespace(emu)
    make_pod(emu, ns, "multi", containers=("a", "b"), init=("setup",))
    podlogs.append(emu.state_dir, ns, "multi", "b", ["from b"])
    podlogs.append(emu.state_dir, ns, "multi", "setup", ["from init"])
    r = emu.request("GET", f"/api/v1/namespaces/{ns}/pods/multi/log")
    assert r.status == 400
    assert r.json()["message"] == (
        "a container name must be specified for pod multi, choose one of: [a b] "
        "or one of the init containers: [setup]"
    )
    assert log(emu, ns, "multi", "?container=b")[2] == "from b\n"
    assert log(emu, ns, "multi", "?container=setup")[2] == "from init\n"
    r = emu.request("GET", f"/api/v1/namespaces/{ns}/pods/multi/log?container=zzz")
    assert r.status == 400 and r.json()["message"] == "container zzz is not valid for pod multi"
    assert emu.request("GET", f"/api/v1/namespaces/{ns}/pods/nopod/log").status == 404


def test_previous(emu):
    ns = make_namespace(emu)
    make_pod(emu, ns, "p")
    r = emu.request("GET", f"/api/v1/namespaces/{ns}/pods/p/log?previous=true")
    assert (
        r.status == 400 and r.json()["message"] == 'previous terminated container "main" in pod "p" not found'
    )
    w = podlogs.PodLogWriter(emu.state_dir, ns, "p", "main")
    w.write_line("crash 1")
    w.rotate()
    w.write("restarted\npartial")
    w.close()
    assert log(emu, ns, "p", "?previous=true")[2] == "crash 1\n"
    assert log(emu, ns, "p")[2] == "restarted\npartial\n"


def test_follow_streams_until_the_container_ends(emu):
    ns = make_namespace(emu)
    make_pod(emu, ns, "f")
    writer = podlogs.PodLogWriter(emu.state_dir, ns, "f", "main")
    writer.write_line("one")
    conn = http.client.HTTPConnection("127.0.0.1", emu.port, timeout=10)
    conn.request("GET", f"/api/v1/namespaces/{ns}/pods/f/log?follow=true", headers=ADMIN_HEADERS)
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Transfer-Encoding") == "chunked"
    assert resp.readline() == b"one\n"

    def later():
        time.sleep(0.3)
        writer.write_line("two")
        time.sleep(0.3)
        emu.request(
            "PATCH",
            f"/api/v1/namespaces/{ns}/pods/f/status",
            {
                "status": {
                    "phase": "Succeeded",
                    "containerStatuses": [
                        {
                            "name": "main",
                            "ready": False,
                            "restartCount": 0,
                            "image": "img",
                            "imageID": "",
                            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
                        }
                    ],
                }
            },
            content_type="application/merge-patch+json",
        )

    t = threading.Thread(target=later)
    t.start()
    t0 = time.monotonic()
    assert resp.readline() == b"two\n"
    assert resp.read() == b""  # the stream ends when the container has terminated
    assert time.monotonic() - t0 < 5
    t.join()
    writer.close()
    conn.close()


def test_follow_ends_when_the_pod_is_deleted(emu):
    ns = make_namespace(emu)
    make_pod(emu, ns, "gone")
    podlogs.append(emu.state_dir, ns, "gone", "main", ["hello"])
    conn = http.client.HTTPConnection("127.0.0.1", emu.port, timeout=10)
    conn.request("GET", f"/api/v1/namespaces/{ns}/pods/gone/log?follow=1", headers=ADMIN_HEADERS)
    resp = conn.getresponse()
    assert resp.readline() == b"hello\n"
    emu.request("DELETE", f"/api/v1/namespaces/{ns}/pods/gone")
    assert resp.read() == b""
    conn.close()


def test_waiting_container(emu):
    ns = make_namespace(emu)
    make_pod(emu, ns, "w")
    emu.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/w/status",
        {
            "status": {
                "containerStatuses": [
                    {
                        "name": "main",
                        "ready": False,
                        "restartCount": 0,
                        "image": "img",
                        "imageID": "",
                        "state": {"waiting": {"reason": "ContainerCreating"}},
                    }
                ]
            }
        },
        content_type="application/merge-patch+json",
    )
    r = emu.request("GET", f"/api/v1/namespaces/{ns}/pods/w/log")
    assert r.status == 400
    assert r.json()["message"] == 'container "main" in pod "w" is waiting to start: ContainerCreating'


def test_python_client_read_log(emu):
    from kubernetes import client

    ns = make_namespace(emu)
    make_pod(emu, ns, "py")
    podlogs.append(emu.state_dir, ns, "py", "main", ["via client"])
    core = client.CoreV1Api(emu.api_client())
    assert core.read_namespaced_pod_log("py", ns, container="main", tail_lines=5) == "via client\n"
