"""The spec's workload block (specpilot_workload): the production temperature, load and SLO the
benchmark measures at and judges by.  What the schema accepts, what it rejects (each rejection at
its field, with the value), the defaults of workload.slo, and the inventories that carry one."""

from __future__ import annotations

import json

import pytest
import yaml

from validate_helpers import ROOT, base_spec, paths

from ansible_collections.specpilot.core.plugins.module_utils.service.spec import (
    SERVICE_SCHEMA,
    SLO_DEFAULTS,
    SPEC_KEYS,
    assemble_from_vars,
)
from ansible_collections.specpilot.core.plugins.module_utils.service.validator import validate

FULL = {
    "temperature": 0.7,
    "qps": 4,
    "concurrency": 16,
    "slo": {
        "bound_by": "tpot",
        "policy": "slo",
        "ttft_max_regression": 0.1,
        "tpot_max_regression": 0.0,
        "e2e_max_regression": 0.1,
        "throughput_max_regression": 0.0,
        "p99_ms": {"ttft": 800, "tpot": 45.5, "e2e": 20000},
    },
}


def errors_of(workload):
    result = validate(base_spec(workload=workload))
    return result["errors"]


# ------------------------------------------------------------------ accepted


@pytest.mark.parametrize(
    "workload",
    [
        pytest.param({}, id="empty"),
        pytest.param({"temperature": 0}, id="greedy"),
        pytest.param({"temperature": 2}, id="temperature-2"),
        pytest.param({"temperature": 0.7, "qps": 0.5}, id="fractional-qps"),
        pytest.param({"concurrency": 1}, id="concurrency-1"),
        pytest.param({"qps": 4, "concurrency": 16}, id="qps-and-concurrency"),
        pytest.param({"slo": {"bound_by": "ttft"}}, id="bound-by-ttft"),
        pytest.param({"slo": {"bound_by": "e2e", "policy": "strict"}}, id="strict"),
        pytest.param({"slo": {"bound_by": "throughput", "throughput_max_regression": 0}}, id="throughput"),
        pytest.param({"slo": {"ttft_max_regression": 10, "e2e_max_regression": 0}}, id="regression-bounds"),
        pytest.param({"slo": {"p99_ms": {"tpot": 50}}}, id="one-p99"),
        pytest.param(FULL, id="full"),
    ],
)
def test_accepted(workload):
    result = validate(base_spec(workload=workload))
    assert result["ok"], result["report"]
    assert result["errors"] == []
    assert result["spec"]["workload"] == workload  # kept as given: the benchmark role reads it


def test_a_spec_without_workload_stays_valid_and_has_none():
    result = validate(base_spec())
    assert result["ok"], result["report"]
    assert "workload" not in result["spec"]


def test_the_inventory_variable_is_specpilot_workload():
    assert "workload" in SPEC_KEYS
    spec, unknown = assemble_from_vars({"specpilot_workload": {"qps": 2}, "specpilot_worklaod": {}})
    assert spec == {"workload": {"qps": 2}}
    assert unknown == [("specpilot_worklaod", "specpilot_workload")]


# ------------------------------------------------------------------ rejected, at the field


@pytest.mark.parametrize(
    "workload, path, shown",
    [
        pytest.param({"qps": -1}, "workload.qps", "-1", id="negative-qps"),
        pytest.param({"qps": 0}, "workload.qps", "0", id="zero-qps"),
        pytest.param({"qps": "4"}, "workload.qps", "'4'", id="qps-string"),
        pytest.param({"temperature": 2.5}, "workload.temperature", "2.5", id="temperature-above-2"),
        pytest.param({"temperature": -0.1}, "workload.temperature", "-0.1", id="negative-temperature"),
        pytest.param({"temperature": True}, "workload.temperature", "True", id="temperature-bool"),
        pytest.param({"concurrency": 0}, "workload.concurrency", "0", id="zero-concurrency"),
        pytest.param({"concurrency": 2.5}, "workload.concurrency", "2.5", id="fractional-concurrency"),
        pytest.param(
            {"slo": {"bound_by": "latency"}}, "workload.slo.bound_by", "'latency'", id="unknown-slo"
        ),
        pytest.param({"slo": {"bound_by": "TPOT"}}, "workload.slo.bound_by", "'TPOT'", id="slo-case"),
        pytest.param({"slo": {"policy": "lenient"}}, "workload.slo.policy", "'lenient'", id="unknown-policy"),
        pytest.param(
            {"slo": {"ttft_max_regression": 11}},
            "workload.slo.ttft_max_regression",
            "11",
            id="regression-above-10",
        ),
        pytest.param(
            {"slo": {"throughput_max_regression": -0.05}},
            "workload.slo.throughput_max_regression",
            "-0.05",
            id="negative-regression",
        ),
        pytest.param({"slo": {"p99_ms": {"tpot": 0}}}, "workload.slo.p99_ms.tpot", "0", id="zero-p99"),
        pytest.param({"slo": {"p99_ms": {"e2e": -5}}}, "workload.slo.p99_ms.e2e", "-5", id="negative-p99"),
        pytest.param("fast", "workload", "'fast'", id="not-a-mapping"),
        pytest.param({"slo": "tpot"}, "workload.slo", "'tpot'", id="slo-not-a-mapping"),
    ],
)
def test_rejected_at_the_field(workload, path, shown):
    errors = errors_of(workload)
    assert paths(errors) == {path}, errors
    (error,) = errors
    assert error["message"].startswith(path + ": " + shown + " "), error["message"]
    assert error["hint"] == "see schemas/service.schema.json (%s)" % path


