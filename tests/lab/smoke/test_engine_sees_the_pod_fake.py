"""lab-draft through the lab with the stand-in engine (lab/specpilot_lab/fake_engine.py): the lab runs
the engine in the pod's filesystem (bubblewrap, controller/sandbox.py), so the container's args reach
it unchanged - model paths and --speculative-config included - and smoke.yml's engine checks pass on
what the engine itself prints, with no path aliases, as on a cluster (issue 14, item 2); k8s_exec into
the pod lists /mnt/models, and kubectl 1.20's exec (SPDY) sees the engine among the pod's processes
where the API server may enter the container's namespaces (item 5). Fast: the
same check on the real engine is test_smoke_role_vllm.py::test_draft_model_service_passes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from smoke_lab import NAMESPACE, checks, report

from specpilot_lab import engine, podexec
from specpilot_lab.controller.jobs import bwrap_available
from specpilot_lab.controller.mapping import engine_args

pytestmark = [
    pytest.mark.lab,
    pytest.mark.slow,
    pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run lab engines here"),
]

SERVICE = "lab-draft"
KUBECTL = Path(__file__).resolve().parents[3] / ".venv" / "bin" / "kubectl"


def _argv(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return [a.decode() for a in fh.read().split(b"\0")[:-1]]


def engine_process(lab, pod: str) -> int:
    """The stand-in engine's pid (on this machine) inside the pod's sandbox."""
    run = lab.ctl.runs[(NAMESPACE, pod)]
    tree = engine.process_tree(run._engine.proc.pid)
    found = [p for p in tree if _argv(p)[:1] != ["bwrap"] and any("fake_engine" in a for a in _argv(p))]
    assert found, [_argv(p) for p in tree]
    return found[0]


def kubectl_exec_sees_the_engine(lab, pod: str, tmp_path) -> None:
    """Debian's kubectl (1.20: SPDY) execs into the predictor pod; where the API server may enter the
    container's namespaces (podexec.target), the engine is among the processes it sees, as in a pod."""
    look = "ls /mnt/models; for c in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $c; echo; done"
    out = subprocess.run(
        [str(KUBECTL), "exec", "-n", NAMESPACE, pod, "-c", "kserve-container", "--", "sh", "-c", look],
        env=dict(os.environ, KUBECONFIG=str(lab.emu.kubeconfig), HOME=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0 and {"target", "draft"} <= set(out.stdout.split()), out
    engines = [
        line
        for line in out.stdout.splitlines()
        if "--speculative-config" in line and os.path.basename(line.split()[0]) != "bwrap"
    ]
    assert bool(engines) == (podexec.nsenter_path() is not None), out.stdout


def test_the_engine_gets_the_container_args_and_sees_mnt_models(fake_smoke_lab, tmp_path):
    lab = fake_smoke_lab
    lab.deploy(SERVICE)
    pod = lab.wait_single_ready_pod(SERVICE, 90)
    name = pod["metadata"]["name"]
    container = pod["spec"]["containers"][0]
    pid = engine_process(lab, name)

    # the container's args, as stored in the pod, are the engine's: only --host and the port are the lab's
    argv = _argv(pid)
    expected = engine_args(container["args"], lab.ctl.runs[(NAMESPACE, name)].port)
    assert argv[-len(expected) :] == expected, (argv, container["args"])
    assert json.loads(engine.get_arg(argv, "--speculative-config"))["model"] == "/mnt/models/draft"

    # ... and the pod's filesystem: the models PVC at /mnt/models (read-only), /dev/shm a tmpfs, the
    # lab's own directories out of sight
    root = f"/proc/{pid}/root"
    assert os.path.isfile(f"{root}/mnt/models/draft/config.json")
    assert not os.path.exists(root + str(lab.pvc_dir))
    mounts = {line.split()[1]: line.split() for line in open(f"/proc/{pid}/mounts")}
    assert mounts["/mnt/models"][3].split(",")[0] == "ro"
    assert mounts["/dev/shm"][2] == "tmpfs"

    # the engine's own account names the pod's paths
    log = lab.engine_log(name)
    assert "speculative_config=SpeculativeConfig(method='draft_model', model='/mnt/models/draft'" in log
    assert str(lab.root) not in log

    # kubernetes.core.k8s_exec into the predictor pod sees the same: the models PVC at /mnt/models
    play = tmp_path / "exec.yml"
    play.write_text(
        json.dumps(
            [
                {
                    "hosts": SERVICE,
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "ls /mnt/models in the predictor pod",
                            "kubernetes.core.k8s_exec": {
                                "namespace": NAMESPACE,
                                "pod": name,
                                "container": "kserve-container",
                                "command": "ls /mnt/models",
                            },
                            "register": "listing",
                        },
                        {
                            "name": "keep it",
                            "ansible.builtin.copy": {
                                "content": "{{ listing | to_json }}",
                                "dest": str(tmp_path / "exec.json"),
                            },
                        },
                    ],
                }
            ]
        )
    )
    run = lab.playbook(play, SERVICE)
    assert run.rc == 0, run.output
    listing = json.loads((tmp_path / "exec.json").read_text())
    assert listing["rc"] == 0 and {"target", "draft"} <= set(listing["stdout_lines"]), listing
    if KUBECTL.exists():
        kubectl_exec_sees_the_engine(lab, name, tmp_path)

    # so smoke.yml's engine checks pass on what the engine printed, with no path aliases
    run = lab.smoke(SERVICE, tmp_path)
    assert run.rc == 0, run.output
    rep = report(tmp_path, SERVICE)
    c = checks(rep)
    assert c["engine_config"]["status"] == "pass", c["engine_config"]
    assert c["engine_config"]["message"] == (
        "SpeculativeConfig(method='draft_model', model='/mnt/models/draft', num_spec_tokens=3) matches the plan"
    )
    assert c["engine_requested_config"]["status"] == "pass", c["engine_requested_config"]
    # the look inside the pod (exec, as the reference guide does it): the release and the model files
    assert c["pod_vllm_version"]["message"] == "the image holds vLLM 0.32.0", c["pod_vllm_version"]
    assert c["pod_models"]["status"] == "pass", c["pod_models"]
    assert c["pod_models"]["message"] == "target /mnt/models/target, draft /mnt/models/draft hold config.json"
    assert rep["verdict"] in ("pass", "warn"), rep["message"]
