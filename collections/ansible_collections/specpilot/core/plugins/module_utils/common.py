# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Small helpers every part of the collection uses: nested lookups in API objects, Kubernetes
timestamps, defaults a caller's settings override, files written only when their content changes, and what
looks like a secret (a name, a value's shape: the spec's checks refuse it, the reports mask it).
Pure standard library."""

from __future__ import annotations

import datetime
import inspect
import os
import pkgutil
import re

__all__ = [
    "CREDENTIAL_SHAPES",
    "SECRET_NAME",
    "get_path",
    "k8s_meta",
    "key_paths",
    "mask_secrets",
    "micro_time",
    "parse_time",
    "read_files",
    "with_defaults",
    "write_if_changed",
]

# What looks like a secret, one definition (service/spec_sanity.py refuses it in a spec, report/files.py masks it in
# a reproduce command). A name: a word of it (HF_TOKEN, AWS_SECRET_ACCESS_KEY, DB_PASSWORD), not a prefix
# (TOKENIZERS_PARALLELISM) nor a word's start (num_speculative_tokens, max_tokens).
SECRET_NAME = re.compile(
    r"(^|_)(TOKEN|SECRET|CREDENTIALS?|(API_?|ACCESS_|PRIVATE_)?KEY)(_|$)|PASSWORD|PASSWD", re.I
)
# A value, whatever its name: (what it is, its shape).
CREDENTIAL_SHAPES = (
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("an AWS access key id", re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a GitHub token", re.compile(r"\b(gh[pousr]|github_pat)_[A-Za-z0-9_]{30,}")),
    ("an OpenAI-style API key", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")),
    ("a JSON Web Token", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
)
# a name and its value in a line of text (``name=value``, ``"name": "value"``)
_ASSIGNMENT = re.compile(r"([A-Za-z0-9_]+)(\"?\s*[=:]\s*\"?)([^\s,\"'}]+)")


def mask_secrets(text):
    """``text`` with the values of secret-like names (SECRET_NAME) and anything shaped like a credential
    (CREDENTIAL_SHAPES) as ``***``."""
    text = _ASSIGNMENT.sub(
        lambda m: m.group(1) + m.group(2) + "***" if SECRET_NAME.search(m.group(1)) else m.group(0), text
    )
    for _what, shape in CREDENTIAL_SHAPES:
        text = shape.sub("***", text)
    return text


def get_path(obj, *keys):
    """``obj[k1][k2]...``, or None as soon as a level is missing or not a mapping."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def k8s_meta(obj):
    """The ``metadata`` of an API object ({} when there is none)."""
    return (obj or {}).get("metadata") or {}


def key_paths(desired, other, path, compare):
    """The paths (``path.key``) of the keys of the dict ``desired`` that the dict ``other`` lacks, and for
    each key both hold, what ``compare(value, other_value, path.key)`` returns (a list of paths)."""
    out = []
    for key, value in desired.items():
        sub = "%s.%s" % (path, key) if path else str(key)
        out.extend(compare(value, other[key], sub) if key in other else [sub])
    return out


def with_defaults(defaults, given, what, keep_none=()):
    """``defaults`` updated with ``given``: a None value keeps the default, but for the keys in
    ``keep_none``; a key ``defaults`` lacks is a ValueError naming it (``unknown <what> 'key'``)."""
    out = dict(defaults)
    for key, value in (given or {}).items():
        if key not in defaults:
            raise ValueError("unknown %s %r (known: %s)" % (what, key, ", ".join(sorted(defaults))))
        if value is not None or key in keep_none:
            out[key] = value
    return out


def micro_time(epoch):
    """Kubernetes MicroTime (``2026-11-21T06:00:00.000000Z``) of an epoch second."""
    return datetime.datetime.fromtimestamp(float(epoch), datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ"
    )


def parse_time(text):
    """Epoch seconds of a Kubernetes Time/MicroTime string (None when unparsable)."""
    if not isinstance(text, str) or not text:
        return None
    value = text.strip().replace("Z", "+00:00")
    if "." in value:
        head, _sep, rest = value.partition(".")
        frac, sign, tz = "", "", ""
        for i, ch in enumerate(rest):
            if ch in "+-":
                frac, sign, tz = rest[:i], ch, rest[i + 1 :]
                break
        else:
            frac = rest
        value = "%s.%s%s%s" % (head, (frac + "000000")[:6], sign, tz)
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.timezone.utc)
    return parsed.timestamp()


def write_if_changed(path, data):
    """Write ``data`` (bytes) to ``path`` atomically unless the file already holds it; True when written."""
    if os.path.exists(path):
        with open(path, "rb") as fh:
            if fh.read() == data:
                return False
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)
    return True


def read_files(paths):
    """{path: bytes} of the paths that exist: compare before and after a write to report changed."""
    out = {}
    for p in paths:
        if os.path.exists(p):
            with open(p, "rb") as fh:
                out[p] = fh.read()
    return out


def module_source(module):
    """The source text of a module_utils module that is also a program run in a Job or pod (stager.py,
    model_dir.py), as shipped in the Job's ConfigMap."""
    try:
        return inspect.getsource(module)
    except (OSError, TypeError):  # pragma: no cover - zip imports without source
        package, name = module.__name__.rsplit(".", 1)
        return pkgutil.get_data(package, name + ".py").decode("utf-8")
