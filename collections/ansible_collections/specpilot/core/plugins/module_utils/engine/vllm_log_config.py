# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""What a vLLM engine log prints of its speculative config: the engine-init line's ``SpeculativeConfig(...)``
repr and the requested ``speculative_config`` dict, as :class:`engine.vllm_logs.LogParser` reads them.
Pure standard library."""

from __future__ import annotations

import ast
import json
import re

_SPEC_CFG_RE = re.compile(
    r"\bspeculative_config=(?:(?P<none>None)|SpeculativeConfig\((?P<body>.*?)\))(?=,\s*\w+=|,?\s*$)")
_CFG_MODEL_RE = re.compile(r"^model=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,]*)")
_CFG_FIELD_RES = {
    "served_model_name": re.compile(r"\bserved_model_name=([^,]*)"),
    "tensor_parallel_size": re.compile(r"\btensor_parallel_size=(\d+)"),
    "data_parallel_size": re.compile(r"\bdata_parallel_size=(\d+)"),
}
_REPR_KV_RE = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,]*)")


def _literal(text):
    text = text.strip()
    if text in ("None", ""):
        return None
    if text[:1] in ("'", '"'):
        if "\\" not in text and len(text) >= 2 and text[-1] == text[0]:
            return text[1:-1]
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text.strip("'\"")
    try:
        return int(text)
    except ValueError:
        return text


def parse_speculative_repr(text):
    """``SpeculativeConfig(...)`` repr body -> {method, model, num_spec_tokens}."""
    values = {}
    for m in _REPR_KV_RE.finditer(text):
        values[m.group(1)] = _literal(m.group(2))
    if "method" in values or "draft_model" not in values:
        method = values.get("method")
        model = values.get("model")
    else:  # <=0.8.2: SpeculativeConfig(draft_model='...', num_spec_tokens=N)
        model = values.get("draft_model")
        method = None
        if isinstance(model, str) and model.strip("[]") == "ngram":
            method, model = "ngram", None
    num = values.get("num_spec_tokens")
    return {
        "method": method,
        "model": model,
        "num_spec_tokens": num if isinstance(num, int) else None,
        "repr": "SpeculativeConfig(%s)" % text,
    }


def _braced(text, start):
    """The balanced ``{...}`` starting at ``text[start]`` (quotes respected), or None."""
    if text[start:start + 1] != "{":
        return None
    depth = 0
    quote = None
    i = start
    n = len(text)
    while i < n:
        ch = text[i]
        if quote is not None:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
        i += 1
    return None


def _init_config_facts(cfg):
    """The facts of the engine-init line's config text: {fact: value} to set."""
    out = {}
    sm = _SPEC_CFG_RE.search(cfg)
    if sm is not None:
        out["speculative_config_found"] = True
        out["speculative_config"] = None if sm.group("none") else parse_speculative_repr(sm.group("body"))
    mm = _CFG_MODEL_RE.match(cfg)
    if mm is not None:
        out["model"] = _literal(mm.group(1))
    for key, rx in _CFG_FIELD_RES.items():
        fm = rx.search(cfg)
        if fm is not None:
            out[key] = _literal(fm.group(1))
    return out


def _requested_value(text):
    """The dict of ``'speculative_config': {...}`` (or of its CLI text) at the start of ``text``;
    None when there is none."""
    literal = _braced(text, 22)
    if literal is None:  # the value is a string (0.8.x passes the CLI text) or not a literal
        m = re.match(r"'speculative_config': ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")", text)
        literal = m.group(1) if m is not None else None
    if literal is None:
        return None
    try:
        value = ast.literal_eval(literal)
        if isinstance(value, str):  # the CLI text: JSON (0.8.3+) or a Python dict (0.8.2)
            try:
                value = json.loads(value)
            except ValueError:
                value = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
