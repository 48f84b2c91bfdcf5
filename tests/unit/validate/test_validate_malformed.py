"""Malformed specs: the validator never raises, and every rejection names its field.

A hypothesis fuzz over the valid corpus (values swapped for other types, NaN, infinity, huge
numbers, keys dropped, the override variables set to anything) - bounded here, longer with
``make fuzz`` (SPECPILOT_FUZZ_EXAMPLES) - and the cases an audit's fuzzer crashed the validator with,
through playbooks/validate.yml: a field-path error each, and no Python exception text."""

from __future__ import annotations

import copy
import math
import os
import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.specpilot.core.plugins.module_utils.service.spec import assemble_from_vars
from ansible_collections.specpilot.core.plugins.module_utils.service.validator import validate
from validate_helpers import ROOT, SPECS, run_playbook, spec_files

EXAMPLES = int(os.environ.get("SPECPILOT_FUZZ_EXAMPLES", "1500"))
PYTHON_TEXT = re.compile(r"Traceback|TypeError|ValueError|KeyError|AttributeError|OverflowError|Exception")


def _corpus():
    out = []
    for path in spec_files("valid"):
        doc = yaml.safe_load(path.read_text())
        doc.pop("expect", None)
        out.append(doc)
    return out


BASES = _corpus()
ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["2", "eagle3", "ngram", "0.32", "x" * 300, "", "/mnt/models/..", "pvc://"]),
    st.lists(st.sampled_from(["eagle3", 1, None, {"code": "x"}]), max_size=3),
    st.dictionaries(st.sampled_from(["code", "a", "count", "method"]), st.integers(), max_size=2),
)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, prefix + (i,))


@st.composite
def malformed(draw):
    doc = yaml.safe_load(yaml.safe_dump(draw(st.sampled_from(BASES))))  # a deep copy
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        path = draw(st.sampled_from(paths))
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            # a copy: a later step may write into it, and sampled_from hands out the same {"code": "x"}
            # object each time (a changed one makes hypothesis's replays differ: FlakyStrategyDefinition)
            parent[path[-1]] = copy.deepcopy(draw(ODD))
    options = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "override_method": st.one_of(ODD, st.sampled_from(["eagle3", "ngram", "suffix", "mtp"])),
                "override_num_speculative_tokens": ODD,
            },
        )
    )
    return doc, options


def _problems(result):
    """What the promise excludes: an internal failure, an error without a field, Python's words."""
    bad = []
    for finding in result["errors"]:
        if finding["code"] == "validator-internal" or not finding["path"]:
            bad.append(finding)
        elif PYTHON_TEXT.search(finding["message"] + " " + (finding.get("hint") or "")):
            bad.append(finding)
    return bad


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,  # nothing written into the checkout
    derandomize=os.environ.get("SPECPILOT_FUZZ_RANDOM") != "1",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(malformed())
def test_the_validator_never_raises_and_every_error_names_its_field(case):
    doc, options = case
    spec, _unknown = assemble_from_vars(doc)
    result = validate(spec, options)
    assert _problems(result) == [], (doc, options)
    assert result["ok"] == (not result["errors"])


def _spec(**changes):
    doc = yaml.safe_load((SPECS / "valid" / "ngram_gpu_0.18.1.yml").read_text())
    doc.pop("expect", None)
    for dotted, value in changes.items():
        node = doc
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return doc


HF_TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"  # the shape, not a real token
GH_TOKEN = "ghp_" + "0123456789abcdefghijABCDEFGHIJ0123456789"

