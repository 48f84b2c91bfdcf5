"""playbooks/validate.yml end to end: spec files and inventories, exit codes, the problem
block, render output, and manifests passing through Ansible and kubernetes.core unchanged."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from validate_helpers import ROOT, SPECS, ansible_env, load_spec_file, run_playbook, validate_file

PLAYBOOK = str(ROOT / "playbooks" / "validate.yml")
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)

pytestmark = pytest.mark.slow


def recap(output: str) -> dict:
    return {m.group(1): int(m.group(5)) for m in RECAP.finditer(output)}


def test_valid_spec_file_renders_the_plan(tmp_path):
    """Check mode with --diff shows what it would write and writes nothing; the render dir is
    written on the first run (changed), left alone on the second (ok), and a check then shows no diff."""
    spec_file = SPECS / "valid" / "eagle3_0.32_storage_uris_hf.yml"
    render = tmp_path / "render"

    def render_run(*extra):
        args = ["-e", "specpilot_spec_file=%s" % spec_file, "-e", "specpilot_render_dir=%s" % render]
        proc = run_playbook(tmp_path, PLAYBOOK, *extra, *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    checked = render_run("--check", "--diff")
    assert "changed=1" in checked and not render.exists()
    assert "+++ after: %s/" % render in checked and "inferenceservice.yaml" in checked
    assert "changed=1" in render_run()
    expected = validate_file(spec_file)["plan"]
    name = expected["name"]
    with open(render / name / "inferenceservice.yaml") as handle:
        assert yaml.safe_load(handle) == expected["inferenceservice"]
    with open(render / name / "servingruntime.yaml") as handle:
        runtime = yaml.safe_load(handle)
    assert runtime == expected["servingruntime"]
    assert "--served-model-name={{.Name}}" in expected["args"]  # KServe's Go template, kept literal
    with open(render / name / "plan.yaml") as handle:
        assert yaml.safe_load(handle)["args"] == expected["args"]
    assert "changed=0" in render_run()
    rechecked = render_run("--check", "--diff")  # nothing to change: changed=0, no diff
    assert "changed=0" in rechecked and "+++ after" not in rechecked


def test_relative_paths_resolve_from_the_working_directory(tmp_path):
    """Relative spec file and render dir are taken from where ansible-playbook runs; check mode
    reports the files it would write and writes nothing."""
    spec_file = (SPECS / "valid" / "speculative_off.yml").relative_to(ROOT)
    out = tmp_path / "out"
    relative_out = os.path.relpath(out, ROOT)  # ansible-playbook runs in ROOT
    args = [
        PLAYBOOK,
        "-e",
        "specpilot_spec_file=%s" % spec_file,
        "-e",
        "specpilot_render_dir=%s" % relative_out,
    ]
    check = run_playbook(tmp_path, "--check", *args)
    assert check.returncode == 0 and "changed=1" in check.stdout, check.stdout + check.stderr
    assert not out.exists()
    proc = run_playbook(tmp_path, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (out / "speculative-off" / "inferenceservice.yaml").is_file()


def test_invalid_spec_file_fails_with_every_problem(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("""---
specpilot_name: broken
specpilot_namespace: ml
specpilot_kserve_version: "0.16"
specpilot_vllm_version: "0.12.0"
specpilot_runtime:
  image: vllm/vllm-openai:v0.12.0
specpilot_delivery: storage_uris
specpilot_target:
  uri: s3://models/llama
  model_type: llama
  hidden_size: 4096
specpilot_draft:
  uri: pvc://claim/eagle3
  architecture: Eagle3LlamaForCausalLM
  hidden_size: 5120
specpilot_speculative:
  method: eagle3
  num_speculative_tokens: 0
  tensor_parallel_size: 2
  acceptance_method: typical_acceptance_sampler
