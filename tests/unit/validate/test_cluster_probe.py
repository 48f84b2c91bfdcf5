"""The in-cluster probe (module_utils/service/cluster_probe.py, its program model_dir.py) and what validation does
with its result: the Job's plan (the runtime image, the models PVC read-only where the predictor sees it,
a restricted pod), the parser of its log line, the version caches, vllm_version auto, and the PVC's facts
as facts read from the source."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from test_model_facts import lab_draft, lab_draft_spec, lab_target, write_model
from validate_helpers import ROOT

from ansible_collections.specpilot.core.plugins.module_utils.service import cluster_probe as cp
from ansible_collections.specpilot.core.plugins.module_utils.service import compat
from ansible_collections.specpilot.core.plugins.module_utils.staging import model_dir
from ansible_collections.specpilot.core.plugins.module_utils.service.spec import assemble_from_vars
from ansible_collections.specpilot.core.plugins.module_utils.service.validator import validate

IMAGE = "specpilot-lab/vllm-cpu:0.32.0"
DIGEST = "sha256:" + "ab" * 32


def lab_spec(host="lab-draft", **changes):
    """A lab service as the inventory declares it."""
    inv = ROOT / "inventories" / "lab"
    variables = yaml.safe_load((inv / "group_vars" / "specpilot_services.yml").read_text())
    variables.update(yaml.safe_load((inv / "host_vars" / ("%s.yml" % host)).read_text()))
    spec, _ = assemble_from_vars(variables, host)
    spec.update(changes)
    return spec


@pytest.fixture(autouse=True)
def probe_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(cp.ENV_CACHE, str(tmp_path / "probe-cache"))
    return tmp_path / "probe-cache"


def run_program(tmp_path, plan, mounts, python=sys.executable):
    """Run the planned program as the Job would, with each planned path mapped to a directory here."""
    prog = tmp_path / "prog"
    prog.mkdir(exist_ok=True)
    data = plan["manifests"]["configmap"]["data"]
    request = json.loads(data["request.json"])
    for model in request["models"]:
        model["path"] = str(mounts.get(model["path"], tmp_path / "absent"))
    (prog / "model_dir.py").write_text(data["model_dir.py"])
    (prog / "request.json").write_text(json.dumps(request))
    out = subprocess.run(
        [python, "-I", str(prog / "model_dir.py"), "--probe", str(prog / "request.json")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


# ---------------------------------------------------------------- the plan
def test_the_job_runs_the_runtime_image_with_the_pvc_read_only_where_the_predictor_sees_it():
    plan = cp.plan(lab_spec(pvc={"name": "specpilot-lab-models", "path": "/models/v1/"}))
    job = plan["manifests"]["job"]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    assert container["command"][1:] == [
        "/specpilot/probe/model_dir.py",
        "--probe",
        "/specpilot/probe/request.json",
    ]
    models = {m["mountPath"]: m for m in container["volumeMounts"]}["/mnt/models"]
    assert models["readOnly"] is True and models["subPath"] == "models/v1"
    volume = {v["name"]: v for v in pod["volumes"]}[models["name"]]
    assert volume["persistentVolumeClaim"] == {"claimName": "specpilot-lab-models", "readOnly": True}
    # the directories are render.mount_paths' for delivery pvc, the URIs model_facts.source_for's
    assert plan["request"]["models"] == [
        {"role": "target", "path": "/mnt/models/target"},
        {"role": "draft", "path": "/mnt/models/draft"},
    ]
    assert [m["uri"] for m in plan["models"]] == [
        "pvc://specpilot-lab-models/models/v1/target",
        "pvc://specpilot-lab-models/models/v1/draft",
    ]
    # the program is model_dir.py itself: compat.read_local_facts' code, not a copy
    assert plan["manifests"]["configmap"]["data"]["model_dir.py"] == cp.program_source()
    assert compat.read_local_facts is model_dir.read_local_facts


def test_the_probe_pod_is_restricted_bounded_small_and_labelled():
    plan = cp.plan(lab_spec(), options={"deadline_seconds": 120, "ttl_seconds_after_finished": 60})
    job = plan["manifests"]["job"]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["readOnlyRootFilesystem"] is True and sc["runAsUser"] > 0
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
    assert job["spec"]["activeDeadlineSeconds"] == 120 and job["spec"]["ttlSecondsAfterFinished"] == 60
    assert job["spec"]["backoffLimit"] == 0
    # near the service's pods (a ReadWriteOnce claim attaches to one node), preferred, never required
    (term,) = pod["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["labelSelector"] == {
        "matchLabels": {"serving.kserve.io/inferenceservice": "lab-draft"}
    }
    assert container["resources"]["requests"]["cpu"] == "100m"
    for obj in (job, plan["manifests"]["configmap"], job["spec"]["template"]):
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "specpilot"
    with pytest.raises(cp.ProbeError, match=r"deadline_seconds=99999: give whole seconds from 1 to 1800"):
        cp.plan(lab_spec(), options={"deadline_seconds": 99999})


def test_without_a_pvc_only_the_version_is_asked_and_nothing_when_it_is_known():
    spec = lab_spec(delivery="storage_uri", target={"uri": "hf://org/model"})
    spec.pop("pvc")
    spec.pop("draft")
    plan = cp.plan(spec)
    assert plan["models"] == [] and plan["needed"]
    assert "/mnt/models" not in json.dumps(plan["manifests"]["job"])
    assert not cp.plan(spec, version_needed=False)["needed"]
    with pytest.raises(cp.ProbeError, match="runtime.image is not set"):
        cp.plan(dict(spec, runtime={"create": False, "name": "existing"}))
    with pytest.raises(cp.ProbeError, match="namespace is not set"):
        cp.plan({k: v for k, v in spec.items() if k != "namespace"})


# ---------------------------------------------------------------- the program and its log
def test_the_program_reads_each_directory_as_compat_does_and_never_the_weights(tmp_path):
    target = lab_target(tmp_path / "pvc" / "target")
    draft = lab_draft(tmp_path / "pvc" / "draft", weights=4096)
    plan = cp.plan(lab_spec())
    log = "starting\n" + run_program(
        tmp_path, plan, {"/mnt/models/target": target, "/mnt/models/draft": draft}
    )
    result = cp.parse_log(log)
    probed = cp.probed(result, plan, IMAGE)
    assert probed["models"]["target"]["facts"] == compat.read_local_facts(str(target))[0]
    assert probed["models"]["draft"]["facts"]["weight_bytes"] == 4096  # the file's size, not its bytes
    assert probed["models"]["draft"]["uri"] == "pvc://specpilot-lab-models/draft"


def test_a_missing_vllm_is_reported_not_fatal(tmp_path):
    """The controller's Python has no vLLM: the probe says why the import failed and still reads facts."""
    target = lab_target(tmp_path / "target")
    plan = cp.plan(lab_spec())
    mounts = {"/mnt/models/target": target, "/mnt/models/draft": lab_draft(tmp_path / "draft")}
    result = cp.parse_log(run_program(tmp_path, plan, mounts))
    probed = cp.probed(result, plan, IMAGE)
    assert "vllm_version" not in probed
    assert probed["vllm_error"].startswith("import vllm failed: ModuleNotFoundError")
    assert probed["models"]["target"]["facts"]["architecture"] == "LlamaForCausalLM"
    auto = validate(lab_spec(vllm_version="auto"), {"probed": probed})
    (error,) = [e for e in auto["errors"] if e["code"] == "vllm-version-unknown"]
    assert error["path"] == "vllm_version" and "ModuleNotFoundError" in error["message"]
    declared = validate(lab_spec(), {"probed": probed})
    assert declared["ok"] and "vllm-version-unread" in {w["code"] for w in declared["warnings"]}


