"""Small helpers shared by the emulator's modules."""

from __future__ import annotations

import datetime as _dt
import json
import random
import re
import time
import uuid
from typing import Any

_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's utilrand alphabet
_rand = random.SystemRandom()


def clone(obj: Any) -> Any:
    """Deep copy of JSON-like data (dict/list/scalars), much faster than copy.deepcopy."""
    if isinstance(obj, dict):
        return {k: clone(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [clone(v) for v in obj]
    return obj


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def now_rfc3339(ts: float | None = None) -> str:
    """Seconds-precision RFC3339 in UTC, as metav1.Time serialises."""
    t = _dt.datetime.fromtimestamp(time.time() if ts is None else ts, tz=_dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro(ts: float | None = None) -> str:
    """Microsecond RFC3339 (metav1.MicroTime)."""
    t = _dt.datetime.fromtimestamp(time.time() if ts is None else ts, tz=_dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_TS_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def parse_time(value: str) -> float | None:
    """Parse an RFC3339(-Nano) timestamp into epoch seconds (float, nanosecond digits truncated)."""
    m = _TS_RE.match(value.strip()) if isinstance(value, str) else None
    if not m:
        return None
    y, mo, d, h, mi, s, frac, tz = m.groups()
    dt = _dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=_dt.timezone.utc)
    epoch = dt.timestamp()
    if frac:
        epoch += float("0" + frac)
    if tz not in ("Z", "z"):
        sign = 1 if tz[0] == "+" else -1
        epoch -= sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    return epoch


def new_uid() -> str:
    return str(uuid.uuid4())


def random_suffix(n: int = 5) -> str:
    return "".join(_rand.choice(_SUFFIX_ALPHABET) for _ in range(n))


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration (what ``kubectl get`` shows as AGE)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        sec = s % 60
        return f"{minutes}m" if sec == 0 else f"{minutes}m{sec}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def age(timestamp: str | None, now: float | None = None) -> str:
    if not timestamp:
        return "<unknown>"
    t = parse_time(timestamp)
    if t is None:
        return "<invalid>"
    return human_duration((time.time() if now is None else now) - t)


def get_path(obj: Any, path: list[str]) -> Any:
    cur = obj
    for p in path:
        if isinstance(cur, dict):
            cur = cur.get(p)
        else:
            return None
    return cur


def deep_equal(a: Any, b: Any) -> bool:
    """JSON semantic equality (1 == 1.0 is fine; True != 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b if isinstance(a, bool) and isinstance(b, bool) else False
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return False
        return all(deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(deep_equal(x, y) for x, y in zip(a, b))
    return a == b
