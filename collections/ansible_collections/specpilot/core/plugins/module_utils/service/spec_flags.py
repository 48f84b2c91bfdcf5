# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Which vLLM engine flags carry speculative decoding: defined once, from the version profiles.

* :data:`FLAGS`: the flags that configure speculative decoding in some release (the V0 flags of
  :data:`vllm_profiles.V0_FLAGS`, ``--speculative-config`` and its short and dotted forms);
* :data:`COMPANIONS`: flags specpilot renders only together with them (``--use-v2-block-manager``:
  the V0 engine needed it for speculative decoding only), removed with them by an "off" rollback but
  not a sign of speculative decoding on their own;
* :func:`flag_name`, :func:`is_speculative`: one argument's flag, as vLLM reads it;
* :func:`speculative_args`, :func:`strip_speculative`: the speculative items of an argument list,
  and the list without them (shell command lines kept in one argument too);
* :func:`flag_value_items`: the speculative arguments as ``flag=value`` items (smoke compares them);
* :func:`config_value`, :func:`speculative_config`: the value of a ``--speculative-config`` (JSON, or
  0.8.2's Python literal), and the speculative config an argument list gives the engine, in the spec's
  keys (the JSON form, the dotted form ``--speculative-config.method=...``, the V0 flags): what a
  rollback's smoke check judges a restored revision by.

Used by the renderer's checks (``speculative.RENDERED_FLAGS``), the live view of a service
(``service/live.py``), smoke, the acceptance guard and rollback.  Pure standard library.
"""

from __future__ import annotations

import ast
import json
import shlex

from ansible_collections.specpilot.core.plugins.module_utils.service.vllm_profiles import V0_FLAGS

__all__ = [
    "FLAGS",
    "COMPANIONS",
    "SWITCHES",
    "flag_name",
    "is_speculative",
    "is_removed_by_rollback",
    "speculative_args",
    "strip_speculative",
    "flag_value_items",
    "config_value",
    "speculative_config",
]

# --speculative-config (0.8.2 -) with its short form, the spec-* aliases specpilot refuses in
# extra_args, and every V0 flag of the profiles (<= 0.8.1)
FLAGS = frozenset(
    set(V0_FLAGS.values())
    | {
        "--speculative-config",
        "-sc",
        "--spec-method",
        "--spec-model",
        "--spec-tokens",
        "-spec-draft-tp",
    }
)
COMPANIONS = frozenset({"--use-v2-block-manager"})
# flags that take no value (argparse store_true): never followed by one
SWITCHES = frozenset({V0_FLAGS["disable_mqa_scorer"]}) | COMPANIONS


def flag_name(arg):
    """The flag of one argument (``--flag=value`` or ``--flag``) as vLLM reads it, or None.

    vLLM's FlexibleArgumentParser reads the underscores of a long option's name, up to its first
    ``.``, as dashes (vllm/utils/argparse_utils.py, ``FlexibleArgumentParser.parse_args``, its
    the ``pattern`` of ``parse_args``): ``--speculative_config`` is ``--speculative-config``."""
    if not isinstance(arg, str) or not arg.startswith("-"):
        return None
    flag = arg.split("=", 1)[0]
    if flag.startswith("--"):
        head, dot, rest = flag[2:].partition(".")
        flag = "--" + head.replace("_", "-") + dot + rest
    return flag


def is_speculative(arg):
    """Whether an argument (a flag, with or without its ``=value``) configures speculative decoding."""
    flag = flag_name(arg)
    return flag is not None and (flag in FLAGS or flag.startswith("--speculative-config."))


def is_removed_by_rollback(arg):
    """Speculative, or a flag rendered only with speculative decoding (:data:`COMPANIONS`)."""
    return is_speculative(arg) or flag_name(arg) in COMPANIONS


def _is_switch(arg):
    return flag_name(arg) in SWITCHES


def _shell_words(text):
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _in_shell(arg):
    """A shell command line kept in one argument that names a speculative flag."""
    return " " in arg and any(is_removed_by_rollback(w) for w in _shell_words(arg))


def _takes_next(arg, items, i):
    return "=" not in arg and not _is_switch(arg) and i + 1 < len(items)


def speculative_args(args):
    """The speculative arguments found in ``args`` (a list), each as written: ``--flag=value``,
    ``--flag value`` (the two items joined by a space), a switch, or a whole shell command line."""
    found = []
    items = list(args or [])
    for i, arg in enumerate(items):
        if not isinstance(arg, str):
            continue
        if is_removed_by_rollback(arg):
            found.append("%s %s" % (arg, items[i + 1]) if _takes_next(arg, items, i) else arg)
        elif _in_shell(arg):
            found.append(arg)
    return found


def _strip_shell(text):
    """Remove the speculative flags from a shell command line kept in one argument."""
    try:
        words = shlex.split(text)
    except ValueError:
        return text
    out, skip = [], False
    for i, word in enumerate(words):
        if skip:
            skip = False
            continue
        if is_removed_by_rollback(word):
            skip = _takes_next(word, words, i)
            continue
        out.append(word)
    return " ".join(shlex.quote(w) for w in out)


def strip_speculative(args):
    """``args`` without the speculative arguments; the rest untouched, in order."""
    items = list(args or [])
    out, skip = [], False
    for i, arg in enumerate(items):
        if skip:
            skip = False
            continue
        if not isinstance(arg, str):
            out.append(arg)
        elif is_removed_by_rollback(arg):
            skip = _takes_next(arg, items, i) and not str(items[i + 1]).startswith("--")
        elif _in_shell(arg):
            out.append(_strip_shell(arg))
        else:
            out.append(arg)
    return out


def flag_value_items(args):
    """The speculative arguments in ``args``, each as one ``flag=value`` (or bare ``flag``) item,
    whether written ``--flag=value`` or ``--flag value`` (companions not included)."""
    out = []
    args = [str(a) for a in (args or [])]
    i = 0
    while i < len(args):
        item = args[i]
        if is_speculative(item.split("=", 1)[0]):
            if "=" in item:
                out.append(item)
            elif i + 1 < len(args) and not args[i + 1].startswith("-"):
                out.append("%s=%s" % (item, args[i + 1]))
                i += 1
            else:
                out.append(item)
        i += 1
    return out


def config_value(text):
    """The dict a ``--speculative-config`` value gives, or None when it is not one: JSON (0.8.3 -),
    or the Python literal 0.8.2 read with ``ast.literal_eval`` (``vllm_keys.ERA_TRANSITION``); quotes
    a shell left around it are taken off."""
    text = str(text).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = (_shell_words(text) or [text])[0]
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
    return value if isinstance(value, dict) else None


def _words(args):
    """The command line's words: a shell command line kept in one argument split like the shell (a flag
    with its value in one argument stays one word, spaces in its value or not)."""
    out = []
    for arg in args or []:
        if isinstance(arg, str) and not arg.startswith("-") and _in_shell(arg):
            out += _shell_words(arg)
        else:
            out.append(arg)
    return out


def _scalar(text):
    """A dotted or V0 flag's value as vLLM reads it: JSON when it parses, the string otherwise
    (vllm/utils/argparse_utils.py, ``FlexibleArgumentParser.parse_args``: ``json.loads(value_str)``,
    a ``JSONDecodeError`` keeps the string)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


