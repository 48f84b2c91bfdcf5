"""pods/exec over WebSocket, as the kubernetes client (kubernetes.stream) and kubernetes.core.k8s_exec
speak it. Here the "sandbox" the controller would publish is plain ``env -- VAR=container`` (the command runs on this
machine); tests/lab/test_pod_exec_fake.py runs it in a lab pod's own sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from emulator_helpers import make_namespace
from kubernetes import client
from kubernetes.stream import stream

from specpilot_lab import podexec, podlogs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def emu(emulator_factory):
    return emulator_factory(crds=[], name="exec")


def running_pod(emu, ns: str, name: str = "p", containers=("main", "side"), labels=None) -> None:
    spec = {"containers": [{"name": c, "image": "img"} for c in containers]}
    meta = {"name": name, "labels": labels or {}}
    r = emu.request(
        "POST",
        f"/api/v1/namespaces/{ns}/pods",
        {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec},
    )
    assert r.status == 201, r
    for c in containers:
        podexec.publish(emu.state_dir, ns, name, c, ["env", "--", "SPECPILOT_EXEC_CONTAINER=" + c])


def exec_in(api, ns, command, container="main", preload=True, stdin=False):
    """kubernetes.stream's exec into pod p: the output (preload) or the WebSocket client."""
    return stream(
        api.connect_get_namespaced_pod_exec,
        "p",
        ns,
        command=command,
        container=container,
        stderr=True,
        stdin=stdin,
        stdout=True,
        tty=False,
        _preload_content=preload,
    )


def test_the_kubernetes_client_runs_a_command_and_reads_its_channels(emu):
    ns = make_namespace(emu)
    running_pod(emu, ns)
    api = client.CoreV1Api(emu.api_client())
    out = exec_in(api, ns, ["sh", "-c", "echo out; echo err >&2"], container="side", preload=False)
    out.run_forever(timeout=30)
    assert out.read_stdout() == "out\n" and out.read_stderr() == "err\n" and out.returncode == 0
    # the container's own environment (here: the sandbox the controller published for "side")
    assert exec_in(api, ns, ["sh", "-c", "echo $SPECPILOT_EXEC_CONTAINER"], container="side") == "side\n"
    failing = exec_in(api, ns, ["sh", "-c", "exit 3"], preload=False)
    failing.run_forever(timeout=30)
    assert failing.returncode == 3  # read from the status on channel 3 (NonZeroExitCode, cause ExitCode)


def test_stdin_reaches_the_command(emu):
    ns = make_namespace(emu)
    running_pod(emu, ns)
    ws = exec_in(client.CoreV1Api(emu.api_client()), ns, ["cat"], preload=False, stdin=True)
    ws.write_stdin("hello\n")
    ws.update(timeout=5)
    assert ws.read_stdout(timeout=5) == "hello\n"
    ws.close()


def test_what_the_api_refuses(emu):
    ns = make_namespace(emu)
    running_pod(emu, ns, containers=("main",))
    base = f"/api/v1/namespaces/{ns}/pods/p/exec"
    upgrade = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Protocol": "v4.channel.k8s.io",
    }
    r = emu.request("GET", base + "?container=main", headers=upgrade)
    assert r.status == 400 and r.json()["message"] == "you must specify at least 1 command"
    r = emu.request("GET", base + "?command=ls&container=nope", headers=upgrade)
    assert r.status == 400 and r.json()["message"] == "container nope is not valid for pod p"
    r = emu.request("POST", base + "?command=ls")
    assert r.status == 400 and r.json()["message"] == "Upgrade request required"
    r = emu.request(
        "GET", base + "?command=ls", headers=dict(upgrade, **{"Sec-WebSocket-Protocol": "channel.k8s.io"})
    )
    assert r.status == 400 and "none of the offered subprotocols" in r.json()["message"]
    podexec.withdraw(emu.state_dir, ns, "p", "main")  # the container stopped
    r = emu.request("GET", base + "?command=ls", headers=upgrade)
    assert (
        r.status == 400
        and r.json()["message"] == 'unable to upgrade connection: container not found ("main")'
    )
    r = emu.request("GET", f"/api/v1/namespaces/{ns}/pods/gone/exec?command=ls", headers=upgrade)
    assert r.status == 404
    # discovery names the subresource as the API server does
    res = {x["name"]: x for x in emu.request("GET", "/api/v1").json()["resources"]}
    assert res["pods/exec"]["verbs"] == ["create", "get"] and res["pods/exec"]["kind"] == "PodExecOptions"


