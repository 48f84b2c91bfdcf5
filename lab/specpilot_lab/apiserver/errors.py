"""API errors and the ``Status`` bodies a real kube-apiserver answers with."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


def status_body(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    """A ``meta/v1 Status`` failure body, field order as the real server writes it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
    }
    if reason:
        body["reason"] = reason
    if details:
        body["details"] = details
    body["code"] = code
    return body


def success_status(details: dict | None = None) -> dict:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    """An error answered as a ``Status`` body with an HTTP code."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict | None = None,
        headers: dict | None = None,
        body: dict | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = dict(headers or {})
        self._body = body

    def status(self) -> dict:
        if self._body is not None:
            return self._body
        return status_body(self.code, self.reason, self.message, self.details)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def qualified(resource: str, group: str) -> str:
    """``configmaps`` / ``deployments.apps``: how messages name a resource."""
    return f"{resource}.{group}" if group else resource


def _details(name: str | None, group: str, kind: str, **extra: Any) -> dict:
    d: dict[str, Any] = {}
    if name is not None:
        d["name"] = name
    if group:
        d["group"] = group
    d["kind"] = kind
    d.update(extra)
    return d


def not_found(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{qualified(resource, group)} "{name}" not found', _details(name, group, resource)
    )


def namespace_not_found(namespace: str) -> ApiError:
    return not_found("namespaces", "", namespace)


def resource_not_found() -> ApiError:
    """Unknown resource or path inside a served API group."""
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(resource, group)} "{name}" already exists',
        _details(name, group, resource),
    )


def conflict(resource: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": {why}',
        _details(name, group, resource),
    )


MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


def modified_conflict(resource: str, group: str, name: str) -> ApiError:
    return conflict(resource, group, name, MODIFIED)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden(resource: str, group: str, name: str, why: str) -> ApiError:
    what = f'{qualified(resource, group)} "{name}"' if name else qualified(resource, group)
    return ApiError(403, "Forbidden", f"{what} is forbidden: {why}", _details(name or None, group, resource))


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message, {})


UNSUPPORTED_PATCH_CR = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)


def unsupported_media_type(message: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", message)


def not_acceptable(message: str) -> ApiError:
    return ApiError(406, "NotAcceptable", message)


def internal_error(message: str) -> ApiError:
    return ApiError(
        500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]}
    )


def too_many_requests(retry_after: int = 1) -> ApiError:
    return ApiError(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
        {"retryAfterSeconds": retry_after},
        headers={"Retry-After": str(retry_after)},
    )


def service_unavailable(message: str = "the server is currently unable to handle the request") -> ApiError:
    return ApiError(503, "ServiceUnavailable", message, {})


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def request_entity_too_large(message: str) -> ApiError:
    return ApiError(413, "RequestEntityTooLarge", message)


# ----------------------------------------------------------------------------- field errors
@dataclass
class FieldErr:
    """One field error, rendered like apimachinery's ``field.Error``."""

    type: str  # Required, Invalid, TooLong, Forbidden, NotSupported, Duplicate, TypeInvalid
    field: str
    detail: str = ""
    value: Any = None
    has_value: bool = False

    REASONS = {
        "Required": "FieldValueRequired",
        "Invalid": "FieldValueInvalid",
        "TooLong": "FieldValueTooLong",
        "TooMany": "FieldValueTooMany",
        "Forbidden": "FieldValueForbidden",
        "NotSupported": "FieldValueNotSupported",
        "Duplicate": "FieldValueDuplicate",
        "TypeInvalid": "FieldValueTypeInvalid",
    }
    LABELS = {
        "Required": "Required value",
        "Invalid": "Invalid value",
        "TooLong": "Too long",
        "TooMany": "Too many",
        "Forbidden": "Forbidden",
        "NotSupported": "Unsupported value",
        "Duplicate": "Duplicate value",
        "TypeInvalid": "Invalid value",
    }

    def body(self) -> str:
        label = self.LABELS.get(self.type, self.type)
        if self.type in ("Required", "Forbidden", "TooLong", "TooMany"):
            return f"{label}: {self.detail}" if self.detail else label
        parts = [label]
        if self.has_value:
            parts.append(format_value(self.value))
        if self.detail:
            parts.append(self.detail)
        return ": ".join(parts)

    def error(self) -> str:
        return f"{self.field}: {self.body()}" if self.field else self.body()

    def cause(self) -> dict:
        return {
            "reason": self.REASONS.get(self.type, "FieldValueInvalid"),
            "message": self.body(),
            "field": self.field,
        }


def format_value(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def invalid(kind: str, group: str, name: str, errors: list[FieldErr]) -> ApiError:
    """422 Invalid with the errors the emulator itself found (metadata, built-in kinds)."""
    msgs = [e.error() for e in errors]
    summary = msgs[0] if len(msgs) == 1 else "[" + ", ".join(msgs) + "]"
    what = f"{kind}.{group}" if group else kind
    message = f'{what} "{name}" is invalid: {summary}'
    return ApiError(422, "Invalid", message, _details(name, group, kind, causes=[e.cause() for e in errors]))
