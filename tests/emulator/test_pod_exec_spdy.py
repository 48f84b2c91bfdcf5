"""pods/exec over SPDY/3.1, as Debian's kubectl 1.20 speaks it (``.venv/bin/kubectl exec``; kubectl
>= 1.30 speaks WebSocket, test_pod_exec.py), and inside a running container's namespaces where the
API server may enter them (podexec.target). The framing itself: test_spdy.py."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from emulator_helpers import make_namespace
from kubernetes import client
from kubernetes.stream import stream

from specpilot_lab import podexec
from specpilot_lab.controller.jobs import bwrap_available, bwrap_base

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = ROOT / ".venv" / "bin" / "kubectl"

needs_kubectl = pytest.mark.skipif(not KUBECTL.exists(), reason="no .venv/bin/kubectl: run make")


@pytest.fixture(scope="module")
def emu(emulator_factory):
    return emulator_factory(crds=[], name="exec-spdy")


def running_pod(emu, ns: str, containers=("main",)) -> None:
    """A pod whose containers 'run': their sandbox is ``env VAR=container`` on this machine."""
    spec = {"containers": [{"name": c, "image": "img"} for c in containers]}
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    assert emu.request("POST", f"/api/v1/namespaces/{ns}/pods", body).status == 201
    for c in containers:
        podexec.publish(emu.state_dir, ns, "p", c, ["env", "--", "SPECPILOT_EXEC_CONTAINER=" + c])


def kubectl(emu, tmp_path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, KUBECONFIG=str(emu.kubeconfig), HOME=str(tmp_path))
    return subprocess.run(
        [str(KUBECTL), f"--cache-dir={tmp_path / 'kube-cache'}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.kubectl
@needs_kubectl
def test_kubectl_exec_output_exit_code_and_stdin(emu, tmp_path):
    ns = make_namespace(emu)
    running_pod(emu, ns, containers=("main", "side"))
    base = ("exec", "-n", ns, "p", "-c", "side", "--")
    out = kubectl(emu, tmp_path, *base, "sh", "-c", "echo out $SPECPILOT_EXEC_CONTAINER; echo err >&2")
    assert (out.returncode, out.stdout, out.stderr) == (0, "out side\n", "err\n"), out
    # a big output arrives whole (several data frames)
    big = kubectl(emu, tmp_path, *base, "sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x")
    assert big.returncode == 0 and big.stdout == "x" * 300000, (big.returncode, len(big.stdout), big.stderr)
    failed = kubectl(emu, tmp_path, *base, "sh", "-c", "echo partial; exit 3")
    assert failed.returncode == 3 and failed.stdout == "partial\n", failed
    assert "command terminated with exit code 3" in failed.stderr, failed.stderr
    fed = kubectl(
        emu, tmp_path, "exec", "-i", "-n", ns, "p", "-c", "main", "--", "cat", stdin="hello\nworld\n"
    )
    assert (fed.returncode, fed.stdout) == (0, "hello\nworld\n"), fed
    counted = kubectl(
        emu, tmp_path, "exec", "-i", "-n", ns, "p", "-c", "main", "--", "wc", "-l", stdin="a\nb\n"
    )
    assert counted.returncode == 0 and counted.stdout.strip() == "2", counted


def _newer_kubectls() -> list:
    """kubectl 1.29 (SPDY, a newer client-go) and 1.33 (WebSocket) where the machine has them."""
    found = [Path(f"/usr/lib/google-cloud-sdk/bin/kubectl.1.{minor}") for minor in (29, 33)]
    return [pytest.param(k, id=k.name) for k in found if k.exists()] or [
        pytest.param(None, marks=pytest.mark.skip(reason="no newer kubectl on this machine"))
    ]


@pytest.mark.parametrize("binary", _newer_kubectls())
def test_newer_kubectls_exec_too(emu, tmp_path, binary):
    ns = make_namespace(emu)
    running_pod(emu, ns)
    env = dict(os.environ, KUBECONFIG=str(emu.kubeconfig), HOME=str(tmp_path))

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(binary), "exec", *args], input=stdin, capture_output=True, text=True, env=env, timeout=60
        )

    failed = run("-n", ns, "p", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (failed.returncode, failed.stdout) == (3, "out\n"), failed
    assert failed.stderr == "err\ncommand terminated with exit code 3\n", failed.stderr
    fed = run("-i", "-n", ns, "p", "--", "cat", stdin="hello\n")
    assert (fed.returncode, fed.stdout) == (0, "hello\n"), fed


@pytest.mark.kubectl
@needs_kubectl
def test_kubectl_exec_refusals(emu, tmp_path):
    ns = make_namespace(emu)
    running_pod(emu, ns)
    nope = kubectl(emu, tmp_path, "exec", "-n", ns, "p", "-c", "nope", "--", "ls")
    assert nope.returncode == 1 and "container nope is not valid for pod p" in nope.stderr, nope
    podexec.withdraw(emu.state_dir, ns, "p", "main")  # the container stopped
    gone = kubectl(emu, tmp_path, "exec", "-n", ns, "p", "-c", "main", "--", "ls")
    assert gone.returncode == 1 and 'container not found ("main")' in gone.stderr, gone
    # exec is create on pods/exec for SPDY too: a ServiceAccount with only get on pods is refused
    kubectl(emu, tmp_path, "create", "serviceaccount", "-n", ns, "viewer")
    token = emu.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/viewer/token", {}).json()
    assert (
        kubectl(
            emu, tmp_path, "create", "role", "-n", ns, "get-pods", "--verb=get", "--resource=pods"
        ).returncode
        == 0
    )
    binding = (
        "create",
        "rolebinding",
        "-n",
        ns,
        "viewer",
        "--role=get-pods",
        f"--serviceaccount={ns}:viewer",
    )
    assert kubectl(emu, tmp_path, *binding).returncode == 0
    denied = kubectl(emu, tmp_path, "--token", token["status"]["token"], "exec", "-n", ns, "p", "--", "ls")
    assert denied.returncode == 1, denied
    assert (
        'cannot create resource "pods/exec" in API group "" in the namespace' in denied.stderr
    ), denied.stderr


def test_the_handshake_as_the_kubelet_answers_it(emu):
    ns = make_namespace(emu)
    running_pod(emu, ns)
    url = f"/api/v1/namespaces/{ns}/pods/p/exec?command=ls&stdout=true"
    spdy = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1"}
    r = emu.request("POST", url, headers=spdy)
    assert (
        r.status == 400 and r.json()["message"] == "unable to upgrade: X-Stream-Protocol-Version is required"
    )
    r = emu.request("POST", url, headers=dict(spdy, **{"X-Stream-Protocol-Version": "channel.k8s.io"}))
    assert r.status == 403 and "unable to negotiate protocol" in r.json()["message"], r
    assert r.header("X-Accepted-Stream-Protocol-Versions").startswith("v4.channel.k8s.io")
    r = emu.request(
        "POST",
        f"/api/v1/namespaces/{ns}/pods/p/exec?command=ls",
        headers=dict(spdy, **{"X-Stream-Protocol-Version": "v4.channel.k8s.io"}),
    )
    assert r.status == 400 and r.json()["message"] == "you must specify at least 1 of stdin, stdout, stderr"


# ---------------------------------------------------------------- inside the container's namespaces
def _sandbox_with_a_main_process(tmp_path) -> tuple[subprocess.Popen, list[str]]:
    """A container as the controller runs one (jobs.bwrap_base: own pid, uts, ipc and mount
    namespaces), whose main process is ``sleep 271828``; returns bwrap and its argv up to ``--``."""
    data = tmp_path / "models"
    data.mkdir()
    (data / "config.json").write_text("{}")
    argv = bwrap_base("p", ["/mnt/models"], new_session=False)
    argv += ["--ro-bind", str(data), "/mnt/models", "--chdir", "/mnt/models", "--"]
    return subprocess.Popen(argv + ["sleep", "271828"], start_new_session=True), argv


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run sandboxes here")
@pytest.mark.skipif(
    podexec.nsenter_path() is None,
    reason="not privileged: exec cannot enter a container's namespaces without CAP_SYS_ADMIN and "
    "CAP_SYS_CHROOT (and nsenter), so it runs in a fresh sandbox beside the main process",
)
def test_exec_runs_inside_the_containers_namespaces(emu, tmp_path):
    ns = make_namespace(emu)
    assert emu.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod()).status == 201
    proc, argv = _sandbox_with_a_main_process(tmp_path)
    try:
        init = podexec.sandbox_init(proc.pid)
        assert init is not None and podexec.can_enter(init)
        env = {"PATH": "/usr/bin:/bin", "SPECPILOT_EXEC_CONTAINER": "main"}
        podexec.publish(emu.state_dir, ns, "p", "main", argv, pid=init, env=env, workdir="/mnt/models")
        look = "echo $SPECPILOT_EXEC_CONTAINER $(hostname) $(pwd); ls; for c in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $c; echo; done"
        api = client.CoreV1Api(emu.api_client())
        seen = stream(
            api.connect_get_namespaced_pod_exec, "p", ns, command=["sh", "-c", look], stderr=True, stdout=True
        )
        lines = seen.splitlines()
        assert lines[:2] == ["main p /mnt/models", "config.json"], seen
        assert "sleep 271828 " in lines, seen  # the container's main process, as in a real pod
        if KUBECTL.exists():
            out = kubectl(
                emu, tmp_path, "exec", "-n", ns, "p", "--", "sh", "-c", "cat /proc/2/cmdline; exit 4"
            )
            assert out.returncode == 4 and out.stdout == "sleep\0" + "271828\0", out
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run sandboxes here")
def test_exec_beside_the_main_process_when_it_cannot_enter(emu, tmp_path):
    """A pid exec may not enter (here: one in the API server's own pid namespace, as for an API server
    without CAP_SYS_ADMIN): a fresh sandbox with the container's mounts, the main process out of sight."""
    ns = make_namespace(emu)
    assert emu.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod()).status == 201
    proc, argv = _sandbox_with_a_main_process(tmp_path)
    try:
        podexec.publish(emu.state_dir, ns, "p", "main", argv, pid=os.getpid(), env={}, workdir="/")
        look = "pwd; ls; cat /proc/[0-9]*/cmdline | tr '\\0' ' '"
        api = client.CoreV1Api(emu.api_client())
        seen = stream(
            api.connect_get_namespaced_pod_exec, "p", ns, command=["sh", "-c", look], stderr=True, stdout=True
        )
        assert seen.splitlines()[:2] == ["/mnt/models", "config.json"], seen
        assert "sleep 271828" not in seen, seen
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _pod() -> dict:
    spec = {"containers": [{"name": "main", "image": "img"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def test_where_the_command_runs(tmp_path, monkeypatch):
    """Inside the container's namespaces where this process may enter them, else a fresh sandbox."""
    env = {"PATH": "/usr/bin", "X": "1"}
    podexec.publish(tmp_path, "ns", "p", "c", ["bwrap", "--"], pid=4242, env=env, workdir="/w")
    monkeypatch.setattr(podexec, "can_enter", lambda pid: pid == 4242)
    monkeypatch.setattr(podexec, "nsenter_path", lambda: "/usr/bin/nsenter")
    monkeypatch.setattr(podexec, "_has_wdns", lambda nsenter: True)
    inside = podexec.target(tmp_path, "ns", "p", "c")
    assert inside.entered and inside.env == env
    assert inside.argv == [
        "/usr/bin/nsenter",
        "--target",
        "4242",
        "--pid",
        "--mount",
        "--uts",
        "--ipc",
        "--root",
        "--wdns=/w",
        "--",
    ]
    monkeypatch.setattr(podexec, "can_enter", lambda pid: False)  # not privileged, or the sandbox is gone
    beside = podexec.target(tmp_path, "ns", "p", "c")
    assert (beside.argv, beside.env, beside.entered) == (["bwrap", "--"], None, False)
    podexec.publish(tmp_path, "ns", "p", "c", ["bwrap", "--"])  # published without a pid: the same
    assert podexec.target(tmp_path, "ns", "p", "c").argv == ["bwrap", "--"]
    podexec.withdraw(tmp_path, "ns", "p", "c")
    assert podexec.target(tmp_path, "ns", "p", "c") is None