def test_a_missing_draft_directory_on_the_pvc_is_an_error_naming_service_field_path_and_fix(tmp_path):
    """Issue 39: the lab-draft spec types every fact of its draft, and its draft directory is not on the
    PVC. The probe reads it anyway (auto), and validation refuses the spec, naming the service, the field,
    the pvc:// path and the fix; the engine would otherwise crash-loop on the live service."""
    spec = lab_spec()
    assert all(spec["draft"].get(k) is not None for k in ("architecture", "vocab_size", "hidden_size"))
    assert cp.wanted(spec) == {"version": False, "models": True}
    plan = cp.plan(spec)
    result = cp.parse_log(run_program(tmp_path, plan, {"/mnt/models/target": lab_target(tmp_path / "t")}))
    probed = cp.probed(result, plan, IMAGE)
    assert probed["models"]["draft"]["problem"].endswith("does not exist in the probe's pod")
    report = validate(spec, {"probed": probed})
    assert not report["ok"]
    (error,) = [e for e in report["errors"] if e["code"] == "model-dir-missing"]
    assert error["path"] == "draft.subdir"
    assert error["message"].startswith("lab-draft: the draft model is read from pvc://specpilot-lab-models/draft")
    assert "does not exist in the probe's pod" in error["message"]
    assert "playbooks/stage.yml --limit lab-draft" in error["hint"] and "specpilot_draft.subdir" in error["hint"]
    # the target is there: no error about it
    assert not [e for e in report["errors"] if e["path"].startswith("target")]


