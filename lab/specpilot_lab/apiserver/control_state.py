"""Server side of the test-only control API (``/_lab/...``): request log and fault injection."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from . import errors
from .errors import ApiError

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
FAULT_CODES = (409, 429, 500, 503)
READ_VERBS = ("get", "list", "watch")


class RequestLog:
    """Every API request the server answered, with a monotonically increasing index."""

    def __init__(self, limit: int = 20000):
        self._lock = threading.Lock()
        self._items: list[dict] = []
        self._next = 0
        self._limit = limit

    def add(self, entry: dict) -> None:
        with self._lock:
            entry["index"] = self._next
            self._next += 1
            self._items.append(entry)
            if len(self._items) > self._limit:
                del self._items[: len(self._items) - self._limit]

    def query(self, since: int = 0) -> dict:
        with self._lock:
            items = [dict(e) for e in self._items if e["index"] >= since]
            return {"items": items, "next": self._next}

    def clear(self) -> dict:
        with self._lock:
            self._items.clear()
            return {"next": self._next}


@dataclass
class FaultRule:
    id: int
    verb: str = "*"
    resource: str = "*"
    namespace: str | None = None
    name: str | None = None
    rate: float = 1.0
    code: int | None = None
    delay_ms: int = 0
    count: int | None = None
    seed: int | None = None
    message: str | None = None
    retry_after: int = 1
    injected: int = 0
    _rng: random.Random = field(default_factory=random.Random, repr=False)

    @classmethod
    def from_dict(cls, rid: int, d: dict) -> "FaultRule":
        if not isinstance(d, dict):
            raise errors.bad_request("a fault rule must be a JSON object")
        known = {
            "verb",
            "resource",
            "namespace",
            "name",
            "rate",
            "code",
            "delay_ms",
            "count",
            "seed",
            "message",
            "retry_after",
        }
        unknown = set(d) - known
        if unknown:
            raise errors.bad_request(f"unknown fault rule fields: {sorted(unknown)}")
        verb = d.get("verb", "*") or "*"
        if verb != "*" and verb not in VERBS:
            raise errors.bad_request(f"verb must be one of {VERBS} or '*'")
        code = d.get("code")
        if code is not None and int(code) not in FAULT_CODES:
            raise errors.bad_request(f"code must be one of {FAULT_CODES}")
        rate = float(d.get("rate", 1.0))
        if not 0.0 <= rate <= 1.0:
            raise errors.bad_request("rate must be between 0 and 1")
        delay = int(d.get("delay_ms", 0) or 0)
        if code is None and not delay:
            raise errors.bad_request("a fault rule needs a code, a delay_ms, or both")
        rule = cls(
            id=rid,
            verb=verb,
            resource=d.get("resource", "*") or "*",
            namespace=d.get("namespace"),
            name=d.get("name"),
            rate=rate,
            code=int(code) if code is not None else None,
            delay_ms=delay,
            count=int(d["count"]) if d.get("count") is not None else None,
            seed=d.get("seed"),
            message=d.get("message"),
            retry_after=int(d.get("retry_after", 1) or 1),
        )
        rule._rng = random.Random(rule.seed)
        return rule

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "verb": self.verb,
            "resource": self.resource,
            "namespace": self.namespace,
            "name": self.name,
            "rate": self.rate,
            "code": self.code,
            "delay_ms": self.delay_ms,
            "count": self.count,
            "seed": self.seed,
            "message": self.message,
            "retry_after": self.retry_after,
            "injected": self.injected,
        }

    def matches(self, verb: str, resource: str, subresource: str, namespace: str, name: str) -> bool:
        if self.verb != "*" and self.verb != verb:
            return False
        if self.code == 409 and verb in READ_VERBS:
            return False  # a conflict answers a write only, as the API server's (never a get, list or watch)
        if self.resource != "*":
            want = self.resource
            full = f"{resource}/{subresource}" if subresource else resource
            if want != full and not (("/" not in want) and want == resource and not subresource):
                return False
        if self.namespace is not None and self.namespace != namespace:
            return False
        if self.name is not None and self.name != name:
            return False
        if self.count is not None and self.injected >= self.count:
            return False
        return True


class FaultInjector:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._next_id = 1

    def add(self, d: dict) -> dict:
        with self._lock:
            rule = FaultRule.from_dict(self._next_id, d)
            self._next_id += 1
            self._rules.append(rule)
            return rule.to_dict()

    def list(self) -> dict:
        with self._lock:
            return {"items": [r.to_dict() for r in self._rules]}

    def clear(self) -> dict:
        with self._lock:
            self._rules.clear()
            return {"items": []}

    def remove(self, rid: int) -> dict:
        with self._lock:
            before = len(self._rules)
            self._rules = [r for r in self._rules if r.id != rid]
            if len(self._rules) == before:
                raise ApiError(404, "NotFound", f"fault rule {rid} not found")
            return {"items": [r.to_dict() for r in self._rules]}

    def check(
        self, verb: str, group: str, resource: str, subresource: str, namespace: str, name: str
    ) -> tuple[float, ApiError | None]:
        """(delay seconds, error to answer or None) for one request."""
        with self._lock:
            for rule in self._rules:
                if not rule.matches(verb, resource, subresource, namespace, name):
                    continue
                if rule._rng.random() >= rule.rate:
                    continue
                rule.injected += 1
                err = None
                if rule.code is not None:
                    err = _fault_error(rule, group, resource, name)
                return rule.delay_ms / 1000.0, err
        return 0.0, None


def _fault_error(rule: FaultRule, group: str, resource: str, name: str) -> ApiError:
    if rule.code == 429:
        return errors.too_many_requests(rule.retry_after)
    if rule.code == 409:
        if rule.message:
            return errors.conflict(resource, group, name, rule.message)
        return errors.modified_conflict(resource, group, name)
    if rule.code == 503:
        return errors.service_unavailable(
            rule.message or "the server is currently unable to handle the " "request"
        )
    return errors.internal_error(rule.message or "injected fault (specpilot lab)")


def sleep(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)


def entry(**kw: Any) -> dict:
    return kw
