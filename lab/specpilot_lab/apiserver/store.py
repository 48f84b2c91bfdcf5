"""In-memory object store with a global resourceVersion counter and a bounded event history.

Stored objects are treated as immutable: a write always stores a new dict, so readers
may serialise what they got without holding the lock or copying it.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass
from typing import Iterator

GroupResource = tuple[str, str]
Key = tuple[str, str]  # (namespace or "", name)


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    gr: GroupResource
    namespace: str
    name: str
    obj: dict
    old: dict | None


class Store:
    def __init__(self, history: int = 4096, first_rv: int = 1000):
        self._local = threading.local()
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.max_history = history
        self.first_rv = first_rv
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.rv = self.first_rv
            self.data: dict[GroupResource, dict[Key, dict]] = {}
            self._events: list[Event] = []
            self._event_rvs: list[int] = []
            # every event with rv <= compacted_rv is gone from the history
            self.compacted_rv = self.rv
            self.generation = getattr(self, "generation", 0) + 1  # bumped on reset: watches end
            self.cond.notify_all()

    # ------------------------------------------------------------------ reads
    def get(self, gr: GroupResource, namespace: str, name: str) -> dict | None:
        with self.lock:
            return self.data.get(gr, {}).get((namespace, name))

    def list(self, gr: GroupResource, namespace: str | None = None) -> list[dict]:
        """Objects sorted by (namespace, name); namespace None = all namespaces."""
        with self.lock:
            bucket = self.data.get(gr, {})
            if namespace is None:
                keys = sorted(bucket)
            else:
                keys = sorted(k for k in bucket if k[0] == namespace)
            return [bucket[k] for k in keys]

    def iter_all(self) -> Iterator[tuple[GroupResource, dict]]:
        with self.lock:
            items = [(gr, obj) for gr, bucket in self.data.items() for obj in bucket.values()]
        return iter(items)

    def count(self, gr: GroupResource, namespace: str | None = None) -> int:
        with self.lock:
            bucket = self.data.get(gr, {})
            if namespace is None:
                return len(bucket)
            return sum(1 for k in bucket if k[0] == namespace)

    # ------------------------------------------------------------------ writes
    def next_rv(self) -> int:
        with self.lock:
            return self.rv + 1

    def put(self, gr: GroupResource, obj: dict, old: dict | None) -> dict:
        """Store ``obj`` (its metadata.resourceVersion is set here) and record ADDED/MODIFIED."""
        with self.lock:
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            md = obj["metadata"]
            key = (md.get("namespace", "") or "", md["name"])
            self.data.setdefault(gr, {})[key] = obj
            self._record(
                Event(self.rv, "MODIFIED" if old is not None else "ADDED", gr, key[0], key[1], obj, old)
            )
            return obj

    def remove(self, gr: GroupResource, namespace: str, name: str) -> dict | None:
        """Remove an object; the DELETED event carries it with a fresh resourceVersion."""
        with self.lock:
            bucket = self.data.get(gr, {})
            old = bucket.pop((namespace, name), None)
            if old is None:
                return None
            self.rv += 1
            final = dict(old)
            final["metadata"] = dict(old["metadata"])
            final["metadata"]["resourceVersion"] = str(self.rv)
            self._record(Event(self.rv, "DELETED", gr, namespace, name, final, old))
            return final

    def drop_resource(self, gr: GroupResource) -> None:
        with self.lock:
            self.data.pop(gr, None)

    def writes_by_this_thread(self) -> int:
        """How many changes the calling thread has stored so far (for the request log)."""
        return getattr(self._local, "writes", 0)

    def _record(self, ev: Event) -> None:
        self._local.writes = getattr(self._local, "writes", 0) + 1
        self._events.append(ev)
        self._event_rvs.append(ev.rv)
        if len(self._events) > 2 * self.max_history:
            cut = len(self._events) - self.max_history
            self.compacted_rv = self._event_rvs[cut - 1]
            del self._events[:cut]
            del self._event_rvs[:cut]
        self.cond.notify_all()

    # ------------------------------------------------------------------ watch support
    def events_after(self, rv: int) -> list[Event]:
        with self.lock:
            i = bisect.bisect_right(self._event_rvs, rv)
            return self._events[i:]

    def too_old(self, rv: int) -> bool:
        with self.lock:
            return rv < self.compacted_rv

    def wait(self, timeout: float) -> None:
        with self.cond:
            self.cond.wait(timeout)