def test_an_unreadable_config_is_that_model_s_problem(tmp_path):
    target = lab_target(tmp_path / "target")
    broken = tmp_path / "draft"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    plan = cp.plan(lab_spec())
    result = cp.parse_log(
        run_program(tmp_path, plan, {"/mnt/models/target": target, "/mnt/models/draft": broken})
    )
    draft = cp.probed(result, plan, IMAGE)["models"]["draft"]
    assert draft["facts"] == {} and draft["problem"].startswith("cannot read %s/config.json" % broken)
    assert "problem" not in result["models"]["target"]


@pytest.mark.parametrize(
    "log, message",
    [
        ("", r"printed no SPECPILOT-PROBE line; its log ends: \(empty\)"),
        ("Traceback (most recent call last):\nOSError: boom", r"its log ends: Traceback .* \| OSError: boom"),
        ("SPECPILOT-PROBE {not json", r"result line is not JSON"),
        ('SPECPILOT-PROBE {"format": 99, "models": {}}', r"not of format 1"),
        ('SPECPILOT-PROBE {"format": 1}', r"has no models"),
    ],
)
def test_a_malformed_log_is_an_error_that_quotes_it(log, message):
    with pytest.raises(cp.ProbeError, match=message):
        cp.parse_log(log)


# ---------------------------------------------------------------- the caches
def test_a_digest_is_cached_for_good_a_tag_for_the_ttl():
    pinned = "registry.example/vllm@" + DIGEST
    data = cp.configmap_patch(
        [cp.version_entry(pinned, "0.32.0", now=0), cp.version_entry(IMAGE, "0.32.0", now=0)]
    )
    assert all(key.replace("-", "").replace(".", "").isalnum() for key in data)
    assert cp.cached_version(data, pinned, now=10**9)["vllm_version"] == "0.32.0"
    assert cp.cached_version(data, IMAGE, now=100, ttl=3600)["vllm_version"] == "0.32.0"
    assert cp.cached_version(data, IMAGE, now=7200, ttl=3600) is None
    assert cp.cached_version(data, "specpilot-lab/vllm-cpu:0.19.1", now=100) is None
    assert cp.cached_version({next(iter(data)): "{broken"}, pinned) is None
    # a tag pinned by the digest the kubelet reported is looked up by that digest
    assert cp.cache_key(IMAGE, DIGEST) == "digest:" + DIGEST and cp.cache_key(IMAGE) == "ref:" + IMAGE


# ---------------------------------------------------------------- vllm_version auto
def test_auto_takes_the_image_s_release_and_the_report_says_so():
    result = validate(
        lab_spec(vllm_version="auto"), {"probed": {"vllm_version": "0.32.0", "source": "probe"}}
    )
    assert result["ok"], result["report"]
    assert result["spec"]["vllm_version"] == "0.32.0"
    assert result["vllm_version"]["source"] == "image"
    assert "vLLM 0.32.0 read from the image" in result["report"]
    assert (
        result["plan"]["inferenceservice"]["metadata"]["annotations"]["specpilot.io/vllm-version"] == "0.32.0"
    )


def test_auto_is_the_default_with_a_runtime_image():
    spec = lab_spec()
    spec.pop("vllm_version")
    assert validate(spec, {"probed": {"vllm_version": "0.32.0"}})["vllm_version"]["declared"] == "auto"


def test_a_declared_release_the_image_does_not_hold_is_an_error_naming_both():
    result = validate(lab_spec(vllm_version="0.19.1"), {"probed": {"vllm_version": "0.32.0"}})
    (error,) = [e for e in result["errors"] if e["code"] == "vllm-version-image"]
    assert error["path"] == "vllm_version"
    assert "0.19.1" in error["message"] and "0.32.0" in error["message"] and IMAGE in error["message"]
    # the rest of the spec is still checked, and the report names the service
    assert result["report"].startswith("specpilot validate: lab-draft (namespace specpilot-lab, vLLM 0.19.1")
    assert validate(lab_spec(), {"probed": {"vllm_version": "0.32.0+cpu"}})["ok"]


def test_without_a_cluster_auto_needs_a_cached_probe_or_a_fallback(probe_cache):
    spec = lab_spec(vllm_version="auto")
    result = validate(spec, {})
    (error,) = [e for e in result["errors"] if e["code"] == "vllm-version-unknown"]
    assert error["path"] == "vllm_version" and "specpilot_vllm_version_fallback" in error["hint"]
    assert "specpilot_vllm_version" in result["report"]
    fallback = validate(dict(spec, vllm_version_fallback="0.32.0"), {})
    assert fallback["ok"] and fallback["spec"]["vllm_version"] == "0.32.0"
    assert "vllm-version-fallback" in {n["code"] for n in fallback["notes"]}
    cp.remember_version(cp.version_entry(IMAGE, "0.31.0"))
    cached = validate(spec, {})
    assert cached["spec"]["vllm_version"] == "0.31.0" and cached["vllm_version"]["source"] == "cache"
    assert "read from the image by an earlier probe" in cached["report"]


