"""Structural OpenAPI v3 schemas for CustomResources, applied the way kube-apiserver applies them.

This module reproduces, in pure Python, what k8s.io/apiextensions-apiserver does with the
``schema.openAPIV3Schema`` of one CRD version:

* :meth:`StructuralSchema.prune` - ``pruning.PruneWithOptions`` (unknown fields dropped unless
  ``x-kubernetes-preserve-unknown-fields``; ``apiVersion``/``kind``/``metadata`` kept at the root and
  in ``x-kubernetes-embedded-resource`` objects, ``metadata`` reduced to ObjectMeta fields), then
  ``defaulting.PruneNonNullableNullsWithoutDefaults``.
* :meth:`StructuralSchema.apply_defaults` - ``defaulting.Default``.
* :meth:`StructuralSchema.validate` - the kube-openapi ``SchemaValidator`` as converted to field
  errors by ``apiextensions validation.kubeOpenAPIResultToFieldErrors``, then the embedded-resource
  checks and the ``x-kubernetes-list-type`` map/set uniqueness checks, in that order (the order of
  ``customResourceStrategy.Validate``).
* :class:`FieldError` renders exactly like ``field.Error.Error()`` and :func:`invalid_status` builds
  the 422 ``Status`` of ``errors.NewInvalid``.

Schemas are compiled lazily, one node at a time, the first time an object reaches that node, so a
2 MB CRD costs nothing to load; the schema dict must not be mutated afterwards.
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime
import ipaddress
import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterable

__all__ = [
    "FieldError",
    "StructuralSchema",
    "invalid_status",
    "go_quote",
    "go_json",
    "go_value",
    "OBJECT_META_FIELDS",
    "OBJECT_META_TYPE",
    "table_node",
]

# --------------------------------------------------------------------------------------------
# Go formatting helpers (fmt %q, %v and encoding/json), shared with patch.py
# --------------------------------------------------------------------------------------------

_GO_SHORT_ESC = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(s: str) -> str:
    """``strconv.Quote`` / ``fmt.Sprintf("%q", s)``."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in _GO_SHORT_ESC:
            out.append(_GO_SHORT_ESC[ch])
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif o < 0x80 or ch.isprintable():
            out.append(ch)
        elif o <= 0xFFFF:
            out.append(f"\\u{o:04x}")
        else:
            out.append(f"\\U{o:08x}")
    out.append('"')
    return "".join(out)


def _float_digits(f: float) -> tuple[str, int]:
    """Shortest round-trip digits of abs(f) (no leading/trailing zeros) and the decimal point
    position ``dp`` such that abs(f) == 0.<digits> * 10**dp."""
    _, digits, exp = Decimal(repr(abs(f))).as_tuple()
    ds = "".join(map(str, digits)).lstrip("0")
    stripped = ds.rstrip("0")
    exp += len(ds) - len(stripped)
    ds = stripped or "0"
    return ds, len(ds) + exp


def _go_fmt_e(neg: bool, ds: str, dp: int, min_exp_digits: int = 2) -> str:
    x = dp - 1
    mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
    return f"{'-' if neg else ''}{mant}e{'-' if x < 0 else '+'}{abs(x):0{min_exp_digits}d}"


def _go_fmt_f(neg: bool, ds: str, dp: int) -> str:
    if dp <= 0:
        s = "0." + "0" * (-dp) + ds
    elif dp >= len(ds):
        s = ds + "0" * (dp - len(ds))
    else:
        s = ds[:dp] + "." + ds[dp:]
    return ("-" if neg else "") + s


def _go_float_v(f: float) -> str:
    """``fmt.Sprintf("%v", float64)``: strconv 'g' with the shortest precision (%e when the
    exponent is < -4 or >= 6)."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    ds, dp = _float_digits(f)
    x = dp - 1
    if x < -4 or x >= 6:
        return _go_fmt_e(f < 0, ds, dp)
    return _go_fmt_f(f < 0, ds, dp)


def _go_json_float(f: float) -> str:
    """encoding/json float64 formatting."""
    if math.isnan(f) or math.isinf(f):
        return "null"
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    a = abs(f)
    ds, dp = _float_digits(f)
    if a < 1e-6 or a >= 1e21:
        s = _go_fmt_e(f < 0, ds, dp)
        # clean up e-09 to e-9
        m = re.search(r"e-0(\d)$", s)
        if m:
            s = s[: m.start()] + "e-" + m.group(1)
        return s
    return _go_fmt_f(f < 0, ds, dp)


def _go_json_str(s: str) -> str:
    out = json.dumps(s, ensure_ascii=False)
    if any(c in out for c in "<>&\u2028\u2029"):
        out = (
            out.replace("<", "\\u003c")
            .replace(">", "\\u003e")
            .replace("&", "\\u0026")
            .replace("\u2028", "\\u2028")
            .replace("\u2029", "\\u2029")
        )
    return out


def go_json(v: Any) -> str:
    """``json.Marshal`` of an unstructured value: compact, map keys sorted, HTML-safe escaping."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _go_json_float(v)
    if isinstance(v, str):
        return _go_json_str(v)
    if isinstance(v, dict):
        return "{" + ",".join(_go_json_str(str(k)) + ":" + go_json(v[k]) for k in sorted(v, key=str)) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(go_json(x) for x in v) + "]"
    return _go_json_str(str(v))


def go_value(v: Any) -> str:
    """``fmt.Sprintf("%v", v)`` of an unstructured value (maps print as ``map[k:v ...]``)."""
    if v is None:
        return "<nil>"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _go_float_v(v)
    if isinstance(v, str):
        return v
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{go_value(v[k])}" for k in sorted(v, key=str)) + "]"
    if isinstance(v, (list, tuple)):
        return "[" + " ".join(go_value(x) for x in v) + "]"
    return str(v)


def _go_number_v(v: Any) -> str:
    if isinstance(v, float):
        return _go_float_v(v)
    return str(v)


# --------------------------------------------------------------------------------------------
# field.Error
# --------------------------------------------------------------------------------------------


class _Omit:
    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return "<omitted>"


OMIT = _Omit()

_TYPE_STRINGS = {
    "FieldValueNotFound": "Not found",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueInvalid": "Invalid value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueTooLong": "Too long",
    "FieldValueTooMany": "Too many",
    "FieldValueTooFew": "Too few",
    "InternalError": "Internal error",
    "FieldValueTypeInvalid": "Invalid value",
    "FieldValueTooShort": "Too short",
}
_NO_VALUE_TYPES = {
    "FieldValueRequired",
    "FieldValueForbidden",
    "FieldValueTooLong",
    "FieldValueTooShort",
    "InternalError",
}


