"""Python client for the emulator's test-only control API (``/_lab/...``).

ctl = ControlClient("http://127.0.0.1:PORT")
mark = ctl.mark()
... run something ...
assert not ctl.writes(since=mark)          # nothing was written (dry-run requests excluded)
ctl.add_fault(verb="patch", resource="inferenceservices", code=500, count=1)
ctl.reset()                                # back to the boot state
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from .auth import ADMIN_TOKEN

WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")


class ControlError(RuntimeError):
    pass


class ControlClient:
    """Calls the control API as the lab admin (``token``; /_lab needs system:masters)."""

    def __init__(self, url: str, timeout: float = 30.0, token: str = ADMIN_TOKEN):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.token = token

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json",
                "Authorization": f"Bearer {self.token}",
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise ControlError(f"{method} {path}: {exc.code} {exc.read().decode(errors='replace')}") from None

    # ---------------------------------------------------------------- request log
    def requests(self, since: int = 0, **filters: Any) -> list[dict]:
        """Logged API requests with index >= since; keyword filters match entry fields exactly."""
        items = self._call("GET", f"/_lab/requests?since={int(since)}")["items"]
        return [e for e in items if all(e.get(k) == v for k, v in filters.items())]

    def mark(self) -> int:
        """Index the next request will get: pass it as ``since`` to see only later requests."""
        return int(self._call("GET", "/_lab/requests?since=999999999999")["next"])

    def writes(
        self, since: int = 0, include_dry_run: bool = False, include_failed: bool = True
    ) -> list[dict]:
        """Write requests (create/update/patch/delete/deletecollection) since a mark."""
        out = []
        for e in self.requests(since):
            if e.get("verb") not in WRITE_VERBS:
                continue
            if e.get("dry_run") and not include_dry_run:
                continue
            if not include_failed and not (200 <= int(e.get("code") or 0) < 300):
                continue
            out.append(e)
        return out

    def clear_requests(self) -> None:
        self._call("DELETE", "/_lab/requests")

    # ---------------------------------------------------------------- faults
    def add_fault(
        self,
        verb: str = "*",
        resource: str = "*",
        *,
        namespace: str | None = None,
        name: str | None = None,
        rate: float = 1.0,
        code: int | None = None,
        delay_ms: int = 0,
        count: int | None = None,
        seed: int | None = None,
        message: str | None = None,
        retry_after: int = 1,
    ) -> dict:
        """Inject faults into matching API requests.

        ``resource`` is a plural (``configmaps``), ``plural/subresource`` or ``*``; ``code`` one of
        409, 429, 500, 503 (or None for a pure delay) - a 409 only ever answers a write, as the API
        server's conflicts do, so ``verb="*"`` with 409 leaves reads alone; ``count`` limits how many
        requests are hit; ``seed`` makes ``rate`` < 1 reproducible.
        """
        rule: dict[str, Any] = {
            "verb": verb,
            "resource": resource,
            "rate": rate,
            "delay_ms": delay_ms,
            "retry_after": retry_after,
        }
        for k, v in (
            ("namespace", namespace),
            ("name", name),
            ("code", code),
            ("count", count),
            ("seed", seed),
            ("message", message),
        ):
            if v is not None:
                rule[k] = v
        return self._call("POST", "/_lab/faults", rule)

    def faults(self) -> list[dict]:
        return self._call("GET", "/_lab/faults")["items"]

    def remove_fault(self, fault_id: int) -> None:
        self._call("DELETE", f"/_lab/faults/{int(fault_id)}")

    def clear_faults(self) -> None:
        self._call("DELETE", "/_lab/faults")

    # ---------------------------------------------------------------- state
    def reset(self) -> None:
        """Back to the boot state: boot namespaces and CRDs only; faults and request log cleared."""
        self._call("POST", "/_lab/reset")

    def info(self) -> dict:
        return self._call("GET", "/_lab/info")
