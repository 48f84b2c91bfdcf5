"""The release boundaries of the issue 38 rules (preflight_rules.py), each at the releases whose source
was read on both sides; the real configs these rules come from are in test_validate_real_world.py."""

from __future__ import annotations

import pytest

from validate_helpers import base_spec, paths

from ansible_collections.specpilot.core.plugins.module_utils.service import preflight_rules
from ansible_collections.specpilot.core.plugins.module_utils.service.validator import validate
from ansible_collections.specpilot.core.plugins.module_utils.service.versions import parse_version

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}


def _spec(version, speculative, **changes):
    spec = base_spec(
        vllm_version=version,
        runtime={"image": "vllm/vllm-openai:v%s" % version},
        draft=None,
        delivery="storage_uri",
        speculative=speculative,
        acknowledged_warnings=["async-scheduling-disabled"],
        **changes,
    )
    return spec


def _codes(result):
    return {f["code"] for f in result["errors"]}, {f["code"] for f in result["warnings"]}


@pytest.mark.parametrize(
    "version,method,engine",
    [
        ("0.7.3", "ngram", "v0"),
        ("0.8.5", "eagle3", "v1"),
        ("0.8.5", "medusa", "v0"),
        ("0.9.2", "medusa", "v1"),
        ("0.9.2", "draft_model", "v0"),
        ("0.10.0", "draft_model", "v1"),
    ],
)
def test_engine_for(version, method, engine):
    assert preflight_rules.engine_for(parse_version(version)[:3], method) == engine


@pytest.mark.parametrize("version,refused", [("0.8.5", True), ("0.9.0", False), ("0.32.0", False)])
def test_structured_output_with_ngram_is_refused_before_0_9_0(version, refused):
    result = validate(_spec(version, NGRAM, workload={"structured_output": True}))
    errors, warnings = _codes(result)
    assert ("structured-output-spec" in errors) is refused, result["report"]
    assert ("structured-output-spec-reported" in warnings) is not refused, result["report"]
    # without the workload saying so, no finding
    plain = validate(_spec(version, NGRAM))
    assert not {c for c in _codes(plain)[0] | _codes(plain)[1] if c.startswith("structured-output")}


@pytest.mark.parametrize("version,code", [("0.11.0", "lora-spec"), ("0.11.1", "lora-spec-partial")])
def test_lora_is_refused_on_v1_before_0_11_1(version, code):
    result = validate(_spec(version, NGRAM, vllm_args={"extra_args": ["--enable-lora"]}))
    errors, warnings = _codes(result)
    assert code in (errors if code == "lora-spec" else warnings), result["report"]
    off = validate(_spec(version, NGRAM, vllm_args={"extra_args": ["--enable-lora=false"]}))
    assert not {c for c in _codes(off)[0] | _codes(off)[1] if c.startswith("lora")}, off["report"]


def test_lora_with_adaptive_verification_is_refused():
    """Refused by 0.28.0 (VllmConfig._validate_v2_model_runner), 0.32.0 (_validate_adaptive_verification)."""
    dspark = {"method": "dspark", "num_speculative_tokens": 3, "enable_adaptive_verification": True}
    result = validate(_spec("0.32.0", dspark, vllm_args={"extra_args": ["--enable-lora"]}))
    assert "speculative.enable_adaptive_verification" in paths(result["errors"]), result["report"]
    assert "lora-adaptive-verification" in _codes(result)[0]


@pytest.mark.parametrize(
    "version,method,draft_tp,code,path",
    [
        # 0.6.3.post1: "Speculative decoding and chunked prefill are currently mutually exclusive"
        ("0.6.3", "ngram", None, "v0-chunked-prefill", "vllm_args.extra_args"),
        # 0.6.4: only a draft at TP 1 (unset means the target's 4), never a hidden-state draft
        ("0.6.4", "draft_model", 4, "draft-tp", "speculative.draft_tensor_parallel_size"),
        ("0.6.4", "draft_model", None, "draft-tp", "speculative.draft_tensor_parallel_size"),
        ("0.6.4", "draft_model", 1, None, None),
        ("0.6.4", "ngram", None, None, None),  # the n-gram branch never reaches the check
        ("0.6.4", "eagle", 1, "v0-chunked-prefill", "vllm_args.extra_args"),
        # 0.6.5: the draft-TP clause is gone; hidden-state drafts still refused
        ("0.6.5", "draft_model", 4, None, None),
        ("0.6.5", "medusa", 1, "v0-chunked-prefill", "vllm_args.extra_args"),
    ],
)
def test_chunked_prefill_per_release(version, method, draft_tp, code, path):
    findings = _Findings()
    cfg = {"method": method}
    if draft_tp is not None:
        cfg["draft_tensor_parallel_size"] = draft_tp
    ctx = {
        "version": parse_version(version),
        "version_label": version,
        "target_tp": 4,
        "extra_args": ["--enable-chunked-prefill"],
        "chunked_profile": "incompatible",  # the 0.6.3.post1 profile these releases are judged on
    }
    preflight_rules.check_chunked_prefill(cfg, ctx, findings, "speculative")
    assert findings.errors == ([(path, code)] if code else [])
    preflight_rules.check_chunked_prefill(
        cfg, dict(ctx, extra_args=["--enable-chunked-prefill=False"]), findings, "speculative"
    )
    assert len(findings.errors) == (1 if code else 0)  # off: nothing more


class _Findings:
    def __init__(self):
        self.errors = []

    def error(self, path, message, hint, code):
        assert message and hint
        self.errors.append((path, code))


@pytest.mark.parametrize(
    "version,draft_tp,code",
    [
        ("0.6.3", 4, "draft-tp"),  # 1 only before vllm#9394
        ("0.6.4", 4, None),  # 1 or the target's size
        ("0.6.4", 2, "draft-tp"),
        ("0.16.0", 1, "draft-tp"),  # V1 draft_model: the target's size only
        ("0.16.0", 4, None),
    ],
)
def test_draft_tp_of_draft_model_per_release(version, draft_tp, code):
    spec = base_spec(
        vllm_version=version,
        runtime={"image": "vllm/vllm-openai:v%s" % version},
        kserve_version="0.15",
        delivery="pvc",
        pvc={"name": "models"},
        speculative={
            "method": "draft_model",
            "num_speculative_tokens": 3,
            "draft_tensor_parallel_size": draft_tp,
        },
        gpu={"count": 4, "memory_gib": 80},
    )
    spec["vllm_args"]["tensor_parallel_size"] = 4
    spec["draft"] = {
        "uri": "hf://meta-llama/Llama-3.2-1B-Instruct",
        "params_b": 1.24,
        "dtype": "bfloat16",
        "architecture": "LlamaForCausalLM",
        "model_type": "llama",
        "hidden_size": 2048,
        "vocab_size": 128256,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "tokenizer": "meta-llama/Llama-3.1",
    }
    spec["target"]["tokenizer"] = "meta-llama/Llama-3.1"
    result = validate(spec)
    field = [f for f in result["errors"] if f["path"] == "speculative.draft_tensor_parallel_size"]
    assert [f["code"] for f in field] == ([code] if code else []), result["report"]
