"""specpilot.core.k8s_quantity_bytes: Kubernetes quantities by the Kubernetes client's grammar (the
hand-written regex it replaced rejected 512Ki, 1Ki, 500m and 1e3 and lost precision on large values)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.specpilot.core.plugins.filter.staging import k8s_quantity_bytes


@pytest.mark.parametrize(
    "value, expected",
    [
        ("512Ki", 524288),
        ("1Ki", 1024),
        ("200Gi", 200 * 2**30),
        ("1.5Gi", 3 * 2**29),
        ("500M", 500 * 10**6),
        ("1e3", 1000),
        ("500m", 1),  # half a byte, rounded up
        ("8Ei", 8 * 2**60),
        ("123456789012345678901234567890", 123456789012345678901234567890),  # exact, not a float
        (" 2Gi ", 2 * 2**30),
        (4096, 4096),
    ],
)
def test_the_kubernetes_grammar(value, expected):
    assert k8s_quantity_bytes(value) == expected


@pytest.mark.parametrize("value", ["", "x", "2 GiB", "-", "1.2.3Gi", None])
def test_not_a_quantity_is_a_clear_error(value):
    with pytest.raises(AnsibleFilterError, match="not a Kubernetes quantity"):
        k8s_quantity_bytes(value)
