"""The tiny models: layout vLLM accepts, and the same bytes for the same seed."""

from __future__ import annotations

import json

import pytest

from specpilot_lab.models import make_models_subprocess as make_models

pytestmark = [pytest.mark.vllm]


def manifest(path):
    return json.loads((path / "manifest.json").read_text())


def test_same_seed_gives_same_bytes(vllm_venv, tiny_models, tmp_path):
    again = tmp_path / "again"
    make_models(again, seed=0)
    first, second = manifest(tiny_models), manifest(again)
    assert first["files"] == second["files"]
    for rel, digest in first["files"].items():
        assert (again / rel).read_bytes() == (tiny_models / rel).read_bytes(), rel
    assert len(first["files"]) >= 15


def test_other_seed_gives_other_weights_same_tokenizer(vllm_venv, tiny_models, tmp_path):
    other = tmp_path / "seed7"
    make_models(other, seed=7)
    a, b = manifest(tiny_models)["files"], manifest(other)["files"]
    assert a["target/model.safetensors"] != b["target/model.safetensors"]
    assert a["draft/model.safetensors"] != b["draft/model.safetensors"]
    # the tokenizer depends on the built-in corpus only
    assert a["target/tokenizer.json"] == b["target/tokenizer.json"]


def test_layout(tiny_models):
    target = json.loads((tiny_models / "target" / "config.json").read_text())
    draft = json.loads((tiny_models / "draft" / "config.json").read_text())
    assert target["architectures"] == ["LlamaForCausalLM"] == draft["architectures"]
    assert target["num_hidden_layers"] == 2 and draft["num_hidden_layers"] == 1
    assert target["vocab_size"] == draft["vocab_size"] == 2048
    for name in ("target", "draft"):
        for f in (
            "config.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "model.safetensors",
            "generation_config.json",
        ):
            assert (tiny_models / name / f).is_file(), (name, f)
    # draft and target share one tokenizer (vLLM's draft_model method requires it)
    assert (tiny_models / "target" / "tokenizer.json").read_bytes() == (
        tiny_models / "draft" / "tokenizer.json"
    ).read_bytes()
    tok = json.loads((tiny_models / "target" / "tokenizer.json").read_text())
    assert len(tok["model"]["vocab"]) == 2048
    assert [t["content"] for t in tok["added_tokens"]][:4] == ["<unk>", "<s>", "</s>", "<pad>"]


def test_eagle3_head_layout(tiny_models):
    """The fields vLLM reads from an EAGLE-3 head, sized from the target."""
    target = json.loads((tiny_models / "target" / "config.json").read_text())
    eagle = json.loads((tiny_models / "eagle3" / "config.json").read_text())
    assert eagle["architectures"] == ["LlamaForCausalLMEagle3"]
    assert eagle["model_type"] == "llama"
    assert eagle["num_hidden_layers"] == 1
    assert eagle["hidden_size"] == target["hidden_size"] == eagle["target_hidden_size"]
    assert eagle["draft_vocab_size"] == eagle["vocab_size"] == target["vocab_size"]
    # the target layers the head reads: three (fc's input), within the 2-layer target (0..2);
    # vLLM's default for a target without them, (2, L // 2, L - 3), fails on a 2-layer target
    assert eagle["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    assert max(eagle["eagle_aux_hidden_state_layer_ids"]) <= target["num_hidden_layers"]
    header = (tiny_models / "eagle3" / "model.safetensors").read_bytes()
    size = int.from_bytes(header[:8], "little")
    tensors = json.loads(header[8 : 8 + size])
    h = target["hidden_size"]
    assert tensors["fc.weight"]["shape"] == [h, 3 * h]
    assert tensors["midlayer.self_attn.q_proj.weight"]["shape"] == [h, 2 * h]
    assert tensors["lm_head.weight"]["shape"] == [eagle["draft_vocab_size"], h]
    assert "midlayer.hidden_norm.weight" in tensors