_V0_KEYS = {flag: key for key, flag in V0_FLAGS.items()}


def _flag_values(args):
    """(flag as vLLM reads it, value or None) of each speculative argument of ``args``."""
    items = _words(args)
    out, i = [], 0
    while i < len(items):
        arg = items[i]
        if isinstance(arg, str) and is_speculative(arg):
            flag = flag_name(arg)
            if "=" in arg:
                value = arg.split("=", 1)[1]
            elif not _is_switch(arg) and i + 1 < len(items) and not str(items[i + 1]).startswith("--"):
                value = str(items[i + 1])
                i += 1
            else:
                value = None
            out.append((flag, value))
        i += 1
    return out


def _set_dotted(cfg, path, value):
    *heads, last = path.split(".")
    for head in heads:
        if not isinstance(cfg.get(head), dict):
            cfg[head] = {}
        cfg = cfg[head]
    cfg[last] = value


def _v0_config(v0):
    """The V0 flags' values in the spec's keys; ``--speculative-model=[ngram]`` is the n-gram method."""
    cfg = {}
    for key, value in v0:
        cfg[key] = True if value is None else _scalar(value)
    if isinstance(cfg.get("model"), str) and cfg["model"].strip("[]") == "ngram":
        cfg.pop("model")
        cfg["method"] = "ngram"
    return cfg


def speculative_config(args):
    """The speculative config ``args`` (an engine's command line, as stored) give the engine, as a dict
    in the spec's keys, or None when they give none.

    * ``--speculative-config <JSON>`` (``=`` or two items, ``--speculative_config``, ``-sc``): the JSON
      (:func:`config_value`); the last one wins, as argparse keeps the last;
    * the dotted form ``--speculative-config.method=ngram --speculative-config.num_speculative_tokens=3``:
      vLLM merges them into one dict and passes it after the other args, so it replaces a JSON value
      (vllm/utils/argparse_utils.py, ``FlexibleArgumentParser.parse_args``: ``dict_args``, appended last);
    * the V0 flags (<= 0.8.1, ``vllm_profiles.V0_FLAGS``): their keys.
    """
    json_cfg, dotted, v0 = None, {}, []
    for flag, value in _flag_values(args):
        if flag in ("--speculative-config", "-sc") and value is not None:
            json_cfg = config_value(value)
        elif flag.startswith("--speculative-config.") and value is not None:
            path = flag[len("--speculative-config."):]
            if path.endswith("+"):  # --json-arg.key+ a,b: list items
                _set_dotted(dotted, path[:-1], list(value.split(",")))
            else:
                _set_dotted(dotted, path, _scalar(value))
        elif flag in _V0_KEYS:
            v0.append((_V0_KEYS[flag], value))
    if dotted:
        return dotted
    if json_cfg is not None:
        return json_cfg
    return _v0_config(v0) or None
