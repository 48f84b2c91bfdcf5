# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The facts of a model directory: ``config.json`` and the tokenizer files, never the weights.

One file, Python 3.8+ standard library only, so that it runs unchanged in two places:

* on the Ansible controller, imported as ``specpilot.core`` module_utils (compat.py re-exports
  ``read_local_facts``; model_facts.py reads local_path and the small files fetched from hf://, s3://
  and oci:// sources with it);
* inside the runtime image, as the in-cluster probe program (``python3 model_dir.py --probe
  request.json``): module_utils/service/cluster_probe.py ships this file's source in a ConfigMap
  (inspect.getsource, as pvc_staging.program_source ships stager.py), so a directory on a PVC is read
  exactly as a local one.  The probe prints one line ``SPECPILOT-PROBE {json}``: ``vllm.__version__``
  (or why ``import vllm`` failed) and, per requested directory, its facts or the problem.
"""

from __future__ import absolute_import, division, print_function

import glob
import hashlib
import json
import os
import sys

__metaclass__ = type

# the facts config.json gives as they are (compat.FACT_KEYS holds them, with the others)
CONFIG_KEYS = (
    "model_type",
    "hidden_size",
    "vocab_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "num_nextn_predict_layers",
)
PROBE_MARKER = "SPECPILOT-PROBE "
PROBE_FORMAT = 1

_DTYPES = {
    "bfloat16": "bfloat16",
    "float16": "float16",
    "half": "float16",
    "float32": "float32",
    "float": "float32",
    "float8_e4m3fn": "fp8",
}


def _load_json(path):
    with open(path, "rb") as handle:
        return json.loads(handle.read().decode("utf-8"))


def _tokenizer_identity(directory):
    """A sha256 over the vocabulary (so formatting differences do not matter), and its size."""
    tok_json = os.path.join(directory, "tokenizer.json")
    if os.path.isfile(tok_json):
        data = _load_json(tok_json)
        vocab = (data.get("model") or {}).get("vocab")
        items = []
        if isinstance(vocab, dict):
            items = sorted((str(k), int(v)) for k, v in vocab.items())
        elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
            items = [(str(p[0]) if isinstance(p, list) else str(p), i) for i, p in enumerate(vocab)]
        added = sorted((str(t.get("content")), int(t.get("id", -1))) for t in data.get("added_tokens") or [])
        digest = hashlib.sha256(json.dumps([items, added], separators=(",", ":")).encode("utf-8")).hexdigest()
        ids = {i for _t, i in items} | {i for _t, i in added}
        return "sha256:" + digest, (max(ids) + 1 if ids else None)
    for name in ("tokenizer.model", "vocab.json"):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                return "sha256:" + hashlib.sha256(handle.read()).hexdigest(), None
    return None, None


def _weight_bytes(directory):
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.isfile(index):
        total = (_load_json(index).get("metadata") or {}).get("total_size")
        if isinstance(total, int) and total > 0:
            return total
    total = 0
    for pattern in ("*.safetensors", "pytorch_model*.bin"):
        for path in glob.glob(os.path.join(directory, pattern)):
            total += os.path.getsize(path)
    return total or None


def _estimate_params(cfg):
    """Rough parameter count of a decoder-only transformer config (dense layers)."""
    h, v, layers = cfg.get("hidden_size"), cfg.get("vocab_size"), cfg.get("num_hidden_layers")
    if not all(isinstance(x, int) for x in (h, v, layers)):
        return None
    heads = cfg.get("num_attention_heads") or 1
    kv = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or h // heads
    inter = cfg.get("intermediate_size") or 4 * h
    attn = h * heads * head_dim * 2 + h * kv * head_dim * 2
    mlp = 3 * h * inter
    experts = cfg.get("num_local_experts") or cfg.get("n_routed_experts") or cfg.get("num_experts") or 1
    embed = v * h * (1 if cfg.get("tie_word_embeddings") else 2)
    return (embed + layers * (attn + mlp * experts)) / 1e9


def _head_facts(raw, archs):
    """What a speculator head's config.json says about itself: every architecture, the keys only EAGLE-3
    heads carry (vLLM: transformers_utils/configs/eagle.py EAGLEConfig; models/llama_eagle3.py LlamaModel
    reads target_hidden_size for the input of its fc layer), and the target it names (the speculators
    format's speculators_config.verifier)."""
    facts = {}
    if isinstance(archs, list) and archs:
        facts["architectures"] = [str(a) for a in archs]
    if isinstance(raw.get("target_hidden_size"), int):
        facts["target_hidden_size"] = raw["target_hidden_size"]
    markers = sorted(k for k in ("draft_vocab_size", "target_hidden_size", "eagle_config") if k in raw)
    if markers:
        facts["head_markers"] = markers
    spec_type = raw.get("speculators_model_type")
    if isinstance(spec_type, str):
        facts["speculators_model_type"] = spec_type
    verifier = (raw.get("speculators_config") or {}).get("verifier")
    if isinstance(verifier, dict):
        if isinstance(verifier.get("name_or_path"), str):
            facts["eagle_target"] = verifier["name_or_path"]
        if isinstance(verifier.get("architectures"), list):
            facts["eagle_target_architectures"] = [str(a) for a in verifier["architectures"]]
    return facts


def _lm_config(raw):
    """The language model's config of a config.json: multimodal wrappers keep it in text_config (the
    wrapper's own keys fill the rest); speculators-format heads in transformer_layer_config (the head's
    own keys, its architectures (Eagle3Speculator ...) among them, win)."""
    if isinstance(raw.get("text_config"), dict):
        merged = dict(raw["text_config"])
        merged.update({k: v for k, v in raw.items() if k not in merged})
        return merged
    if isinstance(raw.get("transformer_layer_config"), dict):
        cfg = dict(raw["transformer_layer_config"])
        cfg.update(raw)
        return cfg
    return dict(raw)


def _config_facts(cfg):
    """What a model's config says: architecture, CONFIG_KEYS, dtype, quantization, context, draft vocab."""
    facts = {}
    archs = cfg.get("architectures")
    if isinstance(archs, list) and archs:
        facts["architecture"] = str(archs[0])
    for key in CONFIG_KEYS:
        if cfg.get(key) is not None:
            facts[key] = cfg[key]
    dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    if isinstance(dtype, str) and dtype in _DTYPES:
        facts["dtype"] = _DTYPES[dtype]
    quant = cfg.get("quantization_config")
    if isinstance(quant, dict) and quant.get("quant_method"):
        facts["quantization"] = str(quant["quant_method"])
    for key in ("max_position_embeddings", "draft_vocab_size"):
        if isinstance(cfg.get(key), int):
            facts[key] = cfg[key]
    return facts


def read_local_facts(directory, where="on the controller"):
    """Facts from ``directory``/config.json and the tokenizer files.  Returns (facts, problem); where: the
    place the directory was looked for, as the problem names it."""
    if not os.path.isdir(directory):
        return {}, "directory %s does not exist %s" % (directory, where)
    cfg_path = os.path.join(directory, "config.json")
    if not os.path.isfile(cfg_path):
        return {}, "%s has no config.json" % directory
    try:
        raw = _load_json(cfg_path)
    except (OSError, ValueError) as exc:
        return {}, "cannot read %s: %s" % (cfg_path, exc)
    cfg = _lm_config(raw)
    facts = _config_facts(cfg)
    facts.update(_head_facts(raw, cfg.get("architectures")))
    tokenizer, tok_size = _tokenizer_identity(directory)
    if tokenizer:
        facts["tokenizer"] = tokenizer
    if tok_size:
        facts["tokenizer_vocab_size"] = tok_size
    weights = _weight_bytes(directory)
    if weights:
        facts["weight_bytes"] = weights
    params = _estimate_params(cfg)
    if params is not None:
        facts["params_b_estimate"] = round(params, 6)
    return facts, None


# ---------------------------------------------------------------- the in-cluster probe program
def probe_version():
    """{"version": vllm.__version__} or {"error": why the import failed}: never fatal."""
    try:
        import vllm  # pylint: disable=import-outside-toplevel  # the runtime image's, not the controller's

        return {"version": str(vllm.__version__)}
    except Exception as exc:  # pylint: disable=broad-except  # a missing or broken vLLM is a result
        return {"error": "import vllm failed: %s: %s" % (type(exc).__name__, exc)}


def probe(request):
    """The probe's result for a request {format, version: bool, models: [{role, path}]}."""
    out = {"format": PROBE_FORMAT, "python": sys.version.split()[0], "models": {}}
    if request.get("version", True):
        out["vllm"] = probe_version()
    for model in request.get("models") or []:
        try:
            facts, problem = read_local_facts(model["path"], where="in the probe's pod")
        except Exception as exc:  # pylint: disable=broad-except  # one bad directory is that model's problem
            facts, problem = {}, "reading %s failed: %s: %s" % (model["path"], type(exc).__name__, exc)
        entry = {"path": model["path"], "facts": facts}
        if problem:
            entry["problem"] = problem
        out["models"][model["role"]] = entry
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] != "--probe":
        sys.stderr.write("usage: model_dir.py --probe request.json\n")
        return 2
    with open(argv[1]) as handle:
        request = json.load(handle)
    sys.stdout.write(PROBE_MARKER + json.dumps(probe(request), sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
