"""A fact module run two ways: its module file (``main()`` under ansible's own test helper, what ``ansible -m``
runs) and its task function (``module_utils/fact_tasks.py``, what the action plugin runs in the worker). Tests
that show both give the same result call these."""

from __future__ import annotations

import contextlib
import importlib
import io
import json

import pytest
from ansible.module_utils.testing import patch_module_args

VOLATILE = {"invocation", "scraped_at", "scraped_at_epoch"}  # the time of each run


def run_main(module, args, check_mode=False):
    """The module's JSON result and whether it failed (exit code)."""
    mod = importlib.import_module("ansible_collections.specpilot.core.plugins.modules." + module)
    out = io.StringIO()
    args = dict(args, _ansible_check_mode=check_mode)
    with patch_module_args(args), contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        mod.main()
    result = json.loads(out.getvalue())
    return {k: v for k, v in result.items() if k not in VOLATILE}, exit_.value.code != 0


def as_task(func, args, spec, check_mode=False):
    """What the action plugin returns: the task function on the spec's defaults, as JSON would carry it."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    params = ArgumentSpecValidator(spec).validate(args).validated_parameters
    result = json.loads(json.dumps(func(params, check_mode)))
    return {k: v for k, v in result.items() if k not in VOLATILE}
