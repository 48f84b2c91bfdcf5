# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The one check before model data is deleted: never what a service serves, never outside its root.

A path to delete is refused when, after normalisation (``a/../b``, ``//``, ``.``), it

- is empty or the root itself;
- lies outside the root (``..`` that climbs out, an absolute path elsewhere);
- equals a protected path (the target, its tokenizer, anything the live or planned predictor
  serves), contains one (deleting the draft's parent deletes the target with it), or lies inside
  one (a "draft" inside the target's directory is part of the target as far as a delete goes).

Paths are POSIX paths relative to the root (a PVC's sub-paths) or absolute under it; the check is
lexical. The Job that deletes repeats it in its shell after resolving symlinks
(:func:`shell_guard`), which only the volume itself can tell. Pure standard library.
"""

from __future__ import annotations

import posixpath

__all__ = ["relative", "delete_refusal", "shell_guard"]


def relative(path, root="/"):
    """``path`` normalised relative to ``root`` ("" for the root itself), or None when it lies
    outside it."""
    if not isinstance(path, str) or not isinstance(root, str):
        return None
    root = posixpath.normpath("/" + root.strip("/"))
    if not path.startswith("/"):
        path = posixpath.normpath(path)
        if path == ".." or path.startswith("../"):
            return None  # climbs out of the root
    full = posixpath.normpath(path if path.startswith("/") else posixpath.join(root, path))
    if full == root:
        return ""
    prefix = root.rstrip("/") + "/"
    return full[len(prefix) :] if full.startswith(prefix) else None


def _related(a, b):
    """'equals', 'contains' (a is an ancestor of b), 'inside' (a below b) or None; "" is the root."""
    if a == b:
        return "equals"
    if a == "" or b.startswith(a + "/"):
        return "contains"
    if b == "" or a.startswith(b + "/"):
        return "inside"
    return None


def delete_refusal(path, protected, root="/"):
    """Why deleting ``path`` would lose data that must stay (a phrase: "lies inside the target
    (...), which is served"), or None when it is safe.

    ``protected``: ``{description: path}`` of what is served (relative to ``root`` or absolute
    under it; a path outside the root protects nothing there)."""
    rel = relative(path, root)
    if rel is None:
        return "lies outside %s" % root
    if rel == "":
        return "is the whole of %s" % root
    for what, other in sorted((protected or {}).items()):
        kept = relative(other, root)
        if kept is not None and _related(rel, kept):
            return "%s %s, which is served" % (_PHRASE[_related(rel, kept)], what)
    return None


_PHRASE = {"equals": "is", "contains": "contains", "inside": "lies inside"}


def shell_guard(var, root, protected_var):
    """POSIX sh that exits 2 with ``SPECPILOT-ERROR`` unless ``$var`` (a path relative to
    ``root``) resolves, symlinks followed, to a strict sub-directory of ``root`` that neither
    equals, contains nor lies inside any of the newline-separated paths of ``$protected_var``
    (relative to ``root`` too).  On success ``$SPECPILOT_REAL`` is the resolved path (it may not
    exist: then there is nothing to delete)."""
    return (
        'resolve() { r=$(readlink -f -- "$1" 2>/dev/null) || r=""; [ -n "$r" ] && printf %%s "$r" || printf %%s "$1"; }; '
        'refuse() { echo "SPECPILOT-ERROR refusing to delete $%(v)s: $1"; exit 2; }; '
        'case "$%(v)s" in ""|/*|*..*) refuse "not a plain sub-path";; esac; '
        'root=$(resolve %(root)s); SPECPILOT_REAL=$(resolve "%(root)s/$%(v)s"); '
        'case "$SPECPILOT_REAL" in "$root"/?*) ;; *) refuse "it resolves to $SPECPILOT_REAL, outside $root";; esac; '
        "old_ifs=$IFS; IFS='\n'; "
        'for p in $%(p)s; do [ -n "$p" ] || continue; k=$(resolve "%(root)s/$p"); '
        'case "$SPECPILOT_REAL/" in "$k"/*) IFS=$old_ifs; refuse "it is or lies inside $k, which the service serves";; esac; '
        'case "$k/" in "$SPECPILOT_REAL"/*) IFS=$old_ifs; refuse "it contains $k, which the service serves";; esac; '
        "done; IFS=$old_ifs; "
    ) % {"v": var, "root": root, "p": protected_var}
