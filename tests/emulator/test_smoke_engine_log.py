"""The smoke role's reads of the engine log against the API emulator (roles/specpilot_smoke/tasks/engine_log.yml): the
running container's log, and, only when the container restarted, its previous instance's, in one task (issue 40: one
worker a service, not two), each parsed where it is read. The verdict's checks of what they hold are unit-tested
(tests/unit/smoke/test_smoke_verdict.py); this is what the role reads of a pod that restarted and of one that did not."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent / "deploy"))
from deploy_helpers import ROOT, Run, create_namespace  # noqa: E402

from specpilot_lab import podlogs  # noqa: E402

pytestmark = pytest.mark.slow

MODULE_DEFAULTS = yaml.safe_load((ROOT / "playbooks" / "smoke.yml").read_text())[0]["module_defaults"]
STARTED = [
    "(APIServer pid=7) INFO 11-29 03:00:00 [api_server.py:1] vLLM API server version 0.32.0",
    "INFO:     Application startup complete.",
]
CRASHED = [
    "(APIServer pid=7) INFO 11-29 02:50:00 [api_server.py:1] vLLM API server version 0.32.0",
    "(EngineCore_DP0 pid=9) ERROR 11-29 02:50:30 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 2.00 GiB.",
]


def _pod(emu, ns, name, restarts):
    pods = emu.dynamic_client().resources.get(api_version="v1", kind="Pod")
    pods.create(namespace=ns, body={"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                                    "spec": {"containers": [{"name": "kserve-container", "image": "vllm"}]}})
    writer = podlogs.PodLogWriter(emu.state_dir, ns, name, "kserve-container")
    if restarts:
        for line in CRASHED:
            writer.write_line(line)
        writer.rotate()
    for line in STARTED:
        writer.write_line(line)
    writer.close()
    pod = pods.get(namespace=ns, name=name).to_dict()
    pod["status"] = {"containerStatuses": [{"name": "kserve-container", "restartCount": restarts}]}
    return pod


def _play(tmp: Path, ns: str, pod: dict, out: Path) -> Path:
    play = {
        "hosts": "localhost",
        "gather_facts": False,
        "module_defaults": MODULE_DEFAULTS,
        "vars": {"specpilot_smoke_inside_pod": "off"},
        "tasks": [
            {"name": "What the role settled before (plan.yml, target.yml)", "ansible.builtin.set_fact": {
                "__specpilot_smoke_plan": {"name": "svc", "namespace": ns}, "__specpilot_smoke_pod": pod,
                "__specpilot_smoke_container": "kserve-container", "__specpilot_smoke_expect": "on"}},
            {"name": "The role's engine log reads", "ansible.builtin.include_role": {
                "name": "specpilot_smoke", "tasks_from": "engine_log.yml"}},
            {"name": "What the verdict gets", "ansible.builtin.copy": {"dest": str(out), "mode": "0644", "content": (
                "{{ {'facts': __specpilot_smoke_log_facts, 'previous': __specpilot_smoke_log_previous,"
                " 'marker': __specpilot_smoke_log_marker, 'error': __specpilot_smoke_log_error,"
                " 'reads': __specpilot_smoke_logs.results | length} | to_json }}")}},
        ],
    }
    path = tmp / "play.yml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return path


@pytest.mark.parametrize("restarts", [0, 1])
def test_the_previous_instance_is_read_only_after_a_restart(emulator, tmp_path, restarts):
    ns = "smoke-log-%d" % time.monotonic_ns()
    create_namespace(emulator, ns)
    pod = _pod(emulator, ns, "svc-predictor-1", restarts)
    inv = tmp_path / "hosts.yml"
    inv.write_text("localhost:\n")
    out = tmp_path / "read.json"
    run = Run(emulator, tmp_path, inv, playbook=str(_play(tmp_path, ns, pod, out))).wait(300)
    assert run.rc == 0, run.out[-6000:]
    got = json.loads(out.read_text())
    assert got["reads"] == 1 + restarts and got["error"] == ""
    assert got["facts"]["ready"] and got["facts"]["vllm_version"] == "0.32.0"
    assert got["marker"] == STARTED[-1]
    if restarts:
        (error,) = got["previous"]["log_errors"]
        assert "CUDA out of memory" in error["message"]
    else:
        assert got["previous"] is None
