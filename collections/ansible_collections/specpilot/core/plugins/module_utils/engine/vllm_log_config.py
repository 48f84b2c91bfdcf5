# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""What a vLLM engine log prints of its speculative config: the engine-init line's ``SpeculativeConfig(...)``
repr and the requested ``speculative_config`` dict, as :class:`engine.vllm_logs.LogParser` reads them.
Pure standard library."""

from __future__ import annotations

import ast
import re

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