@dataclass
class FieldError:
    """One ``k8s.io/apimachinery/pkg/util/validation/field.Error``."""

    type: str
    field: str
    detail: str = ""
    bad_value: Any = ""

    def body(self) -> str:
        """``field.Error.ErrorBody()``: the message without the field path."""
        label = _TYPE_STRINGS.get(self.type, f"<unknown error {go_quote(self.type)}>")
        if self.type in _NO_VALUE_TYPES or self.bad_value is OMIT:
            s = label
        else:
            v = self.bad_value
            if isinstance(v, bool):
                s = f"{label}: {'true' if v else 'false'}"
            elif isinstance(v, int):
                s = f"{label}: {v}"
            elif isinstance(v, float):
                s = f"{label}: {_go_float_v(v)}"
            elif isinstance(v, str):
                s = f"{label}: {go_quote(v)}"
            else:
                s = f"{label}: {go_json(v)}"
        if self.detail:
            s += f": {self.detail}"
        return s

    def render(self) -> str:
        """``field.Error.Error()``: ``<field>: <body>``."""
        return f"{self.field}: {self.body()}"

    def cause(self) -> dict:
        """The ``metav1.StatusCause`` of this error, as serialized in a Status."""
        c: dict[str, Any] = {"reason": self.type}
        msg = self.body()
        if msg:
            c["message"] = msg
        if self.field:
            c["field"] = self.field
        return c

    __str__ = render


def invalid_status(kind: str, group: str, name: str, errors: list[FieldError]) -> dict:
    """The v1 Status of a 422 Invalid, like ``apierrors.NewInvalid(GroupKind{group, kind}, name, errs)``."""
    qualified = f"{kind}.{group}" if group else kind
    seen: list[str] = []
    for e in errors:
        msg = e.render()
        if msg not in seen:
            seen.append(msg)
    if not seen:
        message = f"{qualified} {go_quote(name)} is invalid"
    elif len(seen) == 1:
        message = f"{qualified} {go_quote(name)} is invalid: {seen[0]}"
    else:
        message = f"{qualified} {go_quote(name)} is invalid: [{', '.join(seen)}]"
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    if errors:
        details["causes"] = [e.cause() for e in errors]
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Invalid",
        "details": details,
        "code": 422,
    }


# --------------------------------------------------------------------------------------------
# ObjectMeta knowledge (pruning of metadata, and its list/map types for server-side apply)
# --------------------------------------------------------------------------------------------

OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
_OWNER_REFERENCE_FIELDS = frozenset({"apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion"})
_MANAGED_FIELDS_FIELDS = frozenset(
    {"manager", "operation", "apiVersion", "time", "fieldsType", "fieldsV1", "subresource"}
)
# omitempty fields of ObjectMeta and the value that is omitted
_META_EMPTY = {
    "name": "",
    "generateName": "",
    "namespace": "",
    "selfLink": "",
    "uid": "",
    "resourceVersion": "",
    "generation": 0,
}
_META_FIELDS_TOP = frozenset({"apiVersion", "kind", "metadata"})

# Type table of ObjectMeta for server-side apply / strategic merge (same format as patch.py tables):
#   "@list": (list_type, map_keys), "@patch": (patchStrategy, patchMergeKey), "@map": map type,
#   "@elem": element node of a string-keyed map (its keys are not named fields).
OBJECT_META_TYPE: dict = {
    "labels": {"@elem": {}},
    "annotations": {"@elem": {}},
    "finalizers": {"@list": ("set", ()), "@patch": ("merge", None)},
    "ownerReferences": {"@list": ("map", ("uid",)), "@patch": ("merge", "uid")},
    "managedFields": {"@list": ("atomic", ())},
}


def table_node(table: dict | None, path: Iterable[str]) -> tuple[dict | None, bool]:
    """Walk a type table by field names. Returns (node, is_named_field_of_parent)."""
    node = table
    named = True
    for name in path:
        if node is None:
            return None, False
        if "@elem" in node:
            node = node["@elem"]
            named = False
        else:
            node = node.get(name, {}) if not name.startswith("@") else None
            named = True
    return node, named


# --------------------------------------------------------------------------------------------
# Formats (kube-openapi strfmt.Default) and Go regexps
# --------------------------------------------------------------------------------------------

_KNOWN_FORMATS = frozenset(
    {
        "bsonobjectid",
        "uri",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "cidr",
        "mac",
        "uuid",
        "uuid3",
        "uuid4",
        "uuid5",
        "isbn",
        "isbn10",
        "isbn13",
        "creditcard",
        "ssn",
        "hexcolor",
        "rgbcolor",
        "byte",
        "password",
        "date",
        "datetime",
        "duration",
        "k8sshortname",
        "k8slongname",
    }
)