@pytest.mark.parametrize(
    "workload, path, hint",
    [
        pytest.param({"qpss": 3}, "workload.qpss", "did you mean 'qps'?", id="misspelt-key"),
        pytest.param(
            {"slo": {"ttft_max_regresion": 0.2}},
            "workload.slo.ttft_max_regresion",
            "did you mean 'ttft_max_regression'?",
            id="misspelt-slo-key",
        ),
        pytest.param(
            {"slo": {"p99_ms": {"itl": 5}}},
            "workload.slo.p99_ms.itl",
            "known keys: e2e, tpot, ttft",
            id="p99-key",
        ),
    ],
)
def test_unknown_keys_are_named_with_a_fix(workload, path, hint):
    errors = errors_of(workload)
    assert paths(errors) == {path}, errors
    assert errors[0]["code"] == "unknown-spec-key" and errors[0]["hint"] == hint


def test_nan_and_huge_numbers_are_caught_before_the_schema():
    assert paths(errors_of({"qps": float("nan")})) == {"workload.qps"}
    assert paths(errors_of({"slo": {"p99_ms": {"ttft": 10**20}}})) == {"workload.slo.p99_ms.ttft"}


def test_every_rejection_is_reported_at_once():
    errors = errors_of({"qps": -1, "temperature": 3, "slo": {"bound_by": "latency"}})
    assert paths(errors) == {"workload.qps", "workload.temperature", "workload.slo.bound_by"}


# ------------------------------------------------------------------ the SLO defaults


def test_the_verdict_policy_fills_the_spec_defaults():
    """bench_verdict reads the SLO defaults from spec.SLO_DEFAULTS (one source)."""
    from ansible_collections.specpilot.core.plugins.module_utils.benchmark.bench_verdict import (
        policy_with_defaults,
    )

    assert SLO_DEFAULTS == {
        "bound_by": "tpot",
        "policy": "slo",
        "ttft_max_regression": 0.10,
        "tpot_max_regression": 0.0,
        "e2e_max_regression": 0.10,
        "throughput_max_regression": 0.0,
    }
    policy = policy_with_defaults(None)
    assert {k: policy[k] for k in SLO_DEFAULTS} == SLO_DEFAULTS and policy["p99_ms"] == {}
    given = {"bound_by": "throughput", "p99_ms": {"tpot": 40}}
    policy = policy_with_defaults(given)
    assert policy["bound_by"] == "throughput" and policy["policy"] == "slo"
    assert policy["p99_ms"] == {"tpot": 40.0} and policy["ttft_max_regression"] == 0.10
    policy["p99_ms"]["tpot"] = 1
    assert given["p99_ms"] == {"tpot": 40}  # a copy


def test_the_schema_documents_each_default():
    slo = SERVICE_SCHEMA["properties"]["workload"]["properties"]["slo"]["properties"]
    assert set(SLO_DEFAULTS) <= set(slo)
    for key, value in SLO_DEFAULTS.items():
        assert slo[key]["description"].endswith(
            "Default %s." % ("%g" % value if isinstance(value, float) else value)
        )
    assert slo["bound_by"]["enum"] == ["tpot", "ttft", "e2e", "throughput"]
    with open(ROOT / "schemas" / "service.schema.json") as handle:
        assert json.load(handle)["properties"]["workload"] == json.loads(
            json.dumps(SERVICE_SCHEMA["properties"]["workload"])
        )


# ------------------------------------------------------------------ the inventories


@pytest.mark.parametrize(
    "host_vars",
    ["inventories/lab/host_vars/lab-ngram.yml", "inventories/example/host_vars/chat-eagle3.yml"],
)
def test_the_inventories_carry_a_valid_workload(host_vars):
    with open(ROOT / host_vars) as handle:
        workload = yaml.safe_load(handle)["specpilot_workload"]
    assert errors_of(workload) == []
    assert workload["slo"]["bound_by"] in ("tpot", "ttft", "e2e", "throughput")


# ------------------------------------------------------------------ the decision framework's warning


@pytest.mark.parametrize("temperature, warned", [(0, False), (0.7, False), (0.71, True), (1.2, True)])
def test_a_production_temperature_above_0_7_is_a_warning_at_its_field(temperature, warned):
    result = validate(base_spec(workload={"temperature": temperature}))
    assert result["ok"] and result["errors"] == []
    hits = [w for w in result["warnings"] if w["path"] == "workload.temperature"]
    assert bool(hits) == warned, result["warnings"]
    if warned:
        assert hits[0]["code"] == "workload-temperature"
        assert "production temperature %g" % temperature in hits[0]["message"]
        assert "playbooks/benchmark.yml" in hits[0]["hint"]
