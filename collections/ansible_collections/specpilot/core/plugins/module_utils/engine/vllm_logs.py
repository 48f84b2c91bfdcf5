# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Streaming parser for vLLM engine logs: speculative-decoding facts.

Pure standard library. The parser reads a log line by line (constant memory, any size), so it
can be fed from a file, a string or any iterable of lines. It understands every log format of
vLLM 0.5.5 to 0.33.0 (see ``../shared/reference/vllm-facts.md`` sections 3.1 to 3.5):

* record header ``LEVEL MM-DD HH:MM:SS[.fff] [file.py:NN] message`` (``file.py:NN]`` up to 0.7.x),
  optionally preceded by a process prefix ``(APIServer pid=N) `` / ``(EngineCore_DP0 pid=N) ``
  and wrapped in ANSI colour codes;
* several records collapsed onto one physical line (split on the record-start pattern);
* V0 cumulative ``Speculative metrics: Draft acceptance rate: 0.642, System efficiency: ...`` lines
  (including the ``tokens tokens`` typo of old builds);
* the V1 ``SpecDecoding metrics:`` per-interval lines in their four formats (0.8.3-0.8.4,
  0.8.5, 0.9.0-0.10.1, 0.10.2-0.33.0) and unknown variants: the body is read as key/value pairs,
  never by position, so extra keys are kept in ``extra`` and missing keys stay ``None``. (Only
  a body that is exactly the 0.10.2-0.33.0 format string takes a one-regex shortcut, which
  yields the same fields; tests assert the equivalence.);
* the engine-init line's ``speculative_config=SpeculativeConfig(...)`` / ``=None``, the version
  lines, readiness (``Application startup complete.``), and the warnings and start errors that
  matter for speculative decoding (``ISSUE_RULES``).

Line numbers are 1-based physical lines split on ``\\n`` only (what ``grep -n`` shows); a bare
``\\r`` inside a line (progress bars, the vLLM logo) does not start a new line.