def test_k8s_exec_of_kubernetes_core_and_specpilot_pod_exec(emu, tmp_path):
    ns = make_namespace(emu)
    running_pod(emu, ns, containers=("main",), labels={"app": "x"})
    podlogs.append(emu.state_dir, ns, "p", "main", ["first", "second"])
    play = tmp_path / "play.yml"
    play.write_text(
        json.dumps(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "ls",
                            "kubernetes.core.k8s_exec": {"namespace": ns, "pod": "p", "command": "ls /"},
                            "register": "ok",
                        },
                        {
                            "name": "fail",
                            "kubernetes.core.k8s_exec": {
                                "namespace": ns,
                                "pod": "p",
                                "command": "sh -c 'exit 2'",
                            },
                            "register": "bad",
                            "ignore_errors": True,
                        },
                        # specpilot.core.pod_exec: the same exec from the worker process (argv or a string)
                        {
                            "name": "look",
                            "specpilot.core.pod_exec": {
                                "namespace": ns,
                                "pod": "p",
                                "command": ["sh", "-c", "echo in $SPECPILOT_EXEC_CONTAINER; echo e >&2"],
                            },
                            "register": "look",
                        },
                        {
                            "name": "look failing",
                            "specpilot.core.pod_exec": {
                                "namespace": ns,
                                "pod": "p",
                                "command": "sh -c 'exit 2'",
                            },
                            "register": "look_bad",
                            "failed_when": False,
                        },
                        {
                            "name": "look at no pod",
                            "specpilot.core.pod_exec": {"namespace": ns, "pod": "nope", "command": ["true"]},
                            "register": "look_none",
                            "failed_when": False,
                        },
                        # specpilot.core.pod_log and k8s_read: k8s_log's and k8s_info's answers, in the worker
                        {
                            "name": "log",
                            "specpilot.core.pod_log": {"namespace": ns, "name": "p", "container": "main"},
                            "register": "log",
                        },
                        {
                            "name": "log tail",
                            "specpilot.core.pod_log": {"namespace": ns, "name": "p", "tail_lines": 1},
                            "register": "log_tail",
                        },
                        {
                            "name": "log of no pod",
                            "specpilot.core.pod_log": {"namespace": ns, "name": "nope"},
                            "register": "log_none",
                            "failed_when": False,
                        },
                        {
                            "name": "read",
                            "specpilot.core.k8s_read": {"kind": "Pod", "namespace": ns, "name": "p"},
                            "register": "read",
                        },
                        {
                            "name": "read by label",
                            "specpilot.core.k8s_read": {
                                "kind": "Pod",
                                "namespace": ns,
                                "label_selectors": ["app=x", "tier!=db"],
                            },
                            "register": "read_labelled",
                        },
                        {
                            "name": "read none",
                            "specpilot.core.k8s_read": {"kind": "Pod", "namespace": ns, "name": "nope"},
                            "register": "read_none",
                        },
                        {
                            "name": "save",
                            "ansible.builtin.copy": {
                                "content": "{{ {'ok': ok, 'bad': bad, 'look': look, 'look_bad': look_bad,"
                                " 'look_none': look_none, 'log': log, 'log_tail': log_tail, 'log_none': log_none,"
                                " 'read': read, 'read_labelled': read_labelled, 'read_none': read_none} | to_json }}",
                                "dest": str(tmp_path / "out.json"),
                            },
                        },
                    ],
                }
            ]
        )
    )
    env = dict(
        os.environ,
        K8S_AUTH_KUBECONFIG=str(emu.kubeconfig),
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
        TMPDIR=str(tmp_path),
    )
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            str(play),
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["ok"]["rc"] == 0 and "usr" in out["ok"]["stdout_lines"], out["ok"]
    assert out["bad"]["rc"] == 2 and out["bad"]["failed"], out["bad"]
    look = out["look"]
    assert look["rc"] == 0 and look["stdout_lines"] == ["in main"] and look["stderr"] == "e\n", look
    assert not look["changed"] and not look.get("failed"), look
    bad = out["look_bad"]
    assert bad["rc"] == 2 and bad["msg"] == f"the command exited with 2 in pod {ns}/p", bad
    none = out["look_none"]
    assert "rc" not in none and none["msg"].startswith(f"cannot exec in pod {ns}/nope: "), none
    assert "404" in none["msg"] or "not found" in none["msg"].lower(), none
    assert out["log"]["log"] == "first\nsecond\n" and out["log"]["log_lines"] == ["first", "second", ""]
    assert out["log_tail"]["log_lines"] == ["second", ""] and not out["log"]["changed"]
    assert out["log_none"]["msg"].startswith(f"cannot read the log of pod {ns}/nope: "), out["log_none"]
    assert [r["metadata"]["name"] for r in out["read"]["resources"]] == ["p"] and not out["read"]["changed"]
    assert [r["metadata"]["name"] for r in out["read_labelled"]["resources"]] == ["p"]
    assert out["read_none"]["resources"] == []


def test_framing_as_rfc_6455_says():
    assert podexec.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455 1.3
    import io

    for size in (5, 300, 70000):
        data = bytes(range(256)) * (size // 256) + bytes(size % 256)
        mask = b"\x01\x02\x03\x04"
        raw = podexec.frame(podexec.OP_BINARY, data)
        # a client's frame: the same, masked
        head = bytearray(raw[: len(raw) - size])
        head[1] |= 0x80
        masked = bytes(head) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        assert podexec.read_frame(io.BytesIO(raw)) == (podexec.OP_BINARY, data)
        assert podexec.read_frame(io.BytesIO(masked)) == (podexec.OP_BINARY, data)
    assert podexec.read_frame(io.BytesIO(b"")) is None
    assert podexec.choose_protocol("v5.channel.k8s.io,v4.channel.k8s.io") == "v5.channel.k8s.io"
    assert podexec.choose_protocol("v4.channel.k8s.io") == "v4.channel.k8s.io"
    assert podexec.choose_protocol("channel.k8s.io") is None
    assert podexec.exit_status(0, ["ls"]) == {"metadata": {}, "status": "Success"}
    assert podexec.exit_status(2, ["ls"])["details"]["causes"] == [{"reason": "ExitCode", "message": "2"}]
