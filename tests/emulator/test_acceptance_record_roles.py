"""Issue 38 against the API emulator, the roles as users run them: the benchmark's report step records the speculative
side's acceptance through the smoke role's entry point record (``source: benchmark``, beside smoke's record of another
vLLM release, which stays; check mode is smoke's test, tests/lab/smoke/test_smoke_role_fake.py), and ``validate.yml`` with
``specpilot_validate_live`` reads the live services (read-only) and shows, for a spec that changes the running vLLM
release and image, the acceptance recorded for the running release."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent / "deploy"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "benchmark"))
from bench_helpers import ACCEPT  # noqa: E402
from bench_helpers import run as bench_run  # noqa: E402
from deploy_helpers import NGRAM, ROOT, Run, create_namespace, get, write_inventory  # noqa: E402

from ansible_collections.specpilot.core.plugins.module_utils.engine import acceptance_record as ar  # noqa: E402

pytestmark = pytest.mark.slow

MODULE_DEFAULTS = yaml.safe_load((ROOT / "playbooks" / "benchmark.yml").read_text())[0]["module_defaults"]
SPEC = {"method": "ngram", "num_speculative_tokens": 3}
# smoke's record of the release before (what validate shows for a spec that moves to 0.32.0)
SMOKE_0_31 = ar.entry("smoke", "0.31.0", SPEC, {"acceptance_rate": 0.7, "mean_acceptance_length": 3.1,
                                                "per_position_acceptance": [0.9, 0.7, 0.5], "num_drafts": 400},
                      0.0, {"qps": 1}, "2026-11-28T10:00:00Z")


def _create(emu, api_version, kind, ns, body):
    emu.dynamic_client().resources.get(api_version=api_version, kind=kind).create(body=body, namespace=ns)


def _record(emu, ns, name="svc"):
    _create(emu, "v1", "ConfigMap", ns, {"apiVersion": "v1", "kind": "ConfigMap",
                                         "metadata": {"name": ar.record_name(name), "namespace": ns},
                                         "data": ar.merged({}, SMOKE_0_31)})


def _benchmark_play(tmp: Path, ns: str) -> Path:
    plan = {"name": "svc", "namespace": ns, "vllm_version": "0.32.0", "speculative_config": SPEC, "spec_digest": "d" * 64,
            "args": ["/mnt/models/target"], "args_without_speculative": ["/mnt/models/target"],
            "delivery": {"storage_uri": "pvc://models"}, "mount_paths": {"target": "/mnt/models/target"}}
    runs = [bench_run("baseline", 1, ttft_ms=52, tpot_ms=20, jitter=0.05),
            bench_run("speculative", 1, ttft_ms=48, tpot_ms=11, jitter=0.05, acceptance=ACCEPT)]
    play = {
        "hosts": "localhost",
        "gather_facts": False,
        "connection": "local",
        "module_defaults": MODULE_DEFAULTS,
        "vars": {
            "__specpilot_benchmark_plan": plan,
            "__specpilot_benchmark_service": {"runtime": {"image": "vllm/vllm-openai:v0.32.0"},
                                              "target": {"uri": "hf://org/model@main"}, "draft": None,
                                              "workload": {"qps": 1, "temperature": 0}},
            "__specpilot_benchmark_runs": runs,
            "__specpilot_benchmark_bench": {"report": {"thresholds": {}, "policy": {}},
                                            "workload": {"name": "chat", "file": ""}},
            "__specpilot_benchmark_dir": str(tmp / "report"),
            "specpilot_benchmark_target_qps": 1,
            "specpilot_benchmark_plots": False,
            "specpilot_workload": {"qps": 1, "temperature": 0},
        },
        "tasks": [
            {"name": "The benchmark's report step",
             "ansible.builtin.include_role": {"name": "specpilot_benchmark", "tasks_from": "report.yml"}},
        ],
    }
    path = tmp / "play.yml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return path


def test_the_benchmark_records_its_acceptance_beside_smokes_record(emulator, tmp_path):
    ns = "ar-bench-%d" % time.monotonic_ns()
    create_namespace(emulator, ns)
    _record(emulator, ns)
    inv = tmp_path / "hosts.yml"
    inv.write_text("localhost:\n")
    run = Run(emulator, tmp_path, inv, playbook=str(_benchmark_play(tmp_path, ns))).wait(300)
    assert run.rc == 0, run.out[-6000:]
    record = get(emulator, "v1", "ConfigMap", "svc-specpilot-acceptance", ns)
    data = record["data"]
    assert sorted(data) == ["vllm-0.31.0", "vllm-0.32.0"]  # smoke's record of 0.31.0 stays
    # written by a server-side apply of the release's own field manager (in the worker: issue 40), which owns that
    # release's key and not the others
    (applied,) = [m for m in record["metadata"]["managedFields"] if m["operation"] == "Apply"]
    assert applied["manager"] == "specpilot-acceptance-vllm-0.32.0"
    assert set(applied["fieldsV1"]["f:data"]) == {"f:vllm-0.32.0"}
    assert json.loads(data["vllm-0.31.0"])["source"] == "smoke"
    rec = json.loads(data["vllm-0.32.0"])
    assert (rec["source"], rec["where"], rec["method"], rec["k"]) == ("benchmark", "the target level qps=1", "ngram", 3)
    assert rec["per_position"] == [0.8, 0.5, 0.24] and rec["num_drafts"] == 100 and rec["temperature"] == 0.0
    assert rec["workload"] == {"qps": 1, "temperature": 0} and rec["acceptance_rate"] == round(154 / 300, 4)


def _deployed(emu, ns, name, version, image):
    """What deploy leaves: the ServingRuntime with the image, the InferenceService naming it and its release."""
    _create(emu, "serving.kserve.io/v1alpha1", "ServingRuntime", ns, {
        "apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime",
        "metadata": {"name": name + "-vllm", "namespace": ns},
        "spec": {"supportedModelFormats": [{"name": "vLLM", "autoSelect": False}],
                 "containers": [{"name": "kserve-container", "image": image}]}})
    _create(emu, "serving.kserve.io/v1beta1", "InferenceService", ns, {
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": name, "namespace": ns, "annotations": {"specpilot.io/vllm-version": version}},
        "spec": {"predictor": {"model": {"modelFormat": {"name": "vLLM"}, "runtime": name + "-vllm",
                                         "args": ["/mnt/models/target"]}}}})


def test_validate_shows_the_running_releases_acceptance_for_a_spec_that_changes_it(emulator, tmp_path):
    ns = "ar-validate-%d" % time.monotonic_ns()
    create_namespace(emulator, ns)
    _deployed(emulator, ns, "svc", "0.31.0", "specpilot-lab/vllm-cpu:0.31.0")
    _record(emulator, ns)
    _deployed(emulator, ns, "same", "0.32.0", "specpilot-lab/vllm-cpu:0.32.0")
    hosts = {h: {"specpilot_speculative": NGRAM} for h in ("svc", "same", "new")}
    inv = write_inventory(tmp_path / "inv", ns, hosts)
    run = Run(emulator, tmp_path, inv, "-e", "specpilot_validate_live=true", playbook="playbooks/validate.yml").wait(300)
    assert run.rc == 0, run.out[-6000:]
    out = " ".join(run.out.split())  # the YAML callback folds long lines
    assert ("the spec changes the runtime: live vLLM 0.31.0 (image specpilot-lab/vllm-cpu:0.31.0) -> spec vLLM 0.32.0 "
            "(image specpilot-lab/vllm-cpu:0.32.0)") in out
    assert ("recorded acceptance of the running release: vLLM 0.31.0, ngram k=3: acceptance 0.700 (per position "
            "0.90 / 0.70 / 0.50), mean acceptance length 3.10, temperature 0.0, by smoke at 2026-11-28T10:00:00Z") in out
    assert "the acceptance of vLLM 0.32.0 is unmeasured until smoke.yml or a canary measures it: canary.yml" in out
    assert "the spec keeps the running vLLM release (0.32.0) and runtime image: no release change to compare" in out
    assert "%s/new is not deployed: no running vLLM release to compare with" % ns in out
    assert "cluster not read" not in out
    # read-only: nothing changed on the cluster
    assert all(v["changed"] == 0 and v["failed"] == 0 for v in run.recap().values()), run.recap()
