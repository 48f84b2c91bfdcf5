# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The predictor pod seen from inside, as the reference guide checks it before trusting a deploy:
``kubectl exec <pod> -- python3 -c "import vllm; print(vllm.__version__)"`` and ``ls /mnt/models``.

The smoke role runs :func:`command` in the pod with specpilot.core.pod_exec (``specpilot_smoke_inside_pod``)
and hands the result to the verdict (smoke.py ``_pod_view_checks``), which reads it with :func:`parse`:
the vLLM release the image holds, and whether the paths the engine is told to load (the target, the
draft) are directories with a config.json, as the pod sees them.
"""

from __future__ import annotations

import json
import shlex

from ansible_collections.specpilot.core.plugins.module_utils.service import render

MODES = ("auto", "required", "off")

# Runs with the pod's own Python; prints one JSON line. Standard library only, as old as Python 3.6.
SCRIPT = r"""
import json, os, sys
out = {"paths": {}}
try:
    import vllm
    out["vllm_version"] = str(getattr(vllm, "__version__", ""))
except Exception as exc:
    out["vllm_error"] = "%s: %s" % (type(exc).__name__, exc)
for path in sys.argv[1:]:
    entry = {"dir": os.path.isdir(path)}
    if entry["dir"]:
        names = sorted(os.listdir(path))
        entry.update(config_json="config.json" in names, entries=names[:20], count=len(names))
    out["paths"][path] = entry
print(json.dumps(out))
"""


def expected_paths(plan, expect="on"):
    """{what: path} the engine is told to load from the pod's filesystem: the target (``vllm serve``'s
    model, or --model) and, with speculative decoding on, a draft given by path."""
    out = {}
    target = render.served_model((plan or {}).get("args") or [])
    if isinstance(target, str) and target.startswith("/"):
        out["target"] = target
    cfg = (plan or {}).get("speculative_config") or {}
    draft = cfg.get("model") if isinstance(cfg, dict) else None
    if expect == "on" and isinstance(draft, str) and draft.startswith("/"):
        out["draft"] = draft
    return out


def command(plan, python="python3", expect="on"):
    """The command line for specpilot.core.pod_exec (a string: the module splits it like a shell)."""
    words = [str(python), "-c", SCRIPT] + list(expected_paths(plan, expect).values())
    return " ".join(shlex.quote(w) for w in words)


def parse(result):
    """pod_exec's registered result -> {"error": why the pod could not be read, or None, and what
    SCRIPT printed: vllm_version or vllm_error, paths}; None when nothing was run. (The smoke role
    registers it with failed_when false, so an exec the API refused shows as its msg, not as failed.)"""
    if not isinstance(result, dict) or result.get("skipped") or not result:
        return None
    rc = result.get("rc", result.get("return_code"))
    if rc not in (0, None):  # the command ran and failed: its last words
        lines = (result.get("stderr") or result.get("stdout") or "").strip().splitlines()
        return {"error": "exit code %s%s" % (rc, (": " + lines[-1]) if lines else "")}
    for line in reversed((result.get("stdout") or "").strip().splitlines()):
        try:
            view = json.loads(line)
        except ValueError:
            continue
        if isinstance(view, dict) and isinstance(view.get("paths"), dict):
            return dict(view, error=None)
    if result.get("msg"):  # no exec at all (forbidden, no such pod): the API's answer, in short
        lines = [line.strip() for line in str(result["msg"]).splitlines() if line.strip()]
        return {"error": " ".join(lines[:2])}
    printed = (result.get("stdout") or "").strip()[-200:]
    return {"error": "the pod's Python printed no result: %s" % (printed or "nothing")}
