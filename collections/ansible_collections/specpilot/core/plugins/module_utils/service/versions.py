# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""Version strings of vLLM and KServe as comparable tuples.

Accepted forms: ``0.20``, ``0.20.0``, ``v0.19.1``, ``0.6.3.post1``, ``0.10.1.1``,
``0.11.0rc1``, ``0.19.1+cu128``.  Only the leading numeric release part is kept
(a ``.postN``, ``rcN`` or ``+local`` suffix does not change which profile applies),
padded to three components.
"""

from __future__ import annotations

import functools
import re

__all__ = ["parse_version", "format_version", "speculative_engine", "VersionError"]

_VERSION_RE = re.compile(
    r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:[.\-+]?(?:post|rc|a|b|dev|\+)[0-9A-Za-z.+\-]*)?\s*$"
)


class VersionError(ValueError):
    """Raised for a version string that cannot be parsed."""


def parse_version(value):
    """Return a tuple of ints (major, minor, patch[, build]) for ``value``.

    Raises VersionError for anything that is not a version.
    """
    if isinstance(value, float):
        # YAML reads an unquoted 0.20 as the float 0.2: what was meant cannot be recovered.
        raise VersionError(
            "%r is a number, not a version string (YAML reads 0.20 as 0.2); quote it" % (value,)
        )
    if not isinstance(value, str):
        raise VersionError("not a version string: %r" % (value,))
    return _parse(value)


# the release profiles parse the same few dozen strings thousands of times (vllm_profiles._groups:
# about 6,000 calls, a third of a validation's first, cold spec; issue 41)
@functools.lru_cache(maxsize=1024)
def _parse(value):
    match = _VERSION_RE.match(value)
    if not match:
        raise VersionError("not a version string: %r" % (value,))
    parts = [int(p) for p in match.groups() if p is not None]
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts)


def speculative_engine(version):
    """The engine generation that runs speculative decoding by default in a release: ``v1`` from
    vLLM 0.8.3 (the first release whose V1 engine takes a speculative config and exports its
    ``vllm:spec_decode_*`` counters), ``v0`` before.  ``version``: a tuple of parse_version."""
    return "v1" if tuple(version) >= (0, 8, 3) else "v0"


def format_version(version):
    """Inverse of parse_version for display: (0, 20, 0) -> '0.20.0'."""
    return ".".join(str(p) for p in version)
