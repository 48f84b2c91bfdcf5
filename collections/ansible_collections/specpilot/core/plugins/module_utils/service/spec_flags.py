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
  and the list without them (shell command lines kept in one argument too).

Used by the renderer's checks (``speculative.RENDERED_FLAGS``), the live view of a service
(``service/live.py``), smoke, the acceptance guard and rollback.  Pure standard library.
"""

from __future__ import annotations

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
