"""Helpers of the validation tests: the spec corpus, the upstream CRDs, ansible-playbook runs."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from jsonschema import Draft7Validator

from ansible_collections.specpilot.core.plugins.module_utils.service.spec import assemble_from_vars
from ansible_collections.specpilot.core.plugins.module_utils.service.validator import validate

ROOT = Path(__file__).resolve().parents[3]
SPECS = ROOT / "tests" / "data" / "specs"
MODELS = ROOT / "tests" / "data" / "models"
CRD_ROOT = ROOT.parent / "shared" / "reference" / "kserve-crds"
VENV_BIN = Path(sys.executable).parent

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def spec_files(kind: str) -> list[Path]:
    return sorted((SPECS / kind).glob("*.yml"))


def load_spec_file(path: Path) -> tuple[dict, dict]:
    """(spec, expect) of a corpus file."""
    with open(path) as handle:
        doc = yaml.load(handle, Loader=_Loader)
    expect = doc.pop("expect", {}) or {}
    spec, _unknown = assemble_from_vars(doc)
    return spec, expect


def validate_file(path: Path, **options) -> dict:
    spec, _expect = load_spec_file(path)
    return validate(spec, options)


def base_spec(**changes) -> dict:
    """A valid EAGLE-3 service (option A) to derive test cases from."""
    spec = {
        "name": "svc",
        "namespace": "ml",
        "kserve_version": "0.20",
        "deployment_mode": "Standard",
        "vllm_version": "0.32.0",
        "runtime": {"image": "vllm/vllm-openai:v0.32.0"},
        "target": {
            "uri": "hf://meta-llama/Llama-3.1-8B-Instruct",
            "params_b": 8.03,
            "dtype": "bfloat16",
            "model_type": "llama",
            "hidden_size": 4096,
            "vocab_size": 128256,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
        },
        "draft": {
            "uri": "hf://yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            "params_b": 0.85,
            "architecture": "LlamaForCausalLMEagle3",
            "hidden_size": 4096,
            "vocab_size": 128256,
        },
        "delivery": "storage_uris",
        "speculative": {"method": "eagle3", "num_speculative_tokens": 3},
        "vllm_args": {"gpu_memory_utilization": 0.85, "max_model_len": 8192},
        "gpu": {"count": 1, "memory_gib": 80},
    }
    for key, value in changes.items():
        if value is None and key not in ("speculative", "draft"):
            spec.pop(key, None)
        else:
            spec[key] = value
    return copy.deepcopy(spec)


def paths(findings: list[dict]) -> set[str]:
    return {f["path"] for f in findings}


# ------------------------------------------------------------------ upstream CRDs


def _strictify(node):
    """additionalProperties: false wherever properties are declared (kubectl --validate=strict)."""
    if isinstance(node, dict):
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        for value in node.values():
            _strictify(value)
    elif isinstance(node, list):
        for value in node:
            _strictify(value)
    return node


_CRD_CACHE: dict = {}


def crd_validator(kserve_dir: str, kind: str) -> Draft7Validator | None:
    """Strict Draft 7 validator of ``kind`` from ../shared/reference/kserve-crds/<dir>, or None."""
    key = (kserve_dir, kind)
    if key in _CRD_CACHE:
        return _CRD_CACHE[key]
    file = {
        "InferenceService": "serving.kserve.io_inferenceservices.yaml",
        "ServingRuntime": "serving.kserve.io_servingruntimes.yaml",
        "ClusterServingRuntime": "serving.kserve.io_clusterservingruntimes.yaml",
    }[kind]
    path = CRD_ROOT / kserve_dir / file
    if not path.is_file():
        _CRD_CACHE[key] = None
        return None
    with open(path) as handle:
        crd = yaml.load(handle, Loader=_Loader)
    version = next(v for v in crd["spec"]["versions"] if v.get("storage", v.get("served")))
    schema = _strictify(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    validator = Draft7Validator(schema)
    _CRD_CACHE[key] = validator
    return validator


def crd_dir_for(kserve_version: str) -> str:
    major_minor = tuple(int(p) for p in kserve_version.split(".")[:2])
    return "v0.20.0" if major_minor >= (0, 20) else "v0.16.0"


def crd_errors(validator: Draft7Validator, manifest: dict) -> list[str]:
    return [
        "%s: %s" % ("/".join(map(str, e.absolute_path)), e.message)
        for e in validator.iter_errors(json.loads(json.dumps(manifest)))
    ]


# ------------------------------------------------------------------ ansible-playbook


def ansible_env(tmp_path: Path) -> dict:
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH="%s:%s" % (ROOT / "collections", ROOT / ".venv" / "collections"),
        ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        TMPDIR=str(tmp_path),
        PWD=str(ROOT),
    )
    return env


def run_playbook(tmp_path: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    cmd = [str(VENV_BIN / "ansible-playbook"), *args]
    return subprocess.run(
        cmd, cwd=ROOT, env=ansible_env(tmp_path), capture_output=True, text=True, timeout=timeout
    )