_RX_BASE64 = re.compile(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$")
_RX_UUID = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
_RX_UUID3 = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
_RX_UUID4 = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
_RX_UUID5 = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
_RX_DT_TIME = re.compile(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")
_RX_HOSTNAME = re.compile(
    r"^([a-zA-Z0-9\w]((-?[a-zA-Z0-9\w]{0,62})?)|"
    r"([a-zA-Z0-9\w](([a-zA-Z0-9\-\w]{0,61}[a-zA-Z0-9\w])?)(\.)){1,}"
    r"([a-zA-Z\w]){2,63})$"
)
_RX_EMAIL = re.compile(r"^[^@\s<>]+@[^@\s<>]+$")
_RX_MAC = re.compile(
    r"^(?:[0-9A-Fa-f]{2}(?:[:-][0-9A-Fa-f]{2}){5}|[0-9A-Fa-f]{2}(?:[:-][0-9A-Fa-f]{2}){7}"
    r"|[0-9A-Fa-f]{2}(?:[:-][0-9A-Fa-f]{2}){19}|[0-9A-Fa-f]{4}(?:\.[0-9A-Fa-f]{4}){2,9})$"
)
_RX_HEXCOLOR = re.compile(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$")
_RX_RGB = re.compile(
    r"^rgb\(\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,"
    r"\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*\)$"
)
_RX_SSN = re.compile(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$")
_RX_ISBN10 = re.compile(r"^(?:[0-9]{9}X|[0-9]{10})$")
_RX_ISBN13 = re.compile(r"^(?:[0-9]{13})$")
_RX_BSON = re.compile(r"^[0-9a-fA-F]{24}$")
_RX_DURATION = re.compile(
    r"^(?:[-+]?(?:\d+(?:\.\d*)?|\.\d+)\s*(?:ns|us|µs|μs|ms|s|m|h|d|w|"
    r"nanoseconds?|microseconds?|milliseconds?|seconds?|minutes?|hours?|days?|weeks?)\s*)+$"
)
_RX_SHORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_RX_LONG_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _is_date(s: str) -> bool:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", s):
        return False
    try:
        datetime.date.fromisoformat(s)
    except ValueError:
        return False
    return True


def _is_datetime(s: str) -> bool:
    if len(s) < 4:
        return False
    parts = s.lower().split("t")
    if len(parts) < 2 or not _is_date(parts[0]):
        return False
    m = _RX_DT_TIME.search(parts[1])
    if not m:
        return False
    return m.group(1) <= "23" and m.group(2) <= "59" and m.group(3) <= "59"


def _is_ip(s: str, version: int) -> bool:
    try:
        ip = ipaddress.ip_address(s)
    except ValueError:
        return False
    return ip.version == version or (version == 6 and ":" in s)


def _is_cidr(s: str) -> bool:
    try:
        ipaddress.ip_network(s, strict=False)
    except ValueError:
        return False
    return "/" in s


def _is_uri(s: str) -> bool:
    # url.ParseRequestURI: an absolute URI or an absolute path
    if s.startswith("/"):
        return " " not in s
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*:[^\s]*$", s))


def _is_byte(s: str) -> bool:
    if not _RX_BASE64.match(s):
        return False
    try:
        base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


_FORMAT_CHECKS = {
    "bsonobjectid": lambda s: bool(_RX_BSON.match(s)),
    "uri": _is_uri,
    "email": lambda s: bool(_RX_EMAIL.match(s)),
    "hostname": lambda s: len(s) <= 255 and bool(_RX_HOSTNAME.match(s)),
    "ipv4": lambda s: "." in s and _is_ip(s, 4),
    "ipv6": lambda s: ":" in s and _is_ip(s, 6),
    "cidr": _is_cidr,
    "mac": lambda s: bool(_RX_MAC.match(s)),
    "uuid": lambda s: bool(_RX_UUID.match(s)),
    "uuid3": lambda s: bool(_RX_UUID3.match(s)),
    "uuid4": lambda s: bool(_RX_UUID4.match(s)),
    "uuid5": lambda s: bool(_RX_UUID5.match(s)),
    "isbn": lambda s: bool(_RX_ISBN10.match(s.replace("-", "").replace(" ", "")))
    or bool(_RX_ISBN13.match(s.replace("-", "").replace(" ", ""))),
    "isbn10": lambda s: bool(_RX_ISBN10.match(s.replace("-", "").replace(" ", ""))),
    "isbn13": lambda s: bool(_RX_ISBN13.match(s.replace("-", "").replace(" ", ""))),
    "creditcard": lambda s: bool(re.fullmatch(r"[0-9 \-]{12,23}", s)),
    "ssn": lambda s: bool(_RX_SSN.match(s)),
    "hexcolor": lambda s: bool(_RX_HEXCOLOR.match(s)),
    "rgbcolor": lambda s: bool(_RX_RGB.match(s)),
    "byte": _is_byte,
    "password": lambda s: True,
    "date": _is_date,
    "datetime": _is_datetime,
    "duration": lambda s: bool(_RX_DURATION.match(s.strip())) if s.strip() else False,
    "k8sshortname": lambda s: len(s) <= 63 and bool(_RX_SHORT_NAME.match(s)),
    "k8slongname": lambda s: len(s) <= 253 and bool(_RX_LONG_NAME.match(s)),
}

_POSIX_CLASSES = {
    "[:alnum:]": "0-9A-Za-z",
    "[:alpha:]": "A-Za-z",
    "[:ascii:]": "\\x00-\\x7F",
    "[:blank:]": "\\t ",
    "[:cntrl:]": "\\x00-\\x1F\\x7F",
    "[:digit:]": "0-9",
    "[:graph:]": "!-~",
    "[:lower:]": "a-z",
    "[:print:]": " -~",
    "[:punct:]": "!-/:-@[-`{-~",
    "[:space:]": "\\t\\n\\v\\f\\r ",
    "[:upper:]": "A-Z",
    "[:word:]": "0-9A-Za-z_",
    "[:xdigit:]": "0-9A-Fa-f",
}


def _compile_go_regexp(pattern: str) -> re.Pattern:
    """Compile an RE2 (Go regexp) pattern with Python's re (the subset CRDs use)."""
    p = pattern
    for k, v in _POSIX_CLASSES.items():
        p = p.replace(k, v)
    p = p.replace("\\z", "\\Z").replace("(?P<", "(?P<")
    p = re.sub(r"\\p\{?L\}?", r"[^\\W\\d_]", p)
    return re.compile(p)


# --------------------------------------------------------------------------------------------
# Compiled schema nodes
# --------------------------------------------------------------------------------------------

_NO_DEFAULT = object()
_SCHEMA_TYPE = {
    bool: "boolean",
    str: "string",
    int: "integer",
    float: "number",
    list: "array",
    dict: "object",
}
_DATA_FORMAT = {int: "int64", float: "float64"}


def _normalize_format(fmt: str) -> str:
    return fmt.replace("-", "").lower()


class _Node:
    """One compiled schema node. Children are compiled on first use."""

    __slots__ = (
        "raw",
        "owner",
        "types",
        "type",
        "nullable",
        "int_or_string",
        "preserve",
        "embedded",
        "props",
        "addl_raw",
        "items_raw",
        "required",
        "enum",
        "pattern",
        "_rx",
        "min_length",
        "max_length",
        "minimum",
        "maximum",
        "exclusive_minimum",
        "exclusive_maximum",
        "multiple_of",
        "min_items",
        "max_items",
        "unique_items",
        "min_properties",
        "max_properties",
        "format",
        "format_known",
        "any_of_raw",
        "all_of_raw",
        "one_of_raw",
        "not_raw",
        "default",
        "_pruned_default",
        "list_type",
        "list_keys",
        "map_type",
        "defaulted",
    )

    def __init__(self, raw: dict, owner: "StructuralSchema"):
        g = raw.get
        self.raw = raw
        self.owner = owner
        t = g("type") or ""
        self.type = t
        self.int_or_string = bool(g("x-kubernetes-int-or-string"))
        if self.int_or_string:
            self.types: tuple[str, ...] = ("integer", "string")
        elif t:
            self.types = (t,)
        else:
            self.types = ()
        self.nullable = bool(g("nullable"))
        self.preserve = bool(g("x-kubernetes-preserve-unknown-fields"))
        self.embedded = bool(g("x-kubernetes-embedded-resource"))
        props = g("properties")
        self.props: dict | None = props if isinstance(props, dict) else None
        self.addl_raw = g("additionalProperties")
        items = g("items")
        self.items_raw = items if isinstance(items, dict) else None
        self.required = g("required") or ()
        self.enum = g("enum")
        self.pattern = g("pattern") or ""
        self._rx: Any = None
        self.min_length = g("minLength")
        self.max_length = g("maxLength")
        self.minimum = g("minimum")
        self.maximum = g("maximum")
        self.exclusive_minimum = bool(g("exclusiveMinimum"))
        self.exclusive_maximum = bool(g("exclusiveMaximum"))
        self.multiple_of = g("multipleOf")
        self.min_items = g("minItems")
        self.max_items = g("maxItems")
        self.unique_items = bool(g("uniqueItems"))
        self.min_properties = g("minProperties")
        self.max_properties = g("maxProperties")
        # StripUnsupportedFormatsPostProcessor
        fmt = g("format") or ""
        if fmt:
            st = self.types[0] if len(self.types) == 1 else ""
            if st in ("", "string"):
                if _normalize_format(fmt) not in _KNOWN_FORMATS:
                    fmt = ""
            elif st == "integer":
                if fmt not in ("int32", "int64"):
                    fmt = ""
            elif st == "number":
                if fmt not in ("float", "double"):
                    fmt = ""
            else:
                fmt = ""
        self.format = fmt
        self.format_known = bool(fmt) and _normalize_format(fmt) in _KNOWN_FORMATS
        self.any_of_raw = g("anyOf") or ()
        self.all_of_raw = g("allOf") or ()
        self.one_of_raw = g("oneOf") or ()
        self.not_raw = g("not")
        self.default = g("default", _NO_DEFAULT)
        self._pruned_default: Any = _NO_DEFAULT
        self.list_type = g("x-kubernetes-list-type")
        self.list_keys = tuple(g("x-kubernetes-list-map-keys") or ())
        self.map_type = g("x-kubernetes-map-type")
        self.defaulted: list | None = None

    # --- children -------------------------------------------------------------------------
    def prop(self, name: str) -> "_Node | None":
        props = self.props
        if props is None:
            return None
        sub = props.get(name)
        if not isinstance(sub, dict):
            return None
        return self.owner._node(sub)

    @property
    def addl(self) -> "_Node | None":
        a = self.addl_raw
        if isinstance(a, dict):
            return self.owner._node(a)
        return None

    @property
    def items(self) -> "_Node | None":
        it = self.items_raw
        return self.owner._node(it) if it is not None else None

    def sub_nodes(self, raws) -> list["_Node"]:
        return [self.owner._node(r) for r in raws if isinstance(r, dict)]

    @property
    def rx(self):
        if self._rx is None:
            try:
                self._rx = _compile_go_regexp(self.pattern)
            except re.error as e:
                self._rx = e
        return self._rx

    def default_value(self) -> Any:
        """The default value, pruned against this node (apiextensions PruneDefaults), deep-copied."""
        if self.default is _NO_DEFAULT:
            return _NO_DEFAULT
        if self._pruned_default is _NO_DEFAULT:
            d = copy.deepcopy(self.default)
            self.owner._prune_value(d, self, "", None, root=self.embedded)
            self._pruned_default = d
        return copy.deepcopy(self._pruned_default)

    def defaulted_props(self) -> list:
        if self.defaulted is None:
            self.defaulted = [
                (k, v) for k, v in (self.props or {}).items() if isinstance(v, dict) and "default" in v
            ]
        return self.defaulted


# --------------------------------------------------------------------------------------------
# StructuralSchema
# --------------------------------------------------------------------------------------------


class StructuralSchema:
    """The structural schema of one CRD version, applied like kube-apiserver does.

    ``strict=True`` additionally reports every field the schema does not declare, as if each object
    schema with ``properties`` had ``additionalProperties: false`` (what ``kubectl --validate=strict``
    and the offline "strictified" JSON-schema check report), except inside
    ``x-kubernetes-preserve-unknown-fields`` and for ``apiVersion``/``kind``/``metadata`` of the
    root and of embedded resources.
    """

    def __init__(self, openapi_v3_schema: dict, *, strict: bool = False):
        if not isinstance(openapi_v3_schema, dict):
            raise TypeError("openAPIV3Schema must be a mapping")
        self.raw = openapi_v3_schema
        self.strict = strict
        self._nodes: dict[int, _Node] = {}
        self.root = self._node(openapi_v3_schema)
        self._path_cache: dict[tuple, Any] = {}

    @classmethod
    def from_crd(cls, crd: dict, version: str | None = None, *, strict: bool = False) -> "StructuralSchema":
        """Build from a CustomResourceDefinition (the storage version unless ``version`` is given)."""
        versions = crd.get("spec", {}).get("versions") or []
        chosen = None
        for v in versions:
            if (version is None and v.get("storage")) or v.get("name") == version:
                chosen = v
                break
        if chosen is None:
            raise KeyError(f"version {version!r} not found in CRD {crd.get('metadata', {}).get('name')}")
        schema = (chosen.get("schema") or {}).get("openAPIV3Schema") or {}
        return cls(schema, strict=strict)

    def _node(self, raw: dict) -> _Node:
        n = self._nodes.get(id(raw))
        if n is None:
            n = _Node(raw, self)
            self._nodes[id(raw)] = n
        return n

    # ======================================================================================
    # pruning
    # ======================================================================================
    def prune(self, obj: dict) -> list[str]:
        """Remove unknown fields IN PLACE; return the removed paths (sorted, like the apiserver).

        Does what the apiserver's decoder does to a request body: pruning of unknown fields
        (``spec.x.y``, list items as ``[i]``), reduction of ``metadata`` to ObjectMeta fields (at the
        root and in embedded resources, e.g. ``metadata.foo``), then removal of ``null`` values of
        non-nullable fields that have no default. The paths are what a real server reports as
        ``unknown field "<path>"`` warnings (or as a strict decoding error with fieldValidation=Strict).
        """
        removed: list[str] = []
        if isinstance(obj, dict):
            self._prune_value(obj, self.root, "", removed, root=True)
            self._prune_nulls(obj, self.root)
        removed.sort()
        return removed

    def _prune_value(self, x: Any, node: _Node | None, path: str, removed: list | None, root: bool = False):
        if node is not None and node.preserve:
            self._skip_prune(x, node, path, removed, root)
            return
        if isinstance(x, dict):
            if node is None:
                for k in list(x):
                    if removed is not None:
                        removed.append(f"{path}.{k}" if path else k)
                    del x[k]
                return
            emb = root or node.embedded
            for k in list(x):
                v = x[k]
                if emb and k in _META_FIELDS_TOP:
                    if k == "metadata" and isinstance(v, dict):
                        self._coerce_meta(
                            v, f"{path}.metadata" if path else "metadata", removed, nested=not root
                        )
                    continue
                kp = f"{path}.{k}" if path else k
                child = node.prop(k)
                if child is not None:
                    self._prune_value(v, child, kp, removed)
                elif node.addl_raw is not None and node.addl_raw is not False:
                    self._prune_value(v, node.addl, kp, removed)
                else:
                    if removed is not None and (k not in _META_FIELDS_TOP or path):
                        removed.append(kp)
                    del x[k]
        elif isinstance(x, list):
            items = node.items if node is not None else None
            for i, v in enumerate(x):
                self._prune_value(v, items, f"{path}[{i}]", removed)

    def _skip_prune(self, x: Any, node: _Node | None, path: str, removed: list | None, root: bool = False):
        if node is None:
            return
        if isinstance(x, dict):
            emb = root or node.embedded
            for k, v in x.items():
                if emb and k in _META_FIELDS_TOP:
                    if k == "metadata" and isinstance(v, dict):
                        self._coerce_meta(
                            v, f"{path}.metadata" if path else "metadata", removed, nested=not root
                        )
                    continue
                kp = f"{path}.{k}" if path else k
                child = node.prop(k)
                if child is not None:
                    self._prune_value(v, child, kp, removed)
                elif node.addl_raw is not None and node.addl_raw is not False:
                    self._prune_value(v, node.addl, kp, removed)
        elif isinstance(x, list):
            items = node.items
            for i, v in enumerate(x):
                self._skip_prune(v, items, f"{path}[{i}]", removed)

    @staticmethod
    def _coerce_meta(meta: dict, path: str, removed: list | None, nested: bool):
        """GetObjectMeta + SetObjectMeta: keep ObjectMeta fields only, drop omitempty-empty values."""
        for k in list(meta):
            v = meta[k]
            if k not in OBJECT_META_FIELDS:
                if removed is not None:
                    removed.append(f"{path}.{k}")
                del meta[k]
                continue
            if v is None:
                if k != "creationTimestamp" or nested:
                    del meta[k]
                continue
            if k in _META_EMPTY:
                if v == _META_EMPTY[k] and type(v) is type(_META_EMPTY[k]):
                    del meta[k]
            elif k in ("labels", "annotations", "ownerReferences", "finalizers", "managedFields"):
                if isinstance(v, (dict, list)) and not v:
                    del meta[k]
                elif k in ("ownerReferences", "managedFields") and isinstance(v, list):
                    allowed = _OWNER_REFERENCE_FIELDS if k == "ownerReferences" else _MANAGED_FIELDS_FIELDS
                    for i, item in enumerate(v):
                        if isinstance(item, dict):
                            for ik in list(item):
                                if ik not in allowed:
                                    if removed is not None:
                                        removed.append(f"{path}.{k}[{i}].{ik}")
                                    del item[ik]

    def _prune_nulls(self, x: Any, node: _Node | None):
        """PruneNonNullableNullsWithoutDefaults."""
        if isinstance(x, dict):
            for k in list(x):
                v = x[k]
                child = None
                if node is not None:
                    child = node.prop(k)
                    if child is None:
                        child = node.addl
                if v is None and child is not None and not child.nullable and child.default is _NO_DEFAULT:
                    del x[k]
                else:
                    self._prune_nulls(v, child)
        elif isinstance(x, list):
            items = node.items if node is not None else None
            for v in x:
                self._prune_nulls(v, items)

    # ======================================================================================
    # defaulting
    # ======================================================================================
    def apply_defaults(self, obj: dict) -> None:
        """Set ``default:`` values IN PLACE, like ``structuraldefaulting.Default`` (request decoding
        and every read from storage). Call it after :meth:`prune`."""
        self._default(obj, self.root)

    def _default(self, x: Any, node: _Node | None):
        if node is None:
            return
        if isinstance(x, dict):
            if node.props:
                for k, raw in node.defaulted_props():
                    if k not in x:
                        x[k] = self._node(raw).default_value()
                    elif x[k] is None:
                        child = self._node(raw)
                        if not child.nullable:
                            x[k] = child.default_value()
            addl = node.addl
            for k in list(x):
                child = node.prop(k)
                if child is not None:
                    self._default(x[k], child)
                elif addl is not None:
                    if x[k] is None and not addl.nullable and addl.default is not _NO_DEFAULT:
                        x[k] = addl.default_value()
                    self._default(x[k], addl)
        elif isinstance(x, list):
            items = node.items
            if items is None:
                return
            for i in range(len(x)):
                if x[i] is None and not items.nullable and items.default is not _NO_DEFAULT:
                    x[i] = items.default_value()
                self._default(x[i], items)

    # ======================================================================================
    # validation
    # ======================================================================================
    def validate(self, obj: dict) -> list[FieldError]:
        """All schema errors of ``obj``, in a stable order (call after prune and apply_defaults).

        Order and wording follow the apiserver: the kube-openapi schema errors (per object:
        property errors in sorted key order, then ``Required``), then embedded-resource checks, then
        ``x-kubernetes-list-type`` map/set duplicates. The ObjectMeta / TypeMeta checks of the
        apiserver (names, kind/apiVersion match) are not included: run them before these.
        """
        errs: list[FieldError] = []
        self._v(self.root, obj, "", errs)
        self._validate_embedded(obj, self.root, "", errs, top=True)
        self._validate_list_types(obj, self.root, "", errs)
        return _dedup(errs)

    def validate_status(self, obj: dict) -> list[FieldError]:
        """Errors for a write to the ``/status`` subresource: only ``status`` is validated, with the
        paths the apiserver uses there (``status.x`` fields, ``x in body`` messages)."""
        errs: list[FieldError] = []
        status = obj.get("status") if isinstance(obj, dict) else None
        node = self.root.prop("status")
        if status is None or node is None:
            return errs
        sub: list[FieldError] = []
        self._v(node, status, "", sub)
        for e in sub:
            e.field = "status" if e.field == "<nil>" else f"status.{e.field}"
            errs.append(e)
        tmp: list[FieldError] = []
        self._validate_list_types({"status": status}, _StatusOnly(node), "", tmp)
        errs.extend(tmp)
        return _dedup(errs)

    # --- kube-openapi SchemaValidator ------------------------------------------------------
    def _v(self, n: _Node, data: Any, path: str, errs: list) -> int:
        """Validate ``data`` against ``n``; append errors; return the kube-openapi MatchCount."""
        if data is None:
            cnt = 1
            if n.types and not n.nullable:
                errs.append(_type_err(path, ",".join(n.types), "null"))
                cnt = 0
            if n.enum:
                errs.append(_enum_err(path, None, n.enum))
            return cnt

        dt = type(data)
        cnt = 0
        # 1. type validator
        if n.types or n.format:
            e = self._check_type(n, data, dt, path)
            if e is not None:
                errs.append(e)
                cnt += 1
            else:
                cnt += 2
        # 2. schema props validator (anyOf/allOf/oneOf/not)
        if n.any_of_raw or n.all_of_raw or n.one_of_raw or n.not_raw is not None:
            cnt += self._schema_props(n, data, path, errs) + 1
        else:
            cnt += 2
        # 3. string validator, 4. format validator
        if dt is str:
            cnt += 1
            self._check_string(n, data, path, errs)
            if n.format_known:
                cnt += 1
                check = _FORMAT_CHECKS.get(_normalize_format(n.format))
                if check is not None and not check(data):
                    errs.append(
                        FieldError(
                            "FieldValueTypeInvalid",
                            path or "<nil>",
                            f"{path} in body must be of type {n.format}: {go_quote(data)}",
                            data,
                        )
                    )
        # 5. number validator
        elif dt is int or dt is float:
            cnt += 2
            self._check_number(n, data, path, errs)
        # 6. slice validator
        elif dt is list:
            items = n.items
            if items is not None:
                for i, v in enumerate(data):
                    cnt += self._v(items, v, f"{path}[{i}]", errs)
            size = len(data)
            if n.min_items is not None and size < n.min_items:
                errs.append(
                    FieldError(
                        "FieldValueInvalid",
                        path or "<nil>",
                        f"{path} in body should have at least {n.min_items} items",
                        size,
                    )
                )
            if n.max_items is not None and size > n.max_items:
                errs.append(_too_many(path, size, n.max_items))
            if n.unique_items and _has_duplicates(data):
                errs.append(
                    FieldError(
                        "FieldValueInvalid",
                        path or "<nil>",
                        f"{path} in body shouldn't contain duplicates",
                        "",
                    )
                )
            cnt += 2
        # 7. common validator (enum)
        cnt += 1
        if n.enum:
            if not any(_enum_match(data, ev) for ev in n.enum):
                errs.append(_enum_err(path, data, n.enum))
        # 8. object validator
        if dt is dict:
            cnt += 1 + self._check_object(n, data, path, errs)
        return cnt + 1

    @staticmethod
    def _check_type(n: _Node, data: Any, dt: type, path: str) -> FieldError | None:
        types = n.types
        fmt = n.format
        sch = _SCHEMA_TYPE.get(dt, "")
        dformat = _DATA_FORMAT.get(dt, "")
        is_float_int = sch == "number" and "integer" in types and _is_json_integer(data)
        is_int_float = sch == "integer" and "number" in types
        if (
            dt is not str
            and dt is not list
            and fmt
            and not (sch in types or dformat == fmt or is_float_int or is_int_float)
        ):
            return _type_err(path, fmt, dformat)
        if not ("number" in types or "integer" in types) and fmt and (dt is str or dt is list):
            return None
        if not (sch in types or is_float_int or is_int_float):
            return _type_err(path, ",".join(types), sch)
        return None

    def _schema_props(self, n: _Node, data: Any, path: str, errs: list) -> int:
        main: list = []
        cnt = 0
        if n.any_of_raw:
            best = None
            first_success = None
            succeeded = False
            for sub in n.sub_nodes(n.any_of_raw):
                sub_errs: list = []
                c = self._v(sub, data, path, sub_errs)
                if not sub_errs:
                    succeeded = True
                    best = None
                    if first_success is None:
                        first_success = c
                    break
                if best is None or c > best[1]:
                    best = (sub_errs, c)
            if not succeeded:
                main.append(_nil_invalid(f"{go_quote(path)} must validate at least one schema (anyOf)"))
            if best is not None:
                main.extend(best[0])
                cnt += best[1]
            elif first_success is not None:
                cnt += first_success
        if n.one_of_raw:
            best = None
            first_success = None
            validated = 0
            for sub in n.sub_nodes(n.one_of_raw):
                sub_errs = []
                c = self._v(sub, data, path, sub_errs)
                if not sub_errs:
                    validated += 1
                    best = None
                    if first_success is None:
                        first_success = c
                    continue
                if validated == 0 and (best is None or c > best[1]):
                    best = (sub_errs, c)
            if validated != 1:
                extra = "Found none valid" if validated == 0 else f"Found {validated} valid alternatives"
                main.append(
                    _nil_invalid(f"{go_quote(path)} must validate one and only one schema (oneOf). {extra}")
                )
                if best is not None:
                    main.extend(best[0])
                    cnt += best[1]
            elif first_success is not None:
                cnt += first_success
        if n.all_of_raw:
            subs = n.sub_nodes(n.all_of_raw)
            validated = 0
            for sub in subs:
                sub_errs = []
                c = self._v(sub, data, path, sub_errs)
                if not sub_errs:
                    validated += 1
                main.extend(sub_errs)
                cnt += c
            if validated != len(subs):
                extra = ". None validated" if validated == 0 else ""
                main.append(_nil_invalid(f"{go_quote(path)} must validate all the schemas (allOf){extra}"))
        if isinstance(n.not_raw, dict):
            sub_errs = []
            self._v(self._node(n.not_raw), data, path, sub_errs)
            if not sub_errs:
                main.append(_nil_invalid(f"{go_quote(path)} must not validate the schema (not)"))
        errs.extend(main)
        return cnt + 1

    @staticmethod
    def _check_string(n: _Node, data: str, path: str, errs: list):
        if n.max_length is not None and len(data) > n.max_length:
            unit = "byte" if n.max_length == 1 else "bytes"
            errs.append(
                FieldError(
                    "FieldValueTooLong",
                    path or "<nil>",
                    f"may not be more than {n.max_length} {unit}",
                    "<value omitted>",
                )
            )
            return
        if n.min_length is not None and len(data) < n.min_length:
            errs.append(
                FieldError(
                    "FieldValueInvalid",
                    path or "<nil>",
                    f"{path} in body should be at least {n.min_length} chars long",
                    data,
                )
            )
            return
        if n.pattern:
            rx = n.rx
            if isinstance(rx, re.error):
                errs.append(
                    FieldError(
                        "FieldValueInvalid",
                        path or "<nil>",
                        f"{path} in body should match '{n.pattern}, but pattern is invalid: {rx}'",
                        data,
                    )
                )
            elif rx.search(data) is None:
                errs.append(
                    FieldError(
                        "FieldValueInvalid",
                        path or "<nil>",
                        f"{path} in body should match '{n.pattern}'",
                        data,
                    )
                )

    @staticmethod
    def _check_number(n: _Node, data: Any, path: str, errs: list):
        type_name = ""
        fmt = ""
        if len(n.types) == 1:
            if n.types[0] == "integer":
                type_name = "integer"
                if n.format in ("int32", "int64"):
                    fmt = n.format
            elif n.types[0] == "number":
                type_name = "number"
                if n.format in ("float", "double"):
                    fmt = n.format
        e = _range_error(data, type_name, fmt, "Checked", path)
        if e:
            errs.append(_nil_invalid(e))
        res_multiple: list = []
        res_min: list = []
        res_max: list = []
        is_int = type(data) is int
        if n.multiple_of is not None:
            factor = n.multiple_of
            be = _range_error(factor, type_name, fmt, "MultipleOf", path)
            if be:
                res_multiple.append(_nil_invalid(be))
                _multiple_of_float(path, float(data), float(factor), res_multiple)
            elif is_int:
                fi = int(factor)
                if fi <= 0:
                    res_multiple.append(
                        FieldError(
                            "FieldValueInvalid",
                            path or "<nil>",
                            f"factor MultipleOf declared for {path} must be positive: {fi}",
                            fi,
                        )
                    )
                elif data % fi != 0 if data >= 0 else (-data) % fi != 0:
                    res_multiple.append(
                        FieldError(
                            "FieldValueInvalid",
                            path or "<nil>",
                            f"{path} in body should be a multiple of {fi}",
                            data,
                        )
                    )
            else:
                _multiple_of_float(path, float(data), float(factor), res_multiple)
        if n.maximum is not None:
            mx = n.maximum
            be = _range_error(mx, type_name, fmt, "Maximum boundary", path)
            if be:
                res_max.append(_nil_invalid(be))
            if not be and is_int:
                lim = int(mx)
                if (not n.exclusive_maximum and data > lim) or (n.exclusive_maximum and data >= lim):
                    res_max.append(_bound_err(path, data, lim, "less", n.exclusive_maximum))
            else:
                fv = float(data)
                fm = float(mx)
                if (not n.exclusive_maximum and fv > fm) or (n.exclusive_maximum and fv >= fm):
                    res_max.append(_bound_err(path, data, fm, "less", n.exclusive_maximum))
        if n.minimum is not None:
            mn = n.minimum
            be = _range_error(mn, type_name, fmt, "Minimum boundary", path)
            if be:
                res_min.append(_nil_invalid(be))
            if not be and is_int:
                lim = int(mn)
                if (not n.exclusive_minimum and data < lim) or (n.exclusive_minimum and data <= lim):
                    res_min.append(_bound_err(path, data, lim, "greater", n.exclusive_minimum))
            else:
                fv = float(data)
                fm = float(mn)
                if (not n.exclusive_minimum and fv < fm) or (n.exclusive_minimum and fv <= fm):
                    res_min.append(_bound_err(path, data, fm, "greater", n.exclusive_minimum))
        errs.extend(res_multiple)
        errs.extend(res_min)
        errs.extend(res_max)

    def _check_object(self, n: _Node, data: dict, path: str, errs: list) -> int:
        cnt = 0
        num = len(data)
        if n.min_properties is not None and num < n.min_properties:
            errs.append(
                FieldError(
                    "FieldValueInvalid",
                    path or "<nil>",
                    f"{path} in body should have at least {n.min_properties} properties",
                    num,
                )
            )
        if n.max_properties is not None and num > n.max_properties:
            errs.append(_too_many(path, num, n.max_properties))
        props = n.props or {}
        addl_raw = n.addl_raw
        strict_closed = (
            self.strict and n.props is not None and addl_raw is None and not n.preserve
        ) or addl_raw is False
        if strict_closed:
            allow_meta = self.strict and (n is self.root or n.embedded)
            for k in sorted(data):
                if k not in props and not (allow_meta and k in _META_FIELDS_TOP):
                    errs.append(
                        FieldError(
                            "FieldValueInvalid",
                            path or "<nil>",
                            f"{path}.{k} in body is a forbidden property",
                            k,
                        )
                    )
        elif isinstance(addl_raw, dict):
            addl = n.addl
            for k in sorted(data):
                if k not in props:
                    cnt += self._v(addl, data[k], f"{path}.{k}", errs)
        if props:
            for k in sorted(data):
                sub = props.get(k)
                if sub is not None:
                    cnt += self._v(self._node(sub), data[k], f"{path}.{k}" if path else k, errs)
        for k in n.required:
            if k not in data:
                fp = f"{path}.{k}"
                errs.append(FieldError("FieldValueRequired", fp[1:] if fp.startswith(".") else fp, "", ""))
        return cnt

    # --- embedded resources (objectmeta.Validate, without the ObjectMeta name rules) -------
    def _validate_embedded(self, x: Any, node: _Node | None, path: str, errs: list, top: bool = False):
        if node is None:
            return
        if isinstance(x, dict):
            if node.embedded and not top:
                if "apiVersion" not in x:
                    errs.append(FieldError("FieldValueRequired", _fp(path, "apiVersion"), "", ""))
                if "kind" not in x:
                    errs.append(FieldError("FieldValueRequired", _fp(path, "kind"), "", ""))
                for k in ("apiVersion", "kind"):
                    if k in x:
                        v = x[k]
                        if not isinstance(v, str):
                            errs.append(FieldError("FieldValueInvalid", _fp(path, k), "must be a string", v))
                        elif not v:
                            errs.append(FieldError("FieldValueInvalid", _fp(path, k), "must not be empty", v))
            addl = node.addl
            for k in sorted(x):
                child = node.prop(k)
                if child is not None:
                    self._validate_embedded(x[k], child, _fp(path, k), errs)
                elif addl is not None:
                    self._validate_embedded(x[k], addl, f"{path}[{k}]", errs)
        elif isinstance(x, list):
            items = node.items
            for i, v in enumerate(x):
                self._validate_embedded(v, items, f"{path}[{i}]", errs)

    # --- x-kubernetes-list-type map / set (listtype.ValidateListSetsAndMaps) ---------------
    def _validate_list_types(self, x: Any, node: Any, path: str, errs: list):
        if node is None:
            return
        if isinstance(x, dict):
            addl = node.addl
            if addl is not None:
                for k in sorted(x):
                    self._validate_list_types(x[k], addl, f"{path}[{k}]", errs)
            if node.props is not None:
                for k in sorted(x):
                    child = node.prop(k)
                    if child is not None:
                        self._validate_list_types(x[k], child, _fp(path, k), errs)
        elif isinstance(x, list):
            if node.list_type == "set":
                seen: dict[str, int] = {}
                for i, item in enumerate(x):
                    key = _set_key(item)
                    times = seen.get(key, 0)
                    seen[key] = times + 1
                    if times == 1:
                        errs.append(FieldError("FieldValueDuplicate", f"{path}[{i}]", "", item))
            elif node.list_type == "map":
                bad = None
                for i, item in enumerate(x):
                    if item is not None and not isinstance(item, dict):
                        bad = FieldError(
                            "FieldValueInvalid",
                            f"{path}[{i}]",
                            "must be an object for an array of list-type map",
                            item,
                        )
                        break
                if bad is not None:
                    errs.append(bad)
                elif len(x) > 1:
                    keys = node.list_keys
                    seen = {}
                    for i, item in enumerate(x):
                        km = {k: item[k] for k in keys if isinstance(item, dict) and k in item}
                        key = _set_key(km) if km else "\x00unspecified"
                        times = seen.get(key, 0)
                        seen[key] = times + 1
                        if times == 1:
                            errs.append(FieldError("FieldValueDuplicate", f"{path}[{i}]", "", km))
            items = node.items
            if items is not None:
                for i, v in enumerate(x):
                    self._validate_list_types(v, items, f"{path}[{i}]", errs)

    # ======================================================================================
    # type information for server-side apply (paths of field names, list items skipped)
    # ======================================================================================
    def _walk(self, path: tuple[str, ...]):
        """Resolve a field path to ("node", _Node) / ("meta", rest) / ("none", None)."""
        key = tuple(path)
        hit = self._path_cache.get(key)
        if hit is not None:
            return hit
        node: _Node | None = self.root
        result: Any = None
        for i, name in enumerate(key):
            while node is not None and node.type == "array":
                node = node.items
            if node is None:
                result = ("none", None)
                break
            if name == "metadata" and (node is self.root or node.embedded):
                result = ("meta", key[i + 1 :])
                break
            child = node.prop(name)
            if child is None:
                child = node.addl
            node = child
        if result is None:
            result = ("node", node) if node is not None else ("none", None)
        self._path_cache[key] = result
        return result

    def list_type(self, path: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        """``("atomic"|"set"|"map", map_keys)`` of the list at ``path`` (CRD default: atomic)."""
        kind, node = self._walk(path)
        if kind == "meta":
            tn, _ = table_node(OBJECT_META_TYPE, node)
            lt = (tn or {}).get("@list")
            return lt if lt else ("atomic", ())
        if kind == "node" and node.type == "array":
            lt = node.list_type or "atomic"
            return (lt, node.list_keys if lt == "map" else ())
        return ("atomic", ())

    def map_type(self, path: tuple[str, ...]) -> str:
        """``"granular"`` or ``"atomic"`` (``x-kubernetes-map-type``) of the object at ``path``."""
        kind, node = self._walk(path)
        if kind == "node":
            while node is not None and node.type == "array":
                node = node.items
            if node is not None and node.map_type == "atomic":
                return "atomic"
        return "granular"

    def is_field(self, path: tuple[str, ...]) -> bool:
        """Whether the last element of ``path`` is a declared property (not a map key)."""
        if not path:
            return False
        parent = tuple(path[:-1])
        name = path[-1]
        kind, node = self._walk(parent)
        if kind == "meta":
            if not node:
                return name in OBJECT_META_FIELDS
            _, named = table_node(OBJECT_META_TYPE, tuple(node) + (name,))
            return named
        if kind != "node":
            return False
        while node is not None and node.type == "array":
            node = node.items
        if node is None:
            return False
        if name in _META_FIELDS_TOP and (node is self.root or node.embedded):
            return True
        return bool(node.props) and name in node.props

    def key_default(self, path: tuple[str, ...], key: str) -> Any:
        """Default of a ``x-kubernetes-list-map-keys`` field of the list at ``path`` (None if none)."""
        kind, node = self._walk(path)
        if kind != "node" or node.type != "array" or node.items is None:
            return None
        sub = node.items.prop(key)
        if sub is None or sub.default is _NO_DEFAULT:
            return None
        return sub.default

    def patch_strategy(self, path: tuple[str, ...]) -> tuple[str | None, str | None]:
        """Custom resources carry no strategic-merge strategies."""
        return (None, None)


class _StatusOnly:
    """A pseudo-node with a single ``status`` property (used by validate_status)."""

    def __init__(self, status_node: _Node):
        self.props = {"status": status_node.raw}
        self._status = status_node
        self.addl = None

    def prop(self, name):
        return self._status if name == "status" else None


# --------------------------------------------------------------------------------------------
# helpers for validation
# --------------------------------------------------------------------------------------------


def _fp(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _type_err(path: str, type_name: str, value: str) -> FieldError:
    return FieldError(
        "FieldValueTypeInvalid",
        path or "<nil>",
        f"{path} in body must be of type {type_name}: {go_quote(value)}",
        value,
    )


def _nil_invalid(message: str) -> FieldError:
    # errors that are not *errors.Validation become field.Invalid(nil path, "", err.Error())
    return FieldError("FieldValueInvalid", "<nil>", message, "")


def _too_many(path: str, actual: int, maximum: int) -> FieldError:
    unit = "item" if maximum == 1 else "items"
    return FieldError("FieldValueTooMany", path or "<nil>", f"must have at most {maximum} {unit}", actual)


def _enum_err(path: str, data: Any, enum: list) -> FieldError:
    values = [v if isinstance(v, str) else go_json(v) for v in enum]
    detail = "supported values: " + ", ".join(go_quote(v) for v in values) if values else ""
    return FieldError("FieldValueNotSupported", path or "<nil>", detail, data)


def _bound_err(path: str, data: Any, limit: Any, word: str, exclusive: bool) -> FieldError:
    rel = f"should be {word} than" if exclusive else f"should be {word} than or equal to"
    return FieldError(
        "FieldValueInvalid", path or "<nil>", f"{path} in body {rel} {_go_number_v(limit)}", data
    )


def _multiple_of_float(path: str, data: float, factor: float, out: list):
    if factor <= 0:
        out.append(
            FieldError(
                "FieldValueInvalid",
                path or "<nil>",
                f"factor MultipleOf declared for {path} must be positive: {_go_float_v(factor)}",
                factor,
            )
        )
        return
    mult = (1 / factor * data) if factor < 1 else (data / factor)
    if not _is_json_integer(mult):
        out.append(
            FieldError(
                "FieldValueInvalid",
                path or "<nil>",
                f"{path} in body should be a multiple of {_go_float_v(factor)}",
                data,
            )
        )


def _is_json_integer(f: Any) -> bool:
    if isinstance(f, bool):
        return False
    if isinstance(f, int):
        return True
    if math.isnan(f) or math.isinf(f):
        return False
    if abs(f) > 2**53:
        return False
    return float(f).is_integer() or abs(f - round(f)) < 1e-9 * max(1.0, abs(f))


def _range_error(val: Any, type_name: str, fmt: str, prefix: str, path: str) -> str | None:
    """IsValueValidAgainstRange."""
    if isinstance(val, bool):
        return None
    if isinstance(val, int):
        rep_int: int | None = val
        rep_float = float(val)
    else:
        f = float(val)
        rep_float = f
        rep_int = int(f) if _is_exact_int_repr(f) else None
    err = False
    if type_name == "integer":
        if rep_int is None:
            err = True
        elif fmt == "int32":
            err = not (-(2**31) <= rep_int < 2**31)
        else:
            err = not (-(2**63) <= rep_int < 2**63)
    else:
        if fmt in ("float", "float32"):
            err = abs(rep_float) > 3.4028234663852886e38
    if not err:
        return None
    if fmt:
        return f"{prefix} value must be of type {type_name} with format {fmt} in {path}"
    return f"{prefix} value must be of type {type_name} (default format) in {path}"


def _is_exact_int_repr(f: float) -> bool:
    # strconv.FormatFloat(f, 'f', -1, 64) parses as an integer iff f is integral
    return not (math.isnan(f) or math.isinf(f)) and float(f).is_integer()


def _enum_match(data: Any, ev: Any) -> bool:
    """reflect ConvertibleTo + DeepEqual, as kube-openapi's basicCommonValidator does."""
    if isinstance(ev, bool) or isinstance(data, bool):
        return isinstance(ev, bool) and isinstance(data, bool) and ev == data
    if isinstance(ev, (int, float)) and isinstance(data, (int, float)):
        if isinstance(ev, int):
            try:
                return int(data) == ev
            except (OverflowError, ValueError):
                return False
        return float(data) == ev
    if isinstance(ev, str) and isinstance(data, str):
        return ev == data
    if isinstance(ev, (dict, list)) and type(ev) is type(data):
        return _deep_equal_go(ev, data)
    return False


def _deep_equal_go(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_deep_equal_go(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_deep_equal_go(x, y) for x, y in zip(a, b))
    return a == b


def _has_duplicates(items: list) -> bool:
    seen = set()
    for it in items:
        k = (type(it).__name__, go_json(it))
        if k in seen:
            return True
        seen.add(k)
    return False


def _set_key(item: Any) -> str:
    if isinstance(item, (dict, list)):
        return "c" + go_json(item)
    return "s" + type(item).__name__ + ":" + repr(item)


def _dedup(errs: list[FieldError]) -> list[FieldError]:
    seen = set()
    out = []
    for e in errs:
        key = (e.type, e.field, e.detail, go_json(e.bad_value) if e.bad_value is not OMIT else "\x00")
        if key in seen:
            continue
        seen.add(key)
        out.append(e)
    return out
