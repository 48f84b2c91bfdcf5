# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The one way a report reaches the disk: ``<basename>.json`` and ``<basename>.md`` in a directory.

Every report of the collection (smoke, benchmark, tuning, canary, rollback, guard) is a dict and its
Markdown rendered in Python; this writes both.

Reports keep their history (issue 39: a second rollback replaced the first one's record). Each run that
found something new writes its own record, ``<out_dir>/history/<basename>/<UTC time, to the microsecond>-<run id>/`` (the
JSON, the Markdown and the plots the report lists), and ``history/<basename>/latest`` links to the
newest; ``<out_dir>/<basename>.json`` and ``.md`` (and the plots beside them) stay where readers found
them, copies of the newest. A rerun that found the same (the report equal to the newest record but for
the run's provenance) writes nothing, so the files and their times stay as they were. The newest
:data:`KEEP` records of a basename are kept.

Each record names its run (:func:`provenance`): a run id (the ansible-playbook process's start time and
pid, shared by every report of one run), the time, the project's version (the collection's, and the git
commit of the checkout when there is one) and the command that reproduces it (the ansible-playbook
command line and its directory, values of secret-looking variables masked). The JSON holds them under
``run``; the Markdown ends with them.
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import time

from ansible_collections.specpilot.core.plugins.module_utils.common import mask_secrets, write_if_changed
from ansible_collections.specpilot.core.plugins.module_utils.report.plots import drawn

__all__ = ["KEEP", "provenance", "report_json", "write_json_and_markdown", "write_report"]

KEEP = 50
HISTORY = "history"
LATEST = "latest"
_RUN_MARK = "\n<!-- specpilot run -->\n"
_COLLECTION = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


def report_json(report):
    """The JSON bytes of a report: sorted keys, two-space indent, a final newline; values JSON cannot
    hold (a datetime, a set) as their text."""
    return (json.dumps(report, indent=2, sort_keys=True, default=str) + "\n").encode("utf-8")


# ------------------------------------------------------------------ the run's provenance
def _proc(pid, what):
    try:
        with open("/proc/%d/%s" % (pid, what), "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _playbook_process():
    """(pid, argv, cwd) of the ansible-playbook process this code runs under (itself, the worker it forked,
    or a module's ancestors: /proc), else None."""
    pid = os.getpid()
    for _hop in range(8):
        raw = _proc(pid, "cmdline")
        argv = [a.decode("utf-8", "replace") for a in (raw or b"").split(b"\0") if a]
        heads = [i for i, a in enumerate(argv[:2]) if os.path.basename(a).startswith("ansible-playbook")]
        if heads:
            start = heads[0]
            try:
                cwd = os.readlink("/proc/%d/cwd" % pid)
            except OSError:
                cwd = None
            return pid, ["ansible-playbook"] + argv[start + 1 :], cwd
        stat = _proc(pid, "stat")
        if not stat:
            break
        pid = int(stat.rsplit(b")", 1)[1].split()[1])  # field 4, after the command in parentheses
        if pid <= 1:
            break
    if sys.argv and os.path.basename(sys.argv[0]).startswith("ansible-playbook"):
        return os.getpid(), ["ansible-playbook"] + sys.argv[1:], os.getcwd()
    return None


def _started(pid):
    """The epoch a process started (/proc/<pid>/stat field 22 and the boot time), else None."""
    stat = _proc(pid, "stat")
    try:
        ticks = int(stat.rsplit(b")", 1)[1].split()[19])
        with open("/proc/stat", "rb") as fh:
            boot = int(next(line for line in fh if line.startswith(b"btime")).split()[1])
        return boot + ticks / float(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, IndexError, StopIteration, OSError):
        return None


def _stamp(epoch):
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(epoch))


_VERSIONS = {}


def _version(cwd):
    """The collection's version (its galaxy.yml or MANIFEST.json, beside this file or under the checkout
    ansible-playbook ran in) and the checkout's git commit; once a process."""
    if cwd not in _VERSIONS:
        _VERSIONS[cwd] = _find_version(cwd)
    return _VERSIONS[cwd]


def _find_version(cwd):
    roots = [_COLLECTION]
    here = cwd
    while here and here != os.path.dirname(here):
        roots.append(os.path.join(here, "collections", "ansible_collections", "specpilot", "core"))
        here = os.path.dirname(here)
    for root in roots:
        version = _collection_version(root)
        if version:
            commit = _git_commit(root)
            return "%s%s" % (version, " (git %s)" % commit if commit else "")
    return "unknown"


def _collection_version(root):
    try:
        with open(os.path.join(root, "MANIFEST.json"), encoding="utf-8") as fh:
            return json.load(fh)["collection_info"]["version"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        with open(os.path.join(root, "galaxy.yml"), encoding="utf-8") as fh:
            found = re.search(r"^version:\s*['\"]?([^'\"\s]+)", fh.read(), re.M)
        return found.group(1) if found else None
    except OSError:
        return None


def _git_commit(root):
    try:
        out = subprocess.run(
            ["git", "-C", root, "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True, text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def provenance(now=None):
    """``{id, at, version, command, directory}`` of this run: the id is the ansible-playbook process's start
    time and pid (one id for every report of a run), else the time and a random suffix; ``command`` the
    ansible-playbook command line (secret-looking values masked), None outside ansible-playbook."""
    now = time.time() if now is None else now
    found = _playbook_process()
    if found:
        pid, argv, cwd = found
        run_id = "%s-p%d" % (_stamp(_started(pid) or now), pid)
        command = " ".join(shlex.quote(mask_secrets(a)) for a in argv)
    else:
        cwd, command = os.getcwd(), None
        run_id = "%s-%06x" % (_stamp(now), random.getrandbits(24))
    return {
        "id": run_id,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "version": _version(cwd),
        "command": command,
        "directory": cwd,
    }


def _run_footer(run):
    how = (
        "`%s` (in `%s`)" % (run["command"], run["directory"])
        if run.get("command")
        else "not known (not run by ansible-playbook)"
    )
    return "%s---\n\nRun `%s` at %s, specpilot %s. Reproduce: %s. Earlier runs: `%s/`.\n" % (
        _RUN_MARK,
        run["id"],
        run["at"],
        run["version"],
        how,
        HISTORY,
    )


# ------------------------------------------------------------------ the writing
def _same_as_latest(paths, report, markdown):
    """Whether the report at ``paths`` (the newest) says what ``report`` and ``markdown`` say, its run's
    provenance aside."""
    try:
        with open(paths["json"], encoding="utf-8") as fh:
            old = json.load(fh)
        with open(paths["markdown"], encoding="utf-8") as fh:
            old_md = fh.read().split(_RUN_MARK)[0]
    except (OSError, ValueError):
        return False
    if not isinstance(old, dict):
        return False
    old.pop("run", None)
    return old_md == markdown and report_json(old) == report_json(report)


def _point_latest(folder, record):
    link = os.path.join(folder, LATEST)
    tmp = link + ".tmp"
    if os.path.lexists(tmp):
        os.remove(tmp)
    os.symlink(os.path.basename(record), tmp)
    os.replace(tmp, link)


def _prune(folder, keep):
    records = sorted(d for d in os.listdir(folder) if d != LATEST and not d.endswith(".tmp"))
    for old in records[: max(0, len(records) - keep)]:
        shutil.rmtree(os.path.join(folder, old), ignore_errors=True)


def _record(out_dir, basename, report, files, run):
    """The run's own record, history/<basename>/<time>-<id>/, with the files (bytes by name)."""
    folder = os.path.join(out_dir, HISTORY, basename)
    now = time.time()  # to the microsecond: two records of one second sort in the order they were written
    stamp = "%s.%06dZ" % (time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)), int(now % 1 * 1e6))
    record = os.path.join(folder, "%s-%s" % (stamp, run["id"]))
    os.makedirs(record, exist_ok=True)
    for name, data in files.items():
        write_if_changed(os.path.join(record, name), data)
    for plot in report.get("plots") or []:
        source = os.path.join(out_dir, plot.get("file") or "")
        if plot.get("file") and os.path.isfile(source):
            shutil.copy2(source, os.path.join(record, os.path.basename(plot["file"])))
    _point_latest(folder, record)
    _prune(folder, KEEP)
    return record


def write_json_and_markdown(out_dir, basename, report, markdown, run=None):
    """Writes out_dir/<basename>.json and .md (out_dir is created when missing) and the run's record under
    out_dir/history/<basename>/ (module docstring), unless the newest already says the same.

    Returns ({"json": path, "markdown": path, "history": record or None, "latest": link}, written), written
    True when a new record was written."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {
        "json": os.path.join(out_dir, basename + ".json"),
        "markdown": os.path.join(out_dir, basename + ".md"),
    }
    latest = os.path.join(out_dir, HISTORY, basename, LATEST)
    if _same_as_latest(paths, report, markdown):
        newest = os.path.join(os.path.dirname(latest), os.readlink(latest)) if os.path.islink(latest) else None
        paths.update(history=newest, latest=latest)
        return paths, False
    run = run or provenance()
    data = {
        "json": report_json(dict(report, run=run)),
        "markdown": (markdown + _run_footer(run)).encode("utf-8"),
    }
    record = _record(
        out_dir, basename, report, {basename + ".json": data["json"], basename + ".md": data["markdown"]}, run
    )
    write_if_changed(paths["json"], data["json"])
    write_if_changed(paths["markdown"], data["markdown"])
    paths.update(history=record, latest=latest)
    return paths, True


def write_report(out_dir, basename, report, markdown, plots=None, wanted=True):
    """A report with its plots: draws them first (``plots(report, out_dir)``, when given and ``wanted``;
    :func:`plots.drawn`), then writes <basename>.json and the Markdown ``markdown(report)`` renders, which
    links them. Returns ({"json", "markdown", "history", "latest", "plots": [paths]}, written)."""
    if plots is not None:
        os.makedirs(out_dir, exist_ok=True)  # the plots go there first
        drawn(report, lambda: plots(report, out_dir), wanted)
    paths, written = write_json_and_markdown(out_dir, basename, report, markdown(report))
    paths["plots"] = [os.path.join(out_dir, p["file"]) for p in report.get("plots") or []]
    return paths, written
