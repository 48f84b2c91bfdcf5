# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The one way the modules GET a page over HTTP (an engine's /metrics, Prometheus' query API): over
ansible-core's ``open_url`` (proxies, CA bundles, TLS options), following only safe redirects, with
the headers as strings, and always closing the response."""

from __future__ import annotations

from ansible.module_utils.urls import open_url

__all__ = ["get", "get_bytes"]


def get(url, headers=None, timeout=10, validate_certs=True):
    """The open response of a GET of ``url`` (the caller reads and closes it); raises what open_url
    raises (HTTPError, URLError, socket and SSL errors)."""
    return open_url(
        url,
        method="GET",
        headers=dict((str(k), str(v)) for k, v in (headers or {}).items()),
        timeout=timeout,
        validate_certs=validate_certs,
        follow_redirects="safe",
    )


def get_bytes(url, headers=None, timeout=10, validate_certs=True):
    """The body of a GET of ``url``, the response closed."""
    resp = get(url, headers, timeout, validate_certs)
    try:
        return resp.read()
    finally:
        resp.close()
