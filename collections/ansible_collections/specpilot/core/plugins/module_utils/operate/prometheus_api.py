# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The one Prometheus HTTP API client of specpilot's readings (the acceptance guard's, the canary's):
instant queries (``GET /api/v1/query?query=...&time=...``) answered as a vector.

``fetch(url, headers, timeout, validate_certs)`` returns the body: the modules pass
``staging/http_get.get_bytes`` (ansible-core's ``open_url``: proxies, CA bundles, TLS options).
Every query of one reading is evaluated at the same instant ``at``, so ratios compare counters over
exactly the same window.

Standard library only.
"""

from __future__ import annotations

import json
import math
import urllib.parse

__all__ = ["PrometheusError", "instant_vector", "public_url", "vector_total"]


class PrometheusError(ValueError):
    """A query that cannot be answered: Prometheus unreachable, refusing it, or answering no vector."""


def public_url(base_url):
    """The URL as it may be shown: without the user and password a URL may carry."""
    parts = urllib.parse.urlsplit(str(base_url))
    if parts.username is None and parts.password is None:
        return str(base_url)
    host = parts.hostname or ""
    netloc = host + (":%d" % parts.port if parts.port else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def instant_vector(fetch, base_url, expr, headers, timeout, validate_certs, at):
    """[(labels, value)] of the instant query ``expr`` evaluated at ``at`` (epoch seconds).

    The answer's format is Prometheus' (prometheus/web/api/v1/api.go ``query``:
    ``{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {...}, "value": [t, "v"]}]}}``).
    """
    query = {"query": expr, "time": "%.3f" % at}
    url = base_url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode(query)
    shown = public_url(base_url)
    try:
        body = fetch(url, headers, timeout, validate_certs)
    except Exception as exc:  # HTTP and socket errors of whatever fetch is used
        raise PrometheusError("Prometheus query failed (%s): %s" % (shown, exc))
    try:
        data = json.loads(body)
    except ValueError:
        raise PrometheusError("Prometheus at %s answered no JSON" % shown)
    if not isinstance(data, dict):
        raise PrometheusError("Prometheus at %s answered no JSON object" % shown)
    if data.get("status") != "success":
        raise PrometheusError("Prometheus refused the query %r: %s" % (expr, data.get("error") or data))
    result = (data.get("data") or {}).get("result") or []
    if (data.get("data") or {}).get("resultType") != "vector":
        raise PrometheusError(
            "Prometheus answered a %s, not a vector" % (data.get("data") or {}).get("resultType")
        )
    out = []
    for item in result:
        try:
            value = float(item["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        out.append((item.get("metric") or {}, value))
    return out


def vector_total(vector):
    """The sum of a vector's values (NaN left out); None for an empty vector."""
    values = [v for _m, v in vector if not math.isnan(v)]
    return sum(values) if values else None