def test_check_mode_names_why_auto_could_not_be_resolved():
    result = validate(
        lab_spec(vllm_version="auto"), {"probed": {"unavailable": "check mode: no probe Job was created"}}
    )
    assert "check mode: no probe Job was created" in result["errors"][0]["message"]


# ---------------------------------------------------------------- PVC facts into the validation
def test_lab_draft_as_eagle3_is_refused_on_the_draft_from_the_facts_the_probe_read(tmp_path):
    """The must-show case with the facts read off the PVC: a plain causal LM is no EAGLE-3 head."""
    plan = cp.plan(lab_draft_spec())
    mounts = {
        "/mnt/models/target": lab_target(tmp_path / "target"),
        "/mnt/models/draft": lab_draft(tmp_path / "draft"),
    }
    probed = cp.probed(cp.parse_log(run_program(tmp_path, plan, mounts)), plan, IMAGE)
    probed["vllm_version"] = "0.32.0"
    spec = lab_draft_spec(speculative={"method": "eagle3", "num_speculative_tokens": 3})
    result = validate(spec, {"probed": probed})
    (error,) = [e for e in result["errors"] if e["code"] == "draft-kind"]
    assert error["path"] == "draft" and "LlamaForCausalLM" in error["message"]
    assert "pvc://specpilot-lab-models/draft" in error["message"]
    assert "specpilot_draft" in result["report"]
    # as draft_model (the inventory's method) the same facts pass, and nothing is left unread
    ok = validate(lab_draft_spec(), {"probed": probed})
    assert ok["ok"], ok["report"]
    assert not [w for w in ok["warnings"] if w["code"].startswith("model-facts")]


def test_a_typed_fact_the_pvc_contradicts_is_an_error(tmp_path):
    write_model(
        tmp_path / "draft", {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64}
    )
    plan = cp.plan(lab_spec())
    probed = cp.probed(
        cp.parse_log(run_program(tmp_path, plan, {"/mnt/models/draft": tmp_path / "draft"})), plan, IMAGE
    )
    result = validate(lab_spec(), {"probed": probed})
    (error,) = [e for e in result["errors"] if e["code"] == "model-fact-conflict"]
    assert error["path"] == "draft.hidden_size" and "128" in error["message"] and "64" in error["message"]


def test_auto_creates_a_job_for_the_pvc_directories_and_an_open_release():
    """The lab inventory types every fact and declares its release; its models are on a PVC, so auto still
    reads their directories (a missing one is an error before any change: issue 39), but not the release
    (checked against a cached probe); vllm_version auto asks for it too; always asks for both. A service
    whose models are not on a PVC (a local_path here) needs no Job unless its release is open."""
    assert cp.wanted(lab_spec()) == {"version": False, "models": True}
    assert cp.wanted(lab_spec(vllm_version="auto")) == {"version": True, "models": True}
    no_version = lab_spec()
    no_version.pop("vllm_version")
    assert cp.wanted(no_version)["version"]
    # ngram: typed or not, the target's directory is read
    assert cp.wanted(lab_draft_spec(speculative={"method": "ngram", "num_speculative_tokens": 3}))["models"]
    assert cp.wanted(lab_spec(), "always") == {"version": True, "models": True}
    modelcar = lab_spec("lab-modelcar")
    assert cp.wanted(modelcar) == {"version": False, "models": False}


def test_the_deploy_summary_names_the_release_and_where_it_came_from():
    from ansible_collections.specpilot.core.plugins.filter.deploy import services_summary

    base = {
        "applied": True,
        "rollout": {"done": True},
        "spec_digest": "0" * 64,
        "kserve": {"version": "0.20.0"},
    }
    vllm = {
        "a": {"value": "0.32.0", "source": "image", "read": "0.32.0"},
        "b": {"value": "0.32.0", "source": "declared", "read": "0.32.0"},
        "c": {"value": "0.32.0", "source": "declared"},
        "d": {"value": "0.31.0", "source": "fallback"},
    }
    hostvars = {h: {"specpilot_deploy_result": dict(base, vllm=v)} for h, v in vllm.items()}
    assert [
        line.split("KServe 0.20.0", 1)[1] for line in services_summary(sorted(vllm), hostvars, "deploy")
    ] == [
        ", vLLM 0.32.0 read from the image)",
        ", vLLM 0.32.0 declared, as the image holds)",
        ", vLLM 0.32.0 declared)",
        ", vLLM 0.31.0 assumed (vllm_version_fallback))",
    ]
