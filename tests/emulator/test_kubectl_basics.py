"""Everyday kubectl commands against the emulator, with Debian's 1.20 and a 1.31 client.

(The KServe-specific kubectl checks live in test_kubectl.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from emulator_helpers import WIDGET_CRD

from specpilot_lab import podlogs

ROOT = Path(__file__).resolve().parents[2]
CANDIDATES = [
    ("debian-1.20", ROOT / ".venv" / "bin" / "kubectl"),
    ("1.31", Path("/usr/lib/google-cloud-sdk/bin/kubectl.1.31")),
]
KUBECTLS = [
    (
        pytest.param(str(p), id=name)
        if p.exists()
        else pytest.param(str(p), id=name, marks=pytest.mark.skip(reason=f"{p} not installed"))
    )
    for name, p in CANDIDATES
]

pytestmark = pytest.mark.kubectl


@pytest.fixture(scope="module")
def emu(emulator_factory):
    return emulator_factory(crds=[], name="kubectl")


@pytest.fixture(params=KUBECTLS)
def kubectl(request, emu, tmp_path):
    binary = request.param
    home = tmp_path / "home"
    home.mkdir()

    env = dict(os.environ, KUBECONFIG=str(emu.kubeconfig), HOME=str(home))

    def run(*args: str, stdin: str | None = None, check: bool = True, timeout: float = 60):
        proc = subprocess.run(
            [binary, f"--cache-dir={home / 'cache'}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
        if check:
            assert proc.returncode == 0, f"kubectl {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
        return proc

    run.binary = binary
    run.home = home
    run.env = env
    run.ns = (
        "k"
        + request.node.callspec.id.replace(".", "").replace("-", "")[-6:]
        + str(int(time.time() * 1000) % 100000)
    )
    return run


CM = """apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  key: {value}
"""


def test_create_get_apply_delete(kubectl):
    ns = kubectl.ns
    kubectl("create", "namespace", ns)
    out = kubectl("-n", ns, "apply", "-f", "-", stdin=CM.format(value="one")).stdout
    assert "configmap/settings created" in out
    assert (
        "configmap/settings unchanged"
        in kubectl("-n", ns, "apply", "-f", "-", stdin=CM.format(value="one")).stdout
    )
    assert (
        "configmap/settings configured"
        in kubectl("-n", ns, "apply", "-f", "-", stdin=CM.format(value="two")).stdout
    )
    got = json.loads(kubectl("-n", ns, "get", "configmap", "settings", "-o", "json").stdout)
    assert got["data"] == {"key": "two"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in got["metadata"]["annotations"]
    table = kubectl("-n", ns, "get", "cm").stdout.splitlines()
    assert table[0].split() == ["NAME", "DATA", "AGE"] and table[1].split()[:2] == ["settings", "1"]
    lst = json.loads(kubectl("get", "cm", "-A", "-o", "json").stdout)
    assert lst["kind"] == "List" and any(i["metadata"]["name"] == "settings" for i in lst["items"])
    dry = kubectl("-n", ns, "apply", "--dry-run=server", "-f", "-", stdin=CM.format(value="three")).stdout
    assert "(server dry run)" in dry
    assert json.loads(kubectl("-n", ns, "get", "cm", "settings", "-o", "json").stdout)["data"]["key"] == "two"
    kubectl("-n", ns, "create", "-f", "-", stdin=CM.format(value="x").replace("settings", "created"))
    dup = kubectl(
        "-n", ns, "create", "-f", "-", stdin=CM.format(value="x").replace("settings", "created"), check=False
    )
    assert dup.returncode != 0 and "AlreadyExists" in dup.stderr
    assert 'configmap "settings" deleted' in kubectl("-n", ns, "delete", "cm", "settings").stdout
    missing = kubectl("-n", ns, "get", "cm", "settings", check=False)
    assert missing.returncode != 0 and 'configmaps "settings" not found' in missing.stderr
    kubectl("delete", "namespace", ns, timeout=60)
    assert kubectl("get", "namespace", ns, check=False).returncode != 0


def test_logs(kubectl, emu):
    ns = kubectl.ns
    kubectl("create", "namespace", ns)
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: engine\nspec:\n  containers:\n"
        "    - name: kserve-container\n      image: vllm\n    - name: sidecar\n      image: proxy\n"
    )
    kubectl("-n", ns, "apply", "-f", "-", stdin=pod)
    podlogs.append(emu.state_dir, ns, "engine", "kserve-container", ["starting", "ready"])
    assert kubectl("-n", ns, "logs", "engine", "-c", "kserve-container").stdout == "starting\nready\n"
    assert kubectl("-n", ns, "logs", "engine", "-c", "kserve-container", "--tail=1").stdout == "ready\n"
    stamped = kubectl("-n", ns, "logs", "engine", "-c", "kserve-container", "--timestamps").stdout
    assert stamped.splitlines()[0].endswith("Z starting")
    prev = kubectl("-n", ns, "logs", "engine", "-c", "kserve-container", "--previous", check=False)
    assert prev.returncode != 0 and 'previous terminated container "kserve-container"' in prev.stderr


def test_watch_prints_changes(kubectl):
    ns = kubectl.ns
    kubectl("create", "namespace", ns)
    proc = subprocess.Popen(
        [kubectl.binary, f"--cache-dir={kubectl.home / 'cache'}", "-n", ns, "get", "cm", "-w"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=kubectl.env,
    )
    try:
        time.sleep(1.0)
        kubectl("-n", ns, "create", "-f", "-", stdin=CM.format(value="a").replace("settings", "watched"))
        kubectl("-n", ns, "delete", "cm", "watched")
        time.sleep(1.0)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    lines = [ln.split() for ln in out.splitlines() if ln.strip()]
    assert lines[0] == ["NAME", "DATA", "AGE"]
    assert [ln[0] for ln in lines[1:]].count("watched") >= 2


def test_custom_resources_through_kubectl(kubectl):
    import yaml

    ns = kubectl.ns
    kubectl("create", "namespace", ns)
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(WIDGET_CRD))
    kubectl("wait", "--for=condition=Established", "crd/widgets.lab.specpilot.dev", "--timeout=20s")
    w = (
        "apiVersion: lab.specpilot.dev/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  color: blue\n"
        "  size: 4\n"
    )
    kubectl("-n", ns, "apply", "-f", "-", stdin=w)
    table = kubectl("-n", ns, "get", "widgets").stdout.splitlines()
    assert table[0].split() == ["NAME", "COLOR", "SIZE", "READY", "AGE"]
    row = table[1].split()
    assert row[:3] == ["w", "blue", "4"] and len(row) == 4  # READY (no status yet) prints blank
    assert kubectl("-n", ns, "get", "wd", "w", "-o", "jsonpath={.spec.size}").stdout == "4"
    patched = kubectl("-n", ns, "patch", "widget", "w", "--type=merge", "-p", '{"spec":{"size":5}}')
    assert "patched" in patched.stdout
    bad = kubectl("-n", ns, "patch", "widget", "w", "--type=merge", "-p", '{"spec":{"size":50}}', check=False)
    assert bad.returncode != 0 and "spec.size" in bad.stderr
    kubectl("-n", ns, "delete", "widget", "w")
    kubectl("delete", "crd", "widgets.lab.specpilot.dev")


NEWEST = sorted(
    Path("/usr/lib/google-cloud-sdk/bin").glob("kubectl.1.*"),
    key=lambda p: tuple(int(x) for x in p.name.split(".")[1:]),
)


@pytest.mark.skipif(
    not NEWEST or tuple(int(x) for x in NEWEST[-1].name.split(".")[1:]) < (1, 32),
    reason="no kubectl >= 1.32 installed (those send protobuf bodies for built-in kinds)",
)
def test_protobuf_bodies_of_newer_kubectl_create_commands(emu, tmp_path):
    """kubectl 1.32+ posts built-in kinds as protobuf; the emulator decodes them."""
    env = dict(os.environ, KUBECONFIG=str(emu.kubeconfig), HOME=str(tmp_path))

    def k(*args: str) -> str:
        proc = subprocess.run(
            [str(NEWEST[-1]), f"--cache-dir={tmp_path / 'cache'}", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    ns = f"pb{int(time.time() * 1000) % 100000}"
    k("create", "namespace", ns)
    k("-n", ns, "create", "configmap", "c", "--from-literal=a=b")
    k("-n", ns, "create", "secret", "generic", "s", "--from-literal=token=xyz")
    k("-n", ns, "create", "deployment", "web", "--image=nginx:1.25", "--replicas=2", "--port=80")
    k("-n", ns, "create", "job", "j", "--image=busybox", "--", "echo", "hi")
    k("-n", ns, "create", "serviceaccount", "robot")
    k("-n", ns, "create", "role", "r", "--verb=get", "--resource=pods")
    k("-n", ns, "create", "rolebinding", "rb", "--role=r", f"--serviceaccount={ns}:robot")
    assert json.loads(k("-n", ns, "get", "cm", "c", "-o", "json"))["data"] == {"a": "b"}
    assert json.loads(k("-n", ns, "get", "secret", "s", "-o", "json"))["data"] == {"token": "eHl6"}
    dep = json.loads(k("-n", ns, "get", "deploy", "web", "-o", "json"))
    assert dep["spec"]["replicas"] == 2 and dep["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "nginx:1.25" and c["ports"][0]["containerPort"] == 80
    job = json.loads(k("-n", ns, "get", "job", "j", "-o", "json"))
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["echo", "hi"]
    rb = json.loads(k("-n", ns, "get", "rolebinding", "rb", "-o", "json"))
    assert rb["roleRef"]["name"] == "r" and rb["subjects"][0]["name"] == "robot"
