"""Pod log files: the contract between whoever runs a container (the lab controller) and the
API emulator's ``pods/log`` endpoint.

Layout, under the emulator's state directory::

    podlogs/<namespace>/<pod>/<container>/current.log    the running (or last) instance
    podlogs/<namespace>/<pod>/<container>/previous.log   the instance before the last restart

Each line of a file is one log line, prefixed like a CRI log with an RFC3339Nano UTC timestamp
and one space: ``2026-11-21T05:29:00.123456789Z hello``.  The server strips the prefix unless
the client asks for ``timestamps=true``.

Writers use :class:`PodLogWriter` (or the module-level helpers); a restart calls
:meth:`PodLogWriter.rotate`, which moves ``current.log`` to ``previous.log``.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import Iterable

CURRENT = "current.log"
PREVIOUS = "previous.log"


def pod_dir(state_dir: str | os.PathLike, namespace: str, pod: str) -> Path:
    return Path(state_dir) / "podlogs" / namespace / pod


def container_dir(state_dir: str | os.PathLike, namespace: str, pod: str, container: str) -> Path:
    return pod_dir(state_dir, namespace, pod) / container


def format_timestamp(ts_ns: int | None = None) -> str:
    """RFC3339Nano in UTC (Go's time.RFC3339Nano: trailing zeros of the fraction trimmed)."""
    if ts_ns is None:
        ts_ns = time.time_ns()
    secs, nanos = divmod(ts_ns, 1_000_000_000)
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
    frac = f"{nanos:09d}".rstrip("0")
    return f"{base}.{frac}Z" if frac else f"{base}Z"


def parse_timestamp(text: str) -> float | None:
    """Epoch seconds of an RFC3339(Nano) timestamp, or None."""
    try:
        if not text.endswith("Z"):
            return None
        main, _, frac = text[:-1].partition(".")
        t = time.strptime(main, "%Y-%m-%dT%H:%M:%S")
        import calendar

        secs = calendar.timegm(t)
        return secs + (float("0." + frac) if frac else 0.0)
    except (ValueError, OverflowError):
        return None


def split_line(line: str) -> tuple[str, str]:
    """(timestamp, text) of one stored line (without its newline)."""
    ts, sep, text = line.partition(" ")
    if not sep:
        return ts, ""
    return ts, text


class PodLogWriter:
    """Appends lines to one container's ``current.log``; thread-safe; keeps partial lines buffered."""

    def __init__(self, state_dir: str | os.PathLike, namespace: str, pod: str, container: str):
        self.dir = container_dir(state_dir, namespace, pod, container)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / CURRENT
        self._lock = threading.Lock()
        self._partial = ""
        self._fh = open(self.path, "a", encoding="utf-8")

    def write_line(self, text: str, ts_ns: int | None = None) -> None:
        with self._lock:
            self._write_locked(text, ts_ns)
            self._fh.flush()

    def write_lines(self, lines: Iterable[str], ts_ns: int | None = None) -> None:
        with self._lock:
            for line in lines:
                self._write_locked(line, ts_ns)
            self._fh.flush()

    def write(self, data: str | bytes) -> None:
        """Write raw output (e.g. a process's stdout chunk); complete lines are stored as they end."""
        if isinstance(data, bytes):
            data = data.decode("utf-8", errors="replace")
        with self._lock:
            buf = self._partial + data
            *complete, self._partial = buf.split("\n")
            for line in complete:
                self._write_locked(line.rstrip("\r"), None)
            self._fh.flush()

    def flush_partial(self) -> None:
        with self._lock:
            if self._partial:
                self._write_locked(self._partial, None)
                self._partial = ""
                self._fh.flush()

    def _write_locked(self, text: str, ts_ns: int | None) -> None:
        for part in text.split("\n"):
            self._fh.write(f"{format_timestamp(ts_ns)} {part}\n")

    def rotate(self) -> None:
        """A container restart: current.log becomes previous.log, a new current.log starts."""
        with self._lock:
            if self._partial:
                self._write_locked(self._partial, None)
                self._partial = ""
            self._fh.close()
            os.replace(self.path, self.dir / PREVIOUS)
            self._fh = open(self.path, "a", encoding="utf-8")

    def close(self) -> None:
        with self._lock:
            if self._partial:
                self._write_locked(self._partial, None)
                self._partial = ""
            self._fh.close()

    def __enter__(self) -> "PodLogWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def append_lines(
    state_dir: str | os.PathLike,
    namespace: str,
    pod: str,
    container: str,
    lines: Iterable[str],
    ts_ns: int | None = None,
) -> None:
    with PodLogWriter(state_dir, namespace, pod, container) as w:
        w.write_lines(lines, ts_ns)


append = append_lines  # short name


def rotate(state_dir: str | os.PathLike, namespace: str, pod: str, container: str) -> None:
    d = container_dir(state_dir, namespace, pod, container)
    d.mkdir(parents=True, exist_ok=True)
    cur = d / CURRENT
    if cur.exists():
        os.replace(cur, d / PREVIOUS)
    cur.touch()


def remove_pod(state_dir: str | os.PathLike, namespace: str, pod: str) -> None:
    shutil.rmtree(pod_dir(state_dir, namespace, pod), ignore_errors=True)


def log_path(
    state_dir: str | os.PathLike, namespace: str, pod: str, container: str, previous: bool = False
) -> Path:
    return container_dir(state_dir, namespace, pod, container) / (PREVIOUS if previous else CURRENT)