Speed: files are read in 1 MiB chunks; each keyword of ``_INTEREST`` is located with
``bytes.find`` and only the lines holding one are decoded (uvicorn access lines, routes and
``Engine NNN:`` throughput lines are only counted). A V1 window's data-parallel engine index is
looked up lazily, by searching the preceding 64 KiB for the ``Engine NNN:`` line of the same
process (``_lookback_engine``). Memory: one chunk, a 64 KiB tail, the kept windows and issues.
"""

from __future__ import annotations

import collections
import heapq
import io
import re

from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_log_config import (
    _init_config_facts,
    _requested_value,
)
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_log_rules import (
    _ISSUE_HINTS,
    _NEEDLES,
    ISSUE_RULES,
)
from ansible_collections.specpilot.core.plugins.module_utils.engine.vllm_log_windows import (
    _V1_LINE_FAST_B_RE,
    _Accumulator,
    _empty_summary,
    _window_dict,
    parse_metrics_body,
    parse_metrics_pairs,
)

__all__ = [
    "DEFAULT_MAX_ISSUES",
    "DEFAULT_MAX_WINDOWS",
    "ISSUE_RULES",
    "LogParser",
    "parse_log_file",
    "parse_log_lines",
    "parse_log_text",
    "parse_metrics_body",
    "parse_metrics_pairs",
]

DEFAULT_MAX_WINDOWS = 1000
DEFAULT_MAX_ISSUES = 100
_CHUNK = 1 << 20
_LOOKBACK = 64 << 10  # bytes searched back from a V1 window for its "Engine NNN:" line
_TEXT_LIMIT = 1000  # characters of a record kept in an issue's ``text``

# --------------------------------------------------------------------------- patterns

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")

# ``(APIServer pid=123) `` / ``(EngineCore_DP1 pid=7) `` / ``(VllmWorker rank=0 pid=9) ``
_PREFIX = r"\((?P<proc>[^()]*?) pid=(?P<pid>\d+)\) "
_PREFIX_RE = re.compile(_PREFIX)
# one log record start: optional process prefix, level, timestamp without year, file:line
_HEADER_RE = re.compile(
    r"(?:" + _PREFIX + r")?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?) "
    r"\[?(?P<src>[\w.\-/]+:\d+)\] ?"
)
# cheap test for a further record start inside a line (collapsed records)
_NEXT_RECORD_RE = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d")
_DP_RE = re.compile(r"DP(\d+)")
_UVICORN_ACCESS_RE = re.compile(r'INFO:\s+\S+ - "[A-Z]+ \S+ HTTP/[\d.]+" \d{3}')

_VERSION_RES = (
    # 0.16+ ASCII-art logo: only block characters and spaces before "version X"
    re.compile(r"^[^A-Za-z0-9]*version (?P<v>\d+\.\d+[\w.+\-]*)\s*$"),
    # <=0.14.1 "vLLM API server version X" / later "vLLM server version X, serving model Y"
    re.compile(r"\bvLLM (?:API )?server version (?P<v>\d+\.\d+[\w.+\-]*?)(?:,|\s|$)"),
)
_INIT_RE = re.compile(
    r"Initializing an? (?:(?P<era>V[01]) )?LLM engine \(v(?P<v>[^)\s]+)\) with config: (?P<cfg>.*)$"
)
_ASYNC_STATE_RE = re.compile(r"Asynchronous scheduling is (enabled|disabled)\.")
_ENGINE_LINE_RE = re.compile(r"Engine (\d+): ")
# a record header, as bytes (group 1: the level)
_HEADER_B_RE = re.compile(
    rb"(?:\([^()]*? pid=\d+\) )?(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? "
    rb"\[?[\w.\-/]+:\d+\] ?")
# a whole "Engine NNN: Avg prompt throughput ..." INFO/DEBUG line without ANSI codes, as bytes
_ENGINE_B_RE = re.compile(
    rb"(?:\(([^()]*?) pid=(\d+)\) )?(?:INFO|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? "
    rb"\[?[\w.\-/]+:\d+\] ?Engine (\d+): ")
_EXC_RE = re.compile(r"^(?:[\w.]+\.)?(?P<exc>[A-Z]\w*(?:Error|Exception|Exit)): ?(?P<msg>.*)$")
_UNKNOWN_KEY_RE = re.compile(r"unexpected keyword argument '(\w+)'|'(\w+)' is not a valid argument")
_VALIDATION_HDR_RE = re.compile(r"(?P<n>\d+) validation errors? for (?P<model>\w+)")
_PKG_RES = (
    re.compile(r"No module named '(?P<p>[\w.\-]+)'"),
    re.compile(r"pip install (?P<p>[\w.\-\[\]]+?)(?:==[\w.]+)?[`'\"\s.]"),
)

# Bytes that make a physical line worth decoding. Anything else (uvicorn access lines, route
# listings, loading progress, "Engine NNN:" throughput lines ...) is skipped with C-level
# substring searches. A V1 window's engine index is looked up lazily (_lookback_engine).
_INTEREST = (
    b"metrics: ",  # SpecDecoding metrics: / Speculative metrics:
    b"WARNING",
    b"ERROR",
    b"rror",  # ValueError, ImportError, OutOfMemoryError, "validation error", "error:" ...
    b"LLM engine",  # engine-init line with speculative_config=
    b"non-default args",
    b" version ",
    b"startup complete",
    b"shutdown",  # "[shutdown]", "Waiting for application shutdown.", "shutdown complete"
    b"Asynchronous scheduling",
)


_ENGINE_KEY = b"] Engine "


_MISS = object()
_PENDING = object()
_ISSUE_CACHE_SIZE = 512  # distinct (level, message) classifications kept (bounded memory)
_PP_CACHE_SIZE = 4096  # distinct per-position acceptance texts kept (bounded memory)

# --------------------------------------------------------------------------- helpers


def _version_key(version):
    parts = []
    for piece in re.split(r"[.+\-]", version or ""):
        if piece.isdigit():
            parts.append(int(piece))
        else:
            break
    return tuple(parts)


def _has_next_record(text, start):
    """Another record header after ``start`` (collapsed records)? Cheap literal tests first."""
    for level in ("INFO ", "WARNING ", "ERROR ", "DEBUG ", "CRITICAL "):
        if text.find(level, start) >= 0:
            return _NEXT_RECORD_RE.search(text, start) is not None
    return False


def _names(proc, pid):
    return (proc.decode("utf-8", "replace") if proc is not None else None,
            pid.decode() if pid is not None else None)


def _engine_records(raw):
    """[((proc, pid), engine index)] of the ``Engine NNN:`` records on one physical line."""
    m = _ENGINE_B_RE.match(raw)
    if m is not None and raw.count(b"]") == 1:
        return [(_names(m.group(1), m.group(2)), int(m.group(3)))]
    text = raw.decode("utf-8", "replace").rstrip("\r\n")
    if "\x1b" in text:
        text = _ANSI_RE.sub("", text)
    out = []
    for proc, pid, level, _ts, msg, _full in LogParser._records(text):
        if level in ("INFO", "DEBUG"):
            em = _ENGINE_LINE_RE.match(msg)
            if em is not None:
                out.append(((proc, pid), int(em.group(1))))
    return out


def _raw_record(text):
    """A record without a log header (uvicorn, tracebacks, stderr), maybe process-prefixed."""
    pm = _PREFIX_RE.match(text)
    if pm is not None:
        return (pm.group("proc"), pm.group("pid"), None, None, text[pm.end():], text)
    return (None, None, None, None, text, text)


# --------------------------------------------------------------------------- parser

class LogParser(object):
    """Feed physical lines (bytes or str) with :meth:`feed`, then call :meth:`result`.

    ``since``: a marker string. Events (windows, summary, warnings, errors, level counts) count
    only after the LAST physical line containing it: each occurrence resets them. Startup facts
    (version, engine, speculative_config, ready, ...) are taken from the whole log. When the
    marker never occurs, the whole log counts and ``since_found`` is false.
    """

    def __init__(self, since=None, max_windows=DEFAULT_MAX_WINDOWS, max_issues=DEFAULT_MAX_ISSUES):
        self.since = since or None
        self._since_b = since.encode("utf-8") if since else None
        self.max_windows = max_windows if max_windows and max_windows > 0 else None
        self.max_issues = max_issues
        self.lineno = 0
        keys = list(_INTEREST)
        if self._since_b:
            keys.append(self._since_b)
        self._keys = tuple(keys)
        self._pending_validation = None
        # startup facts (whole log)
        self.facts = {
            "vllm_version": None, "engine": None, "ready": False, "shutdown": False,
            "speculative_config": None, "speculative_config_found": False,
            "requested_speculative_config": None, "model": None, "served_model_name": None,
            "tensor_parallel_size": None, "data_parallel_size": None, "async_scheduling": None,
            "engine_init_line": None,
        }
        self._version_from_line = None  # version lines win over the init line's (vX)
        self._engine_hint = None  # v0/v1 from window formats when no init line is seen
        self._line_engine = {}  # Engine records met earlier on the current physical line
        self._block = None  # scan mode: the block being scanned and where the current line starts
        self._line_start = 0
        self._tail = b""  # scan mode: the last _LOOKBACK bytes before the block
        self._ring = bytearray()  # line mode: the recent lines
        self._proc_engine = {}
        self._issue_cache = {}
        self._config_cache = {}  # config text -> what it parses to (engine starts repeat it)
        self._pp_cache = {}  # per-position rates as printed -> floats (steady runs repeat them)
        self._repeats = {}  # (level bytes, message bytes) -> (level, issue key or None)
        self._names = {}  # (proc, pid) as bytes -> as str
        self._events_shutdown = False  # errors after a shutdown are logged as warnings
        self.since_found = False
        self.since_line = None
        self._reset_events()

    # ----------------------------------------------------------------- events state
    def _reset_events(self):
        self.windows = collections.deque(maxlen=self.max_windows)
        self.windows_total = 0
        self._acc_by_engine = {}  # engine index (None: unknown) -> _Accumulator
        self._v0_last = None
        self._v0_count = 0
        self._v0_first = None
        self.issues = {"warning": [], "error": []}
        self._issue_index = {}
        self.issues_dropped = 0
        self.levels = {"WARNING": 0, "ERROR": 0}

    # ----------------------------------------------------------------- feeding
    def feed(self, raw):
        """Consume one physical line (bytes or str, with or without its newline)."""
        if isinstance(raw, str):
            raw = raw.encode("utf-8", "surrogateescape")
        for key in self._keys:
            if key in raw:
                self._line(raw)
                break
        else:
            self.lineno += 1
            if self._pending_validation is not None:
                self._validation_detail(raw)
        # the recent bytes of the log, for the engine lookback (see _lookback_engine)
        ring = self._ring
        ring += raw if raw.endswith(b"\n") else raw + b"\n"
        if len(ring) > 2 * _LOOKBACK:
            del ring[:len(ring) - _LOOKBACK]

    def feed_lines(self, lines):
        """Consume an iterable of physical lines."""
        for raw in lines:
            self.feed(raw)
        return self

    def feed_stream(self, fh, chunk_size=_CHUNK):
        """Consume a binary file object in chunks of ``chunk_size`` bytes.

        Same result as feeding it line by line, but the lines that cannot matter are skipped by
        ``bytes.find`` scans over the chunk (C speed) and only counted; memory stays at about
        one chunk plus the longest line.
        """
        carry = b""
        while True:
            data = fh.read(chunk_size)
            if not data:
                break
            if carry:
                data = carry + data
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                carry = data  # a line longer than the chunk: keep reading
                continue
            self._scan(data, cut)
            carry = data[cut:]
        if carry:
            self._scan(carry + b"\n", len(carry) + 1)
        return self

    def _scan(self, block, end):
        """Feed the complete lines of ``block[:end]`` (``end`` is just after a newline).

        Each interest keyword is located with ``bytes.find`` (C speed, far faster than one regex
        with many alternatives); the leftmost hit's line is processed, everything between is
        only counted.
        """
        if self._ring:  # lines fed one by one before: they become the lookback tail
            self._tail = (self._tail + bytes(self._ring))[-_LOOKBACK:]
            del self._ring[:]
        keys = self._keys
        find = block.find
        rfind = block.rfind
        count = block.count
        line = self._line
        fast_match = _V1_LINE_FAST_B_RE.match
        heap = []
        for i, key in enumerate(keys):
            p = find(key, 0, end)
            heap.append((p if p >= 0 else end, i))
        heapq.heapify(heap)
        replace = heapq.heapreplace
        self._block = block
        pos = 0
        while True:
            if self._pending_validation is not None:
                # a pydantic error block is open (maybe since the previous chunk): its detail
                # lines carry no keyword, so they are read one by one
                while self._pending_validation is not None and pos < end:
                    nl = find(b"\n", pos, end)
                    self._line_start = pos
                    self._feed_one(block[pos:nl])
                    pos = nl + 1
                while True:
                    hit, i = heap[0]
                    if hit >= pos:
                        break
                    p = find(keys[i], pos, end)
                    replace(heap, (p if p >= 0 else end, i))
            hit = heap[0][0]
            if hit >= end:
                break
            start = rfind(b"\n", pos, hit) + 1 or pos
            if start > pos:
                self.lineno += count(b"\n", pos, start)
            nl = find(b"\n", hit, end)
            self._line_start = start
            # the common 0.10.2+ metrics line alone on its line: matched in place
            if heap[0][1] == 0 and (heap[1][0] if heap[1][0] < heap[2][0] else heap[2][0]) > nl:
                m = fast_match(block, start, nl)
                if m is not None:
                    self.lineno += 1
                    self._fast_line(m, block, start)
                    pos = nl + 1
                    while True:
                        hit, i = heap[0]
                        if hit >= pos:
                            break
                        p = find(keys[i], pos, end)
                        replace(heap, (p if p >= 0 else end, i))
                    continue
            line(block[start:nl])
            pos = nl + 1
            while True:  # next occurrence of every keyword consumed so far
                hit, i = heap[0]
                if hit >= pos:
                    break
                p = find(keys[i], pos, end)
                replace(heap, (p if p >= 0 else end, i))
        if pos < end:
            self.lineno += count(b"\n", pos, end)
        self._block = None
        if end >= _LOOKBACK:
            self._tail = block[end - _LOOKBACK:end]
        else:
            self._tail = (self._tail + block[:end])[-_LOOKBACK:]

    def _feed_one(self, raw):
        """A line inside a pending pydantic error block (scan mode): always looked at."""
        for key in self._keys:
            if key in raw:
                self._line(raw)
                return
        self.lineno += 1
        self._validation_detail(raw)

    # ----------------------------------------------------------------- engine lookback
    def _lookback_segments(self):
        """(buffer, lo, hi) spans of the log bytes before the current line, nearest first,
        _LOOKBACK bytes in all: the current block then the tail of earlier ones (scan mode), or
        the ring of recent lines (line mode)."""
        block = self._block
        tail = self._tail
        if block is None:
            ring = self._ring
            if len(ring) >= _LOOKBACK:
                return ((ring, len(ring) - _LOOKBACK, len(ring)),)
            return ((ring, 0, len(ring)), (tail, max(0, len(tail) - (_LOOKBACK - len(ring))), len(tail)))
        start = self._line_start
        if start >= _LOOKBACK:
            return ((block, start - _LOOKBACK, start),)
        return ((block, 0, start), (tail, max(0, len(tail) - (_LOOKBACK - start)), len(tail)))

    def _lookback_engine(self, key, prefix=None):
        """Index of the nearest ``Engine NNN:`` record of process ``key`` (proc, pid) in the
        last _LOOKBACK bytes before the current line; None when there is none.

        ``prefix``: the raw ``(Name pid=N) `` bytes of the window's line (b"" without one), for
        a byte comparison instead of parsing each candidate line.
        """
        klen = len(_ENGINE_KEY)
        for buf, lo, hi in self._lookback_segments():
            while hi > lo:
                j = buf.rfind(_ENGINE_KEY, lo, hi)
                if j < 0:
                    break
                ls = buf.rfind(b"\n", lo, j) + 1 or lo
                if prefix is not None and buf.count(b"]", ls, j + 1) == 1 and buf.find(b"\x1b", ls, j) < 0:
                    # the Engine record opens its line: compare the process prefix bytes
                    if buf.startswith(prefix, ls) if prefix else buf[ls:ls + 1] != b"(":
                        e = buf.find(b":", j + klen, j + klen + 12)
                        if e > j + klen and buf[j + klen:e].isdigit():
                            return int(buf[j + klen:e])
                    hi = ls
                    continue
                le = buf.find(b"\n", j, hi)
                found = None
                for rec_key, idx in _engine_records(bytes(buf[ls:le if le >= 0 else hi])):
                    if rec_key == key:
                        found = idx  # the last one on the line wins
                if found is not None:
                    return found
                hi = ls
        return None

    def _line(self, raw):
        """One physical line that passed the byte pre-filter."""
        self.lineno += 1
        if self._line_engine:
            self._line_engine = {}
        since_b = self._since_b
        if since_b is not None and since_b in raw:  # matched against the raw line
            self.since_found = True
            self.since_line = self.lineno
            self._reset_events()
            self._pending_validation = None
            return
        if b"SpecDecoding metrics: " in raw and b"\x1b" not in raw:
            m = _V1_LINE_FAST_B_RE.match(raw)
            if m is not None:  # the common 0.10.2+ line: header and body in one bytes match
                self._fast_line(m, raw, 0)
                return
        if self._events_shutdown and b"] [shutdown] " in raw and b" INFO " in raw and raw.count(b"]") == 2:
            return  # the shutdown is already known; its further INFO steps add nothing
        repeat_key = None
        if (b"WARNING " in raw or b"ERROR " in raw) and self._pending_validation is None \
                and raw.count(b"]") == 1 and b"\x1b" not in raw:
            # a WARNING/ERROR record seen before (same level and message, other timestamp/pid):
            # count it without decoding (see _remember_repeat)
            hm = _HEADER_B_RE.match(raw)
            if hm is not None:
                repeat_key = (hm.group(1), raw[hm.end():].rstrip(b"\r\n"))
                seen = self._repeats.get(repeat_key)
                if seen is not None:
                    level, issue_key = seen
                    entry = self._issue_index.get(issue_key) if issue_key is not None else None
                    if issue_key is None or entry is not None:
                        self.levels[level] += 1
                        if entry is not None:
                            entry["count"] += 1
                        return
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        if "\x1b" in text:
            text = _ANSI_RE.sub("", text)
        if text.count("]") == 1:  # fast path: one record with a header (most lines)
            m = _HEADER_RE.match(text)
            if m is not None:
                proc, pid, level, ts = m.group("proc", "pid", "level", "ts")
                start = m.end()
                if text.startswith("SpecDecoding metrics: ", start) and level == "INFO":
                    self._window("v1", text[start + 22:], proc, pid, ts)
                    return
                issue_key = self._record(proc, pid, level, ts, text[start:], text)
                if repeat_key is not None and issue_key is not _PENDING and level in self.levels:
                    if len(self._repeats) >= _ISSUE_CACHE_SIZE:
                        self._repeats.clear()
                    self._repeats[repeat_key] = (level, issue_key)
                return
        for rec in self._records(text):
            self._record(*rec)

    @staticmethod
    def _records(text):
        """Split a physical line into records: (proc, pid, level, ts, msg, text)."""
        nb = text.count("]")
        if nb:
            m = _HEADER_RE.match(text)
            if m is not None:
                if nb == 1 or not _has_next_record(text, m.end()):
                    proc, pid, level, ts = m.group("proc", "pid", "level", "ts")
                    return ((proc, pid, level, ts, text[m.end():], text),)
            elif not _has_next_record(text, 0):
                nb = 0
        matches = list(_HEADER_RE.finditer(text)) if nb else None
        if not matches:
            return (_raw_record(text),)
        out = []
        first = matches[0].start()
        if text[:first].strip():
            out.append(_raw_record(text[:first]))
        for i, hm in enumerate(matches):
            end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
            out.append((hm.group("proc"), hm.group("pid"), hm.group("level"), hm.group("ts"),
                        text[hm.end():end].rstrip(), text[hm.start():end].rstrip()))
        return out

    # ----------------------------------------------------------------- record dispatch
    def _record(self, proc, pid, level, ts, msg, full):
        if level is not None:
            if level in self.levels:  # WARNING / ERROR: never a window or a startup fact
                self.levels[level] += 1
                if "[shutdown]" in msg:
                    self.facts["shutdown"] = True
                    self._events_shutdown = True
                    self._issue_candidate(level, msg, full)
                    return _PENDING  # not to be counted as a plain repeat
                return self._issue_candidate(level, msg, full)
        elif msg.startswith("INFO:") and _UVICORN_ACCESS_RE.match(msg):
            return  # uvicorn access line
        if "metrics: " in msg:
            pos = msg.find("SpecDecoding metrics: ")
            if pos >= 0:
                self._window("v1", msg[pos + 22:], proc, pid, ts)
                return
            pos = msg.find("Speculative metrics: ")
            if pos >= 0:
                self._window("v0", msg[pos + 21:], proc, pid, ts)
                return
        if msg.startswith("Engine "):
            m = _ENGINE_LINE_RE.match(msg)
            if m is not None:
                self._line_engine[(proc, pid)] = int(m.group(1))
                return
        if "LLM engine" in msg:
            m = _INIT_RE.search(msg)
            if m is not None:
                self._engine_init(m, msg)
                return
        if "non-default args: " in msg:
            if "speculative_config" in msg:
                self._requested_config(msg)
            return
        if "version " in msg:
            for rx in _VERSION_RES:
                m = rx.search(msg)
                if m is not None:
                    self._version_from_line = m.group("v")
                    self.facts["vllm_version"] = m.group("v")
                    return
        if "Application startup complete" in msg:
            self.facts["ready"] = True
            self.facts["shutdown"] = False
            self._events_shutdown = False
            return
        if "hutdown" in msg or "Shutting down" in msg:
            if ("[shutdown]" in msg or "Shutting down" in msg or "shutdown complete" in msg
                    or "Waiting for application shutdown" in msg):
                self.facts["shutdown"] = True
                self._events_shutdown = True
                return
        if "Asynchronous scheduling is " in msg:
            m = _ASYNC_STATE_RE.search(msg)
            if m is not None:
                self.facts["async_scheduling"] = m.group(1) == "enabled"
                return
        self._issue_candidate(level, msg, full)

    # ----------------------------------------------------------------- windows
    def _window(self, fmt, body, proc, pid, ts):
        fields, extra = parse_metrics_body(body)
        self._add_window(fmt, fields, extra, proc, pid, ts)

    def _engine_of(self, proc, pid, prefix=None):
        """Data-parallel engine index of a V1 window: an ``EngineCore_DPn`` prefix, else the
        nearest preceding ``Engine NNN:`` record of the same process (the stat logger prints it
        right before the spec line), looked up lazily so throughput lines cost nothing."""
        if proc:
            engine = self._proc_engine.get(proc, -1)
            if engine == -1:  # "EngineCore_DP1" -> 1 (cached per process name)
                m = _DP_RE.search(proc)
                engine = self._proc_engine[proc] = int(m.group(1)) if m is not None else None
            if engine is not None:
                return engine
        key = (proc, pid)
        engine = self._line_engine.get(key)  # an earlier record on the same physical line
        if engine is None:
            engine = self._lookback_engine(key, prefix)
        return engine

    def _acc_of(self, engine):
        acc = self._acc_by_engine.get(engine)
        if acc is None:
            acc = self._acc_by_engine[engine] = _Accumulator()
        if self._engine_hint is None:
            self._engine_hint = "v1"
        return acc

    def _add_window(self, fmt, fields, extra, proc, pid, ts):
        """A window parsed into fields; kept compact, turned into a dict by result()."""
        line = self.lineno
        self.windows_total += 1
        if fmt == "v1":
            engine = self._engine_of(proc, pid)
            self.windows.append((line, ts, proc, engine, "v1", fields, extra))
            get = fields.get
            self._acc_of(engine).add(line, ts, get("drafted_tokens"), get("accepted_tokens"),
                                     get("mean_acceptance_length"), get("per_position_acceptance"))
            return
        entry = (line, ts, proc, None, "v0", fields, extra)  # V0: no data-parallel engines
        self.windows.append(entry)
        self._v0_count += 1
        if self._v0_first is None:
            self._v0_first = (line, ts)
        self._v0_last = _window_dict(entry)
        if self._engine_hint is None:
            self._engine_hint = "v0"

    def _fast_line(self, m, buf, start):
        """A 0.10.2+ metrics line matched by _V1_LINE_FAST_B_RE in ``buf`` at ``start``: only what
        the summary needs is converted now; result() builds the dicts of the windows returned."""
        proc_b, pid_b, ts, mal, _acc_tp, _draft_tp, acc, drafted, per_pos, _rate = m.groups()
        names = self._names.get((proc_b, pid_b))
        if names is None:
            names = self._names[(proc_b, pid_b)] = _names(proc_b, pid_b)
        proc, pid = names
        engine = self._proc_engine.get(proc, -1) if proc else None
        if engine == -1:  # "EngineCore_DP1" -> 1 (cached per process name)
            dm = _DP_RE.search(proc)
            engine = self._proc_engine[proc] = int(dm.group(1)) if dm is not None else None
        if engine is None:
            engine = _MISS
            block = self._block
            if block is buf and start > 0:
                # usual case: the same process's "Engine NNN:" line just before, whole on its line
                j = block.rfind(_ENGINE_KEY, max(0, start - 4096), start)
                if j >= 0:
                    ls = block.rfind(b"\n", 0, j) + 1
                    plen = m.start(3) - 5 - start
                    if block[ls:ls + plen] == block[start:start + plen] and block[ls + plen:ls + plen + 5] == b"INFO " \
                            and block.count(b"]", ls, j + 1) == 1:
                        e = block.find(b":", j + 9, j + 21)
                        if e > j + 9 and block[j + 9:e].isdigit():
                            engine = int(block[j + 9:e])
            if engine is _MISS:  # (a single-record line: no earlier Engine record on it)
                engine = self._lookback_engine(names, buf[start:m.start(3) - 5])
        line = self.lineno
        ts = ts.decode()
        self.windows_total += 1
        self.windows.append((line, ts, proc, engine, "fast", m.group(4, 5, 6, 7, 8, 9, 10), None))
        pp = self._pp_cache.get(per_pos)
        if pp is None:
            if len(self._pp_cache) >= _PP_CACHE_SIZE:
                self._pp_cache.clear()
            pp = self._pp_cache[per_pos] = tuple([float(x) for x in per_pos.split(b",")])
        acc_of = self._acc_by_engine.get(engine)
        if acc_of is None or self._engine_hint is None:
            acc_of = self._acc_of(engine)
        acc_of.add(line, ts, int(drafted), int(acc), float(mal), pp)

    # ----------------------------------------------------------------- startup facts
    def _engine_init(self, m, msg):
        f = self.facts
        version = m.group("v")
        era = m.group("era")
        cfg = m.group("cfg")
        if era:
            f["engine"] = era.lower()
        elif "use_cached_outputs=" in msg or _version_key(version) < (0, 6, 6):
            f["engine"] = "v0"
        else:
            f["engine"] = "v1"  # 0.6.6-0.7.0 opt-in V1 engine: no use_cached_outputs suffix
        if self._version_from_line is None or f["vllm_version"] is None:
            f["vllm_version"] = version
        f.update(self._cached(("init", cfg), _init_config_facts, cfg))
        f["engine_init_line"] = self.lineno
        # a new engine start: readiness must be seen again
        f["ready"] = False
        f["shutdown"] = False
        self._events_shutdown = False

    def _cached(self, key, fn, text):
        """``fn(text)``, remembered by ``key``: a restarted engine prints the same config text
        again (the parsed values are only read, never changed)."""
        value = self._config_cache.get(key, _MISS)
        if value is _MISS:
            if len(self._config_cache) >= _ISSUE_CACHE_SIZE:
                self._config_cache.clear()
            value = self._config_cache[key] = fn(text)
        return value

    def _requested_config(self, msg):
        """``non-default args: {... 'speculative_config': {...}}`` (a Python repr; literal_eval)."""
        key = msg.find("'speculative_config': ")
        if key < 0:
            return
        value = self._cached(("requested", msg[key:]), _requested_value, msg[key:])
        if value is not None:
            self.facts["requested_speculative_config"] = value

    # ----------------------------------------------------------------- issues
    def _issue_candidate(self, level, msg, full):
        """Classify a record that no fact handler took; repeated messages hit a bounded cache.

        Returns the issue's (code, message) key, None (nothing to report) or _PENDING (the
        record opened or continued a pydantic error block)."""
        key = (level, msg)
        found = _MISS
        if self._pending_validation is None:
            found = self._issue_cache.get(key, _MISS)
        if found is _MISS:
            found = self._classify_issue(level, msg, full)
            if found is _PENDING:
                return _PENDING
            if len(self._issue_cache) >= _ISSUE_CACHE_SIZE:
                self._issue_cache.clear()
            self._issue_cache[key] = found
        if found is None:
            return None
        message = msg.strip()
        self._add_issue(found[0], found[1], message, full, found[2])
        return (found[0], message)

    def _classify_issue(self, level, msg, full):
        """(code, severity, extra) for a record's message, None, or _PENDING (taken by a
        pydantic validation-error block)."""
        if "validation error" in msg:
            vm = _VALIDATION_HDR_RE.search(msg)
            if vm is not None:
                self._flush_validation()
                self._pending_validation = {
                    "line": self.lineno, "model": vm.group("model"), "message": msg.strip(),
                    "text": full, "left": 3 * int(vm.group("n")) + 1, "found": False, "field": None}
                return _PENDING
        if self._pending_validation is not None and self._validation_detail_text(msg):
            return _PENDING
        if level not in ("WARNING", "ERROR", "CRITICAL"):
            for hint in _ISSUE_HINTS:
                if hint in msg:
                    break
            else:
                return None
        for needle, rule in _NEEDLES:
            if needle in msg and (rule.regex is None or rule.regex.search(msg) is not None):
                extra = {}
                if rule.code == "UNKNOWN_SPEC_KEY":
                    km = _UNKNOWN_KEY_RE.search(msg)
                    if km is not None:
                        extra["key"] = km.group(1) or km.group(2)
                elif rule.code == "MISSING_PACKAGE":
                    for rx in _PKG_RES:
                        pm = rx.search(msg)
                        if pm is not None:
                            extra["package"] = pm.group("p")
                            break
                return rule.code, rule.severity, extra
        em = _EXC_RE.match(msg.strip())
        if em is not None:
            spec = "SpeculativeConfig" in msg or "speculative" in msg
            code = "CONFIG_VALIDATION_ERROR" if spec else "EXCEPTION"
            return code, "error", {"exception": em.group("exc")}
        return None

    def _validation_detail(self, raw):
        """A non-interesting physical line while a pydantic error block is open."""
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        if "\x1b" in text:
            text = _ANSI_RE.sub("", text)
        rec = self._records(text)[-1]
        self._validation_detail_text(rec[4])

    def _validation_detail_text(self, msg):
        pv = self._pending_validation
        body = msg.strip()
        pv["left"] -= 1
        if pv["left"] < 0:
            self._flush_validation()
            return False
        if not body or body.startswith("For further information"):
            return True
        if not msg[:1].isspace() and "[type=" not in body:
            pv["field"] = body  # the location line of one error ("foo", "method", ...)
            return True
        spec = pv["model"] == "SpeculativeConfig"
        field = pv["field"]
        message = "%s: %s" % (field, body) if field else body
        extra = {"key": field} if field else {}
        if spec and "Extra inputs are not permitted" in body:
            code = "UNKNOWN_SPEC_KEY"
        elif spec and field == "method" and "Input should be" in body:
            code = "UNSUPPORTED_METHOD"
        else:
            code = "CONFIG_VALIDATION_ERROR"
            for rule in ISSUE_RULES:  # "Value error, <vLLM message>" inside pydantic errors
                if rule.severity == "error" and rule.code != "MISSING_PACKAGE" and rule.match(body):
                    code = rule.code
                    break
            if not spec:
                message = "%s: %s" % (pv["model"], message)
        pv["found"] = True
        self._add_issue(code, "error", message, pv["text"] + " | " + body, extra)
        return True

    def _flush_validation(self):
        pv = self._pending_validation
        self._pending_validation = None
        if pv is not None and not pv["found"]:
            self._add_issue("CONFIG_VALIDATION_ERROR", "error", pv["message"], pv["text"], {},
                            line=pv["line"])

    def _add_issue(self, code, severity, message, text, extra, line=None):
        if severity == "error" and self._events_shutdown:
            # errors printed while the server shuts down (EngineDeadError, CancelledError...) are
            # consequences of the shutdown, not start failures
            severity = "warning"
            extra = dict(extra, after_shutdown=True)
        key = (code, message)
        entry = self._issue_index.get(key)
        if entry is not None:
            entry["count"] += 1
            return
        bucket = self.issues[severity]
        if len(self._issue_index) >= self.max_issues:
            self.issues_dropped += 1
            return
        entry = {"code": code, "message": message, "line": line or self.lineno,
                 "text": text[:_TEXT_LIMIT], "count": 1}
        entry.update(extra)
        bucket.append(entry)
        self._issue_index[key] = entry

    # ----------------------------------------------------------------- result
    def result(self):
        self._flush_validation()
        f = dict(self.facts)
        if f["engine"] is None:
            if self._engine_hint is not None:
                f["engine"] = self._engine_hint
            elif f["vllm_version"] and _version_key(f["vllm_version"]) >= (0, 10, 0):
                f["engine"] = "v1"  # V1-only releases
        summary = self._summary(f)
        engines = sorted(e for e in self._acc_by_engine if e is not None)
        by_engine = {str(e): self._v1_summary(self._acc_by_engine[e], f) for e in engines}
        windows = [_window_dict(entry) for entry in self.windows]
        f.update({
            "windows": windows,
            "windows_total": self.windows_total,
            "windows_dropped": self.windows_total - len(windows),
            "summary": summary,
            "summary_by_engine": by_engine,
            "engines": engines,
            # "warnings" is reserved in Ansible module results, hence the log_ prefix
            "log_warnings": self.issues["warning"],
            "log_errors": self.issues["error"],
            "issues_dropped": self.issues_dropped,
            "log_levels": dict(self.levels),
            "lines": self.lineno,
            "since": self.since,
            "since_found": self.since_found,
            "since_line": self.since_line,
        })
        return f

    @staticmethod
    def _v1_summary(acc, facts):
        out = acc.summary()
        version = facts["vllm_version"]
        mal = out["mean_acceptance_length"]
        if version and (0, 8, 5) <= _version_key(version) < (0, 9, 0) and mal is not None:
            # 0.8.5 printed accepted/drafts without the bonus token (vllm-facts 3.3)
            out["mean_acceptance_length"] = round(mal + 1.0, 6)
            out["notes"].append("vLLM 0.8.5 prints mean acceptance length without the +1; "
                                "the summary adds it (windows keep the printed values)")
        return out

    def _summary(self, facts):
        acc = _Accumulator()
        for part in self._acc_by_engine.values():
            acc.merge(part)
        if acc.windows:
            out = self._v1_summary(acc, facts)
            if self._v0_count:
                out["notes"].append("%d V0 cumulative window(s) ignored in favour of V1 windows"
                                    % self._v0_count)
            ks = {len(w["per_position_acceptance"]) for w in map(_window_dict, self.windows)
                  if w["per_position_acceptance"]}
            if len(ks) > 1:
                out["notes"].append("windows have different numbers of draft positions %s; "
                                    "weighting by drafted tokens is approximate" % sorted(ks))
            return out
        out = _empty_summary()
        last = self._v0_last
        if last is None:
            return out
        # V0 lines are cumulative since startup: the last one is the summary
        out.update({
            "windows": self._v0_count, "format": "v0", "weighting": "last_cumulative",
            "accepted_tokens": last["accepted_tokens"], "drafted_tokens": last["drafted_tokens"],
            "draft_acceptance_rate": last["draft_acceptance_rate"],
            "system_efficiency": last["system_efficiency"], "num_spec_tokens": last["num_spec_tokens"],
            "emitted_tokens": last["emitted_tokens"],
            "first_line": self._v0_first[0], "first_timestamp": self._v0_first[1],
            "last_line": last["line"], "last_timestamp": last["timestamp"],
        })
        k = last["num_spec_tokens"]
        drafted = last["drafted_tokens"]
        emitted = last["emitted_tokens"]
        if k and drafted and emitted is not None:
            # V1-style tokens per step: emitted / (draft_tokens / k) (vllm-facts 4.3)
            out["mean_acceptance_length"] = round(emitted / (drafted / k), 6)
            out["notes"].append("V0: mean_acceptance_length = emitted_tokens / (drafted_tokens / "
                                "num_spec_tokens); V0 counts accepted tokens after a rejection too "
                                "(vllm#9565), so its acceptance rate is not comparable with V1")
        return out


# --------------------------------------------------------------------------- entry points

def parse_log_lines(lines, since=None, max_windows=DEFAULT_MAX_WINDOWS, max_issues=DEFAULT_MAX_ISSUES):
    """Parse an iterable of physical lines (bytes or str)."""
    return LogParser(since=since, max_windows=max_windows, max_issues=max_issues).feed_lines(lines).result()


def parse_log_file(path, since=None, max_windows=DEFAULT_MAX_WINDOWS, max_issues=DEFAULT_MAX_ISSUES):
    """Stream a log file from disk (binary, line by line: constant memory)."""
    parser = LogParser(since=since, max_windows=max_windows, max_issues=max_issues)
    with open(path, "rb") as fh:
        parser.feed_stream(fh)
    return parser.result()


def parse_log_text(text, since=None, max_windows=DEFAULT_MAX_WINDOWS, max_issues=DEFAULT_MAX_ISSUES):
    """Parse a log held in a string (``\\n`` line breaks only)."""
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogateescape")
    parser = LogParser(since=since, max_windows=max_windows, max_issues=max_issues)
    return parser.feed_stream(io.BytesIO(text)).result()