# the sites the audit's fuzzer crashed the validator at (TypeError, no field named), and values
# without bounds that passed: each is now an error at its field
CASES = {
    "gpu-count-string": (_spec(**{"specpilot_gpu.count": "2"}), "specpilot_gpu.count"),
    "method-list": (_spec(**{"specpilot_speculative.method": ["eagle3"]}), "specpilot_speculative.method"),
    "acknowledged-dict": (
        _spec(specpilot_acknowledged_warnings=[{"code": "x"}]),
        "specpilot_acknowledged_warnings[0]",
    ),
    "tokens-huge": (
        _spec(**{"specpilot_speculative.num_speculative_tokens": 10**400}),
        "specpilot_speculative.num_speculative_tokens",
    ),
    "tokens-65": (
        _spec(**{"specpilot_speculative.num_speculative_tokens": 65}),
        "specpilot_speculative.num_speculative_tokens",
    ),
    "gmu-nan": (
        _spec(**{"specpilot_vllm_args.gpu_memory_utilization": math.nan}),
        "specpilot_vllm_args.gpu_memory_utilization",
    ),
    "replicas-inverted": (
        _spec(specpilot_min_replicas=3, specpilot_max_replicas=2),
        "specpilot_max_replicas",
    ),
    "label-key": (_spec(specpilot_labels={"bad key!": "x"}), "specpilot_labels"),
    "label-value": (_spec(specpilot_labels={"team": "x" * 64}), "specpilot_labels.team"),
    "annotations-300k": (_spec(specpilot_annotations={"a": "x" * 300 * 1024}), "specpilot_annotations"),
    "startup-timeout": (_spec(specpilot_startup_timeout_seconds=10**12), "specpilot_startup_timeout_seconds"),
    # secrets by reference only: a literal value of a secret-named variable, a credential's shape anywhere
    "hf-token-literal": (
        _spec(specpilot_env=[{"name": "HF_TOKEN", "value": HF_TOKEN}]),
        "specpilot_env[0].value",
    ),
    "token-in-annotation": (
        _spec(specpilot_annotations={"note": "pat " + GH_TOKEN}),
        "specpilot_annotations.note",
    ),
}


def test_secrets_come_by_reference_and_their_values_are_never_repeated():
    for name in ("hf-token-literal", "token-in-annotation"):
        spec, _unknown = assemble_from_vars(CASES[name][0])
        result = validate(spec)
        codes = {e["code"] for e in result["errors"]}
        assert codes == {"secret-literal"}, result["errors"]
        assert HF_TOKEN not in repr(result["errors"]) and GH_TOKEN not in repr(result["errors"])
    ok = _spec(
        specpilot_env=[
            {"name": "TOKENIZERS_PARALLELISM", "value": "false"},  # a name that starts like TOKEN
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
        ]
    )
    spec, _unknown = assemble_from_vars(ok)
    assert validate(spec)["errors"] == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_audit_case_is_an_error_at_its_field(name):
    doc, field = CASES[name]
    spec, _unknown = assemble_from_vars(doc)
    result = validate(spec)
    assert not result["ok"] and _problems(result) == [], result["errors"]
    wanted = field.replace("specpilot_", "", 1)
    assert any(e["path"].startswith(wanted) for e in result["errors"]), (wanted, result["errors"])


@pytest.mark.slow
def test_the_audit_cases_through_the_validate_playbook(tmp_path):
    """One run of playbooks/validate.yml over an inventory with a host per case (and override
    variables set to a list and to a huge number on two more): each host fails with its field path
    in the problem block; the output holds no Python exception text."""
    inv = tmp_path / "inv"
    (inv / "host_vars").mkdir(parents=True)
    hosts = dict(CASES)
    hosts["override-method-list"] = (
        dict(_spec(), specpilot_override_method=["eagle3"]),
        "specpilot_override_method",
    )
    hosts["override-tokens-huge"] = (
        dict(_spec(), specpilot_override_num_speculative_tokens=10**400),
        "specpilot_override_num_speculative_tokens",
    )
    for name, (doc, _field) in hosts.items():
        text = yaml.safe_dump(dict(doc, specpilot_name=name), width=10**6)  # NaN is written .nan
        (inv / "host_vars" / f"{name}.yml").write_text("---\n" + text)
    (inv / "hosts.yml").write_text(yaml.safe_dump({"specpilot_services": {"hosts": {h: {} for h in hosts}}}))
    proc = run_playbook(tmp_path, "-i", str(inv), str(ROOT / "playbooks" / "validate.yml"), timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    blocks = dict(
        re.findall(r"^fatal: \[([^\]]+)\]: FAILED! =>(.*?)(?=^fatal: |^PLAY RECAP)", out, re.M | re.S)
    )
    for name, (_doc, field) in hosts.items():
        assert field + ":" in blocks.get(name, ""), (name, field, blocks.get(name, "")[-1500:])
    assert not PYTHON_TEXT.search(out), PYTHON_TEXT.search(out)
    assert HF_TOKEN not in out and GH_TOKEN not in out  # refused without being repeated
    recap = dict(re.findall(r"^(\S+)\s*:\s*ok=\d+\s+changed=\d+\s+unreachable=\d+\s+failed=(\d+)", out, re.M))
    assert recap == {h: "1" for h in hosts}, recap