specpilot_progress_deadline_seconds: 1800
specpilot_speculatve: {}
specpilot_deploy_wiat: false
""")
    proc = run_playbook(tmp_path, PLAYBOOK, "-e", "specpilot_spec_file=%s" % bad)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert recap(out) == {"localhost": 1}
    expected_errors = [
        "specpilot_speculative.num_speculative_tokens",
        "specpilot_speculative.tensor_parallel_size",
        "specpilot_draft.hidden_size",
        "specpilot_target.uri",
        "specpilot_draft.uri",
        "specpilot_progress_deadline_seconds",
        # issue 39: a misspelt variable, a spec key's or a role's, is an error (it would be ignored)
        "specpilot_speculatve",
        "specpilot_deploy_wiat",
    ]
    assert "specpilot validate: broken (" in out
    assert "FAILED; %d error(s)" % len(expected_errors) in out
    for path in expected_errors:
        assert path + ":" in out, path
    # a removed key on 0.12 is ignored by vLLM: reported as a warning
    assert "specpilot_speculative.acceptance_method:" in out
    assert "did you mean specpilot_speculative?" in out
    assert "did you mean specpilot_deploy_wait?" in out
    assert "fix: " in out


def test_warnings_print_and_fail_only_in_strict_mode(tmp_path):
    spec_file = SPECS / "valid" / "warn_ngram_async.yml"
    relaxed = run_playbook(tmp_path, PLAYBOOK, "-e", "specpilot_spec_file=%s" % spec_file)
    out = relaxed.stdout + relaxed.stderr  # Ansible prints warnings on stderr
    assert relaxed.returncode == 0, out
    assert "WARNINGS:" in out and "specpilot_speculative.method" in out
    strict = run_playbook(
        tmp_path, PLAYBOOK, "-e", "specpilot_spec_file=%s" % spec_file, "-e", "specpilot_strict=true"
    )
    assert strict.returncode != 0
    assert "(strict: warnings fail)" in strict.stdout + strict.stderr


@pytest.mark.parametrize(
    "inventory,hosts",
    [
        ("lab", {"lab-ngram", "lab-draft", "lab-suffix", "lab-eagle3", "lab-storage-uris", "lab-modelcar", "lab-llm"}),
        ("example", {"chat-eagle3", "chat-70b-draft", "reasoning-mtp", "chat-llm-eagle3", "chat-llm-pd"}),
    ],
)
def test_inventories_validate_clean(tmp_path, inventory, hosts):
    proc = run_playbook(
        tmp_path, "-i", str(ROOT / "inventories" / inventory), PLAYBOOK, "-e", "specpilot_strict=true"
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert recap(out) == {host: 0 for host in hosts}
    assert "WARNINGS:" not in out
    # offline (no specpilot_validate_live): said once, not skipped silently (issue 38)
    assert " ".join(out.split()).count("cluster not read (validate.yml is offline)") == 1


@pytest.mark.lab
@pytest.mark.upstream_crds
def test_manifests_pass_through_ansible_and_kubernetes_core_unchanged(tmp_path, emulator_upstream):
    spec_file = SPECS / "valid" / "eagle3_0.32_storage_uris_hf.yml"
    expected = validate_file(spec_file)["plan"]
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    env = ansible_env(tmp_path)
    env.update(K8S_AUTH_KUBECONFIG=str(emulator_upstream.kubeconfig))
    import subprocess
    import sys

    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "ansible_python_interpreter=%s" % sys.executable,
            "-e",
            json.dumps({"spec_file": str(spec_file), "out_dir": str(out_dir)}),
            str(Path(__file__).parent / "playbooks" / "passthrough.yml"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    held = json.loads((out_dir / "after_set_fact.json").read_text())
    assert held["plan"]["servingruntime"] == expected["servingruntime"]
    assert held["fact"]["servingruntime"] == expected["servingruntime"]
    assert held["fact"]["inferenceservice"] == expected["inferenceservice"]
    stored_runtime, stored_isvc = json.loads((out_dir / "stored.json").read_text())
    assert stored_isvc["spec"]["predictor"]["model"]["args"][2] == "--served-model-name={{.Name}}"  # kept literal
    assert stored_runtime["spec"] == expected["servingruntime"]["spec"]
    assert stored_isvc["spec"]["predictor"]["model"]["args"] == expected["args"]
    assert (
        stored_isvc["spec"]["predictor"]["storageUris"]
        == expected["inferenceservice"]["spec"]["predictor"]["storageUris"]
    )
    for key, value in expected["inferenceservice"]["metadata"]["annotations"].items():
        assert stored_isvc["metadata"]["annotations"][key] == value


def test_validation_never_talks_to_a_cluster_unless_asked_and_then_only_reads():
    """The checks are local by design: the validate role uses no Kubernetes module but in tasks/live.yml, included only
    with specpilot_validate_live (default false, issue 38: the acceptance recorded for the running release), and that
    file only reads (specpilot.core.k8s_read). validate.yml carries the connection for it and calls no module."""
    role = ROOT / "roles" / "specpilot_validate"
    live = role / "tasks" / "live.yml"
    for path in sorted(role.rglob("*.yml")):
        if path != live:
            assert "kubernetes.core" not in path.read_text() and "k8s_read" not in path.read_text(), path
    modules = set(re.findall(r"^  (\S+\.\S+\.\S+):", live.read_text(), re.M))
    assert modules and all(m in ("specpilot.core.k8s_read", "ansible.builtin.debug", "ansible.builtin.set_fact")
                           for m in modules), modules
    main = yaml.safe_load((role / "tasks" / "main.yml").read_text())
    gate = next(t for t in main if "live.yml" in str(t.get("ansible.builtin.include_tasks", "")))
    assert "specpilot_validate_live | bool" in gate["when"]
    assert yaml.safe_load((role / "defaults" / "main.yml").read_text())["specpilot_validate_live"] is False
    playbook = (ROOT / "playbooks" / "validate.yml").read_text()
    assert not re.search(r"^\s*(- )?(kubernetes|specpilot)\.core\.k8s\w*:", playbook, re.M)  # module_defaults only


def test_spec_file_of_the_corpus_is_a_valid_vars_file():
    """The corpus files are plain vars files: only specpilot_* keys and the test's expect key."""
    for path in sorted(SPECS.glob("*/*.yml")):
        with open(path) as handle:
            doc = yaml.safe_load(handle)
        assert set(doc) - {"expect"} == {k for k in doc if k.startswith("specpilot_")}, path
        load_spec_file(path)
