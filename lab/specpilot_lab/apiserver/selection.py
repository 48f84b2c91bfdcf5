"""Label and field selectors, parsed and matched like apimachinery's ``labels`` and ``fields``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .errors import ApiError, bad_request

_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def label_key_error(key: str) -> str | None:
    """The apimachinery message for an invalid label key (qualified name), or None."""
    if "/" in key:
        prefix, _, name = key.partition("/")
        if "/" in name:
            return (
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must "
                "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
                "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') "
                "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
            return (
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character "
                "(e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            )
    else:
        name = key
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _QUALIFIED_NAME.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
            "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
            "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        )
    return None


def label_value_error(value: str) -> str | None:
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _LABEL_VALUE.match(value):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
            "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
            "'my_value',  or '12345', regex used for validation is "
            "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        )
    return None


# ----------------------------------------------------------------------------- labels
@dataclass
class Requirement:
    key: str
    op: str  # exists, !, =, !=, in, notin, gt, lt
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        has = self.key in labels
        val = labels.get(self.key)
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        if self.op in ("=", "in"):
            return has and val in self.values
        if self.op in ("!=", "notin"):
            return (not has) or val not in self.values
        if self.op in ("gt", "lt"):
            if not has:
                return False
            try:
                lv = int(val)
                rv = int(self.values[0])
            except (TypeError, ValueError):
                return False
            return lv > rv if self.op == "gt" else lv < rv
        return False


class LabelSelector:
    def __init__(self, requirements: list[Requirement]):
        self.requirements = requirements

    def matches(self, labels: dict[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def __bool__(self) -> bool:
        return bool(self.requirements)


class _Lexer:
    def __init__(self, text: str):
        self.s = text
        self.i = 0

    def skip_ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i].isspace():
            self.i += 1

    def peek(self, n: int = 1) -> str:
        return self.s[self.i : self.i + n]

    def eof(self) -> bool:
        self.skip_ws()
        return self.i >= len(self.s)

    def ident(self) -> str:
        self.skip_ws()
        start = self.i
        while self.i < len(self.s) and self.s[self.i] not in " \t\n\r,()=!<>":
            self.i += 1
        return self.s[start : self.i]


def parse_label_selector(text: str | None) -> LabelSelector:
    if not text or not text.strip():
        return LabelSelector([])
    lx = _Lexer(text)
    reqs: list[Requirement] = []
    while True:
        lx.skip_ws()
        if lx.peek() == "!":
            lx.i += 1
            key = lx.ident()
            _check_key(key, text)
            reqs.append(Requirement(key, "!"))
        else:
            key = lx.ident()
            if not key:
                raise bad_request(
                    f"unable to parse requirement: found '{lx.peek() or 'EOS'}', " "expected: identifier"
                )
            _check_key(key, text)
            lx.skip_ws()
            two = lx.peek(2)
            if lx.i >= len(lx.s) or lx.peek() == ",":
                reqs.append(Requirement(key, "exists"))
            elif two == "==":
                lx.i += 2
                reqs.append(Requirement(key, "=", (_value(lx, text),)))
            elif two == "!=":
                lx.i += 2
                reqs.append(Requirement(key, "!=", (_value(lx, text),)))
            elif lx.peek() == "=":
                lx.i += 1
                reqs.append(Requirement(key, "=", (_value(lx, text),)))
            elif lx.peek() in (">", "<"):
                op = "gt" if lx.peek() == ">" else "lt"
                lx.i += 1
                v = _value(lx, text)
                try:
                    int(v)
                except ValueError:
                    raise bad_request(
                        f"unable to parse requirement: for 'Gt', 'Lt' operators, the value "
                        f"must be an integer: {v}"
                    ) from None
                reqs.append(Requirement(key, op, (v,)))
            else:
                word = lx.ident()
                if word not in ("in", "notin"):
                    raise bad_request(
                        f"unable to parse requirement: found '{word}', expected: "
                        "'=', '!=', '==', 'in', notin'"
                    )
                lx.skip_ws()
                if lx.peek() != "(":
                    raise bad_request(f"unable to parse requirement: found '{lx.peek()}', expected: '('")
                lx.i += 1
                values = []
                while True:
                    lx.skip_ws()
                    if lx.peek() == ")":
                        lx.i += 1
                        break
                    v = lx.ident()
                    _check_value(v, text)
                    values.append(v)
                    lx.skip_ws()
                    if lx.peek() == ",":
                        lx.i += 1
                    elif lx.peek() == ")":
                        lx.i += 1
                        break
                    else:
                        raise bad_request(
                            f"unable to parse requirement: found '{lx.peek() or 'EOS'}', "
                            "expected: ',' or ')'"
                        )
                if not values:
                    raise bad_request(
                        "unable to parse requirement: for 'in', 'notin' operators, values "
                        "set can't be empty"
                    )
                reqs.append(Requirement(key, word, tuple(values)))
        lx.skip_ws()
        if lx.i >= len(lx.s):
            break
        if lx.peek() != ",":
            raise bad_request(f"unable to parse requirement: found '{lx.peek()}', expected: ','")
        lx.i += 1
    return LabelSelector(reqs)


def _value(lx: _Lexer, text: str) -> str:
    v = lx.ident()
    _check_value(v, text)
    return v


def _check_key(key: str, text: str) -> None:
    err = label_key_error(key)
    if err:
        raise bad_request(f"unable to parse requirement: values[0][{key}]: Invalid value: " f'"{key}": {err}')


def _check_value(value: str, text: str) -> None:
    err = label_value_error(value)
    if err:
        raise bad_request(
            f"unable to parse requirement: values[0][{value}]: Invalid value: " f'"{value}": {err}'
        )


def selector_from_label_selector(sel: dict | None) -> LabelSelector | None:
    """A metav1.LabelSelector (matchLabels/matchExpressions) as a LabelSelector; None = nothing."""
    if sel is None:
        return None
    reqs = [Requirement(k, "=", (str(v),)) for k, v in (sel.get("matchLabels") or {}).items()]
    for expr in sel.get("matchExpressions") or []:
        op = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}.get(expr.get("operator"))
        if op:
            reqs.append(Requirement(expr.get("key", ""), op, tuple(expr.get("values") or ())))
    return LabelSelector(reqs)


# ----------------------------------------------------------------------------- fields
@dataclass
class FieldTerm:
    path: str
    op: str  # = or !=
    value: str

    def matches(self, obj: dict) -> bool:
        actual = field_value(obj, self.path)
        return (actual == self.value) if self.op == "=" else (actual != self.value)


class FieldSelector:
    def __init__(self, terms: list[FieldTerm]):
        self.terms = terms

    def matches(self, obj: dict) -> bool:
        return all(t.matches(obj) for t in self.terms)

    def __bool__(self) -> bool:
        return bool(self.terms)

    def exact(self, path: str) -> str | None:
        for t in self.terms:
            if t.path == path and t.op == "=":
                return t.value
        return None


def field_value(obj: dict, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if isinstance(cur, dict):
            cur = cur.get(part)
        else:
            cur = None
            break
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, (dict, list)):
        return ""
    return str(cur)


def _split_unescaped(text: str, sep: str) -> list[str]:
    out, cur, esc = [], [], False
    for ch in text:
        if esc:
            cur.append("\\" + ch)
            esc = False
        elif ch == "\\":
            esc = True
        elif ch == sep:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if esc:
        cur.append("\\")
    out.append("".join(cur))
    return out


def _unescape(value: str) -> str:
    out, esc = [], False
    for ch in value:
        if esc:
            out.append(ch)
            esc = False
        elif ch == "\\":
            esc = True
        else:
            out.append(ch)
    return "".join(out)


def parse_field_selector(text: str | None) -> FieldSelector:
    if not text or not text.strip():
        return FieldSelector([])
    terms = []
    for part in _split_unescaped(text, ","):
        part = part.strip()
        if not part:
            continue
        for op_text, op in (("!=", "!="), ("==", "="), ("=", "=")):
            idx = _find_unescaped(part, op_text)
            if idx >= 0:
                path = part[:idx].strip()
                value = _unescape(part[idx + len(op_text) :].strip())
                if not path:
                    raise bad_request(f"invalid field selector: '{part}'")
                terms.append(FieldTerm(path, op, value))
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
    return FieldSelector(terms)


def _find_unescaped(text: str, needle: str) -> int:
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(needle, i):
            return i
        i += 1
    return -1


__all__ = [
    "ApiError",
    "FieldSelector",
    "LabelSelector",
    "field_value",
    "label_key_error",
    "label_value_error",
    "parse_field_selector",
    "parse_label_selector",
    "selector_from_label_selector",
]
