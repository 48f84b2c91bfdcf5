"""Structural schemas like kube-apiserver: pruning, defaulting, validation and error wording.

The expected messages are the ones kube-apiserver produces (field.Error.Error() over the
kube-openapi validator, as converted by apiextensions-apiserver).
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import pytest
import yaml

from specpilot_lab.apiserver.schema import FieldError, StructuralSchema, invalid_status

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT.parent / "shared" / "reference" / "kserve-crds" / "v0.20.0"
ISVC_CRD = UPSTREAM / "serving.kserve.io_inferenceservices.yaml"
QUANTITY = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


@functools.lru_cache(maxsize=None)
def _upstream_isvc() -> StructuralSchema:
    crd = yaml.load(ISVC_CRD.read_text(), Loader=yaml.CSafeLoader)
    return StructuralSchema.from_crd(crd)


@pytest.fixture
def upstream_isvc():
    if not ISVC_CRD.exists():
        pytest.skip(f"upstream KServe CRDs not found at {UPSTREAM} (they sit beside the checkout in CI)")
    return _upstream_isvc()


def isvc(predictor: dict, **meta) -> dict:
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llm", "namespace": "demo", **meta},
        "spec": {"predictor": predictor},
    }


def admit(schema: StructuralSchema, obj: dict) -> tuple[list[str], list[str]]:
    """What the apiserver does with a request body: prune, default, validate."""
    removed = schema.prune(obj)
    schema.apply_defaults(obj)
    return removed, [e.render() for e in schema.validate(obj)]


# ============================================================================ upstream KServe CRD
pytestmark_upstream = pytest.mark.upstream_crds


@pytestmark_upstream
def test_misplaced_storage_uris_is_pruned_and_reported(upstream_isvc):
    obj = isvc(
        {
            "model": {
                "modelFormat": {"name": "vLLM"},
                "storageUris": [{"uri": "hf://org/target", "mountPath": "/mnt/models/target"}],
            }
        }
    )
    removed, errors = admit(upstream_isvc, obj)
    assert removed == ["spec.predictor.model.storageUris"]
    assert "storageUris" not in obj["spec"]["predictor"]["model"]
    assert errors == []


@pytestmark_upstream
def test_relative_mount_path_exact_message(upstream_isvc):
    obj = isvc(
        {
            "model": {"modelFormat": {"name": "vLLM"}},
            "storageUris": [{"uri": "hf://org/target", "mountPath": "relative"}],
        }
    )
    _, errors = admit(upstream_isvc, obj)
    assert errors == [
        'spec.predictor.storageUris[0].mountPath: Invalid value: "relative": '
        "spec.predictor.storageUris[0].mountPath in body should match '^/.*'"
    ]


@pytestmark_upstream
def test_missing_model_format_name_is_required(upstream_isvc):
    obj = isvc({"model": {"modelFormat": {"version": "1"}}})
    _, errors = admit(upstream_isvc, obj)
    assert errors == ["spec.predictor.model.modelFormat.name: Required value"]
    obj = isvc({})
    obj["spec"] = {}
    _, errors = admit(upstream_isvc, obj)
    assert errors == ["spec.predictor: Required value"]


@pytestmark_upstream
def test_defaults_filled(upstream_isvc):
    obj = isvc(
        {
            "model": {"modelFormat": {"name": "vLLM"}, "ports": [{"containerPort": 8080}]},
            "storageUris": [{"uri": "hf://org/target"}, {"uri": "hf://org/draft", "mountPath": "/mnt/d"}],
        }
    )
    _, errors = admit(upstream_isvc, obj)
    assert errors == []
    uris = obj["spec"]["predictor"]["storageUris"]
    assert uris == [
        {"uri": "hf://org/target", "mountPath": "/mnt/models"},
        {"uri": "hf://org/draft", "mountPath": "/mnt/d"},
    ]
    assert obj["spec"]["predictor"]["model"]["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]


@pytestmark_upstream
def test_int_or_string_quantities(upstream_isvc):
    obj = isvc(
        {
            "model": {
                "modelFormat": {"name": "vLLM"},
                "resources": {
                    "limits": {"cpu": 4, "memory": "16Gi", "nvidia.com/gpu": "1"},
                    "requests": {"cpu": "500m", "memory": 1073741824},
                },
            },
            "deploymentStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "100%"},
            },
        }
    )
    _, errors = admit(upstream_isvc, obj)
    assert errors == []
    bad = isvc({"model": {"modelFormat": {"name": "vLLM"}, "resources": {"limits": {"memory": "lots"}}}})
    _, errors = admit(upstream_isvc, bad)
    assert errors == [
        'spec.predictor.model.resources.limits.memory: Invalid value: "lots": '
        f"spec.predictor.model.resources.limits.memory in body should match '{QUANTITY}'"
    ]


@pytestmark_upstream
def test_int_or_string_wrong_type_reports_like_kube_openapi(upstream_isvc):
    obj = isvc(
        {
            "model": {"modelFormat": {"name": "vLLM"}},
            "deploymentStrategy": {"rollingUpdate": {"maxSurge": True}},
        }
    )
    _, errors = admit(upstream_isvc, obj)
    p = "spec.predictor.deploymentStrategy.rollingUpdate.maxSurge"
    assert errors == [
        f'{p}: Invalid value: "boolean": {p} in body must be of type integer,string: "boolean"',
        f'<nil>: Invalid value: "": "{p}" must validate at least one schema (anyOf)',
        f'{p}: Invalid value: "boolean": {p} in body must be of type integer: "boolean"',
    ]


@pytestmark_upstream
def test_several_errors_all_reported_in_stable_order(upstream_isvc):
    obj = isvc(
        {
            "model": {"modelFormat": {}, "runtime": 7},
            "minReplicas": "one",
            "scaleMetric": "gpu",
            "storageUris": [{"uri": "", "mountPath": "relative"}, {"mountPath": "/" + "x" * 300}],
        }
    )
    _, errors = admit(upstream_isvc, obj)
    assert errors == [
        'spec.predictor.minReplicas: Invalid value: "string": spec.predictor.minReplicas in body must be '
        'of type integer: "string"',
        "spec.predictor.model.modelFormat.name: Required value",
        'spec.predictor.model.runtime: Invalid value: "integer": spec.predictor.model.runtime in body '
        'must be of type string: "integer"',
        'spec.predictor.scaleMetric: Unsupported value: "gpu": supported values: "cpu", "memory", '
        '"concurrency", "rps"',
        'spec.predictor.storageUris[0].mountPath: Invalid value: "relative": '
        "spec.predictor.storageUris[0].mountPath in body should match '^/.*'",
        'spec.predictor.storageUris[0].uri: Invalid value: "": spec.predictor.storageUris[0].uri in body '
        "should be at least 1 chars long",
        "spec.predictor.storageUris[1].mountPath: Too long: may not be more than 255 bytes",
        "spec.predictor.storageUris[1].uri: Required value",
    ]
    # a second run gives the same order
    _, again = admit(upstream_isvc, obj)
    assert again == errors


@pytestmark_upstream
def test_invalid_status_body(upstream_isvc):
    obj = isvc(
        {
            "model": {"modelFormat": {"name": "vLLM"}},
            "storageUris": [{"uri": "hf://a", "mountPath": "relative"}],
        }
    )
    upstream_isvc.prune(obj)
    upstream_isvc.apply_defaults(obj)
    errs = upstream_isvc.validate(obj)
    status = invalid_status("InferenceService", "serving.kserve.io", "llm", errs)
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'InferenceService.serving.kserve.io "llm" is invalid: '
        'spec.predictor.storageUris[0].mountPath: Invalid value: "relative": '
        "spec.predictor.storageUris[0].mountPath in body should match '^/.*'",
        "reason": "Invalid",
        "details": {
            "name": "llm",
            "group": "serving.kserve.io",
            "kind": "InferenceService",
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "message": 'Invalid value: "relative": '
                    "spec.predictor.storageUris[0].mountPath in body should match '^/.*'",
                    "field": "spec.predictor.storageUris[0].mountPath",
                }
            ],
        },
        "code": 422,
    }


@pytestmark_upstream
def test_list_types_from_upstream_schema(upstream_isvc):
    s = upstream_isvc
    assert s.list_type(("spec", "predictor", "storageUris")) == ("atomic", ())
    assert s.list_type(("spec", "predictor", "model", "args")) == ("atomic", ())
    assert s.list_type(("spec", "predictor", "model", "env")) == ("map", ("name",))
    assert s.list_type(("spec", "predictor", "model", "ports")) == ("map", ("containerPort", "protocol"))
    assert s.list_type(("spec", "predictor", "containers")) == ("atomic", ())  # no list-type: atomic
    assert s.list_type(("spec", "predictor", "containers", "env")) == ("map", ("name",))
    assert s.list_type(("metadata", "finalizers")) == ("set", ())
    assert s.list_type(("metadata", "ownerReferences")) == ("map", ("uid",))
    assert s.map_type(("spec", "predictor", "nodeSelector")) == "atomic"
    assert s.map_type(("spec", "predictor", "model", "env", "valueFrom", "secretKeyRef")) == "atomic"
    assert s.map_type(("spec", "predictor")) == "granular"
    assert s.is_field(("spec", "predictor", "model"))
    assert not s.is_field(("spec", "predictor", "labels", "app"))
    assert not s.is_field(("metadata", "labels", "app"))
    assert s.is_field(("metadata", "labels"))
    assert s.key_default(("spec", "predictor", "model", "ports"), "protocol") == "TCP"


# ============================================================================ generic behaviour
SPEC_SCHEMA = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "properties": {
                "count": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 10},
                "ratio": {"type": "number", "exclusiveMinimum": True, "minimum": 0, "multipleOf": 0.5},
                "name": {"type": "string", "minLength": 2, "maxLength": 5},
                "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                "when": {"type": "string", "format": "date-time"},
                "blob": {"type": "string", "format": "byte"},
                "note": {"type": "string", "nullable": True},
                "size": {"type": "string", "default": "small"},
                "labels": {
                    "type": "object",
                    "additionalProperties": {"type": "string", "maxLength": 3},
                    "maxProperties": 2,
                },
                "tags": {
                    "type": "array",
                    "items": {"type": "string"},
                    "x-kubernetes-list-type": "set",
                    "maxItems": 3,
                },
                "items": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                    },
                },
                "extra": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {"known": {"type": "integer"}},
                },
                "template": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}},
                },
                "port": {
                    "x-kubernetes-int-or-string": True,
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                },
                "frozen": {
                    "type": "object",
                    "x-kubernetes-map-type": "atomic",
                    "properties": {"a": {"type": "string"}},
                },
                "either": {
                    "type": "object",
                    "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                    "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
                },
            },
        },
    },
}


@pytest.fixture
def spec_schema() -> StructuralSchema:
    return StructuralSchema(copy.deepcopy(SPEC_SCHEMA))


def cr(spec: dict, **meta) -> dict:
    return {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t", **meta}, "spec": spec}


def test_prune_unknown_and_metadata(spec_schema):
    obj = cr(
        {
            "count": 1,
            "bogus": {"x": 1},
            "items": [{"name": "a", "junk": 1}],
            "extra": {"known": 1, "free": {"deep": True}},
            "template": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "oops": 1},
                "spec": {"x": "y", "z": 1},
            },
        },
        labels={"a": "b"},
        foo="bar",
        annotations={},
    )
    removed = spec_schema.prune(obj)
    assert removed == [
        "metadata.foo",
        "spec.bogus",
        "spec.items[0].junk",
        "spec.template.metadata.oops",
        "spec.template.spec.z",
    ]
    assert obj["metadata"] == {"name": "t", "labels": {"a": "b"}}
    assert obj["spec"]["extra"] == {"known": 1, "free": {"deep": True}}
    assert obj["spec"]["template"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"x": "y"},
    }


def test_prune_non_nullable_nulls_then_defaults(spec_schema):
    obj = cr({"count": None, "note": None, "size": None, "mode": None})
    assert spec_schema.prune(obj) == []
    assert obj["spec"] == {"note": None, "size": None, "mode": None}
    spec_schema.apply_defaults(obj)
    assert obj["spec"] == {"note": None, "size": "small", "mode": "a"}
    assert spec_schema.validate(obj) == []


def test_type_checks_integer_number_nullable(spec_schema):
    ok = cr({"count": 2.0, "ratio": 1.5, "note": None, "port": "http"})
    assert admit(spec_schema, ok)[1] == []
    _, errors = admit(spec_schema, cr({"count": 1.5, "ratio": "x", "name": ["a"], "port": 8080}))
    assert errors == [
        'spec.count: Invalid value: "float64": spec.count in body must be of type int32: "float64"',
        '<nil>: Invalid value: "": Checked value must be of type integer with format int32 in spec.count',
        'spec.name: Invalid value: "array": spec.name in body must be of type string: "array"',
        'spec.ratio: Invalid value: "string": spec.ratio in body must be of type number: "string"',
    ]


def test_string_number_bounds_and_enum(spec_schema):
    _, errors = admit(spec_schema, cr({"count": 11, "ratio": 0.0, "name": "abcdef", "mode": "c"}))
    assert errors == [
        "spec.count: Invalid value: 11: spec.count in body should be less than or equal to 10",
        'spec.mode: Unsupported value: "c": supported values: "a", "b"',
        "spec.name: Too long: may not be more than 5 bytes",
        "spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0",
    ]
    _, errors = admit(spec_schema, cr({"count": -1, "ratio": 0.75, "name": "a"}))
    assert errors == [
        "spec.count: Invalid value: -1: spec.count in body should be greater than or equal to 0",
        'spec.name: Invalid value: "a": spec.name in body should be at least 2 chars long',
        "spec.ratio: Invalid value: 0.75: spec.ratio in body should be a multiple of 0.5",
    ]
    # kube-openapi checks an integer value against int64(multipleOf): 0.5 becomes 0
    _, errors = admit(spec_schema, cr({"ratio": 1}))
    assert errors == [
        "spec.ratio: Invalid value: 0: factor MultipleOf declared for spec.ratio must be positive: 0"
    ]


def test_formats(spec_schema):
    ok = cr({"when": "2026-01-02T03:04:05Z", "blob": "aGVsbG8="})
    assert admit(spec_schema, ok)[1] == []
    _, errors = admit(spec_schema, cr({"when": "yesterday", "blob": "not base64!"}))
    assert errors == [
        'spec.blob: Invalid value: "not base64!": spec.blob in body must be of type byte: "not base64!"',
        'spec.when: Invalid value: "yesterday": spec.when in body must be of type date-time: "yesterday"',
    ]


def test_maps_lists_sets_and_duplicates(spec_schema):
    _, errors = admit(
        spec_schema,
        cr(
            {
                "labels": {"a": "x", "b": "toolong", "c": "y"},
                "tags": ["a", "b", "a", "c"],
                "items": [{"name": "a"}, {"name": "a", "port": 1}, {"port": 2}],
            }
        ),
    )
    assert errors == [
        "spec.items[2].name: Required value",
        "spec.labels: Too many: 3: must have at most 2 items",
        "spec.labels.b: Too long: may not be more than 3 bytes",
        "spec.tags: Too many: 4: must have at most 3 items",
        'spec.items[1]: Duplicate value: {"name":"a"}',
        'spec.tags[2]: Duplicate value: "a"',
    ]


def test_one_of_and_embedded_resource_checks(spec_schema):
    _, errors = admit(spec_schema, cr({"either": {"a": "1", "b": "2"}, "template": {"spec": {}}}))
    assert errors == [
        '<nil>: Invalid value: "": "spec.either" must validate one and only one schema (oneOf). '
        "Found 2 valid alternatives",
        "spec.template.apiVersion: Required value",
        "spec.template.kind: Required value",
    ]


def test_strict_reports_unknown_fields_as_forbidden():
    strict = StructuralSchema(copy.deepcopy(SPEC_SCHEMA), strict=True)
    obj = cr(
        {
            "count": 1,
            "bogus": 2,
            "extra": {"free": 1},
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {"y": 1}},
        }
    )
    errors = [e.render() for e in strict.validate(obj)]
    assert errors == [
        'spec: Invalid value: "bogus": spec.bogus in body is a forbidden property',
        'spec.template.spec: Invalid value: "y": spec.template.spec.y in body is a forbidden property',
    ]
    # the same object passes the lenient schema (the apiserver prunes instead)
    assert StructuralSchema(copy.deepcopy(SPEC_SCHEMA)).validate(obj) == []


def test_list_and_map_types(spec_schema):
    assert spec_schema.list_type(("spec", "tags")) == ("set", ())
    assert spec_schema.list_type(("spec", "items")) == ("map", ("name",))
    assert spec_schema.list_type(("spec", "items", "name")) == ("atomic", ())
    assert spec_schema.list_type(("spec", "nothing")) == ("atomic", ())
    assert spec_schema.map_type(("spec", "frozen")) == "atomic"
    assert spec_schema.map_type(("spec", "labels")) == "granular"
    assert spec_schema.is_field(("spec", "items", "port"))
    assert not spec_schema.is_field(("spec", "labels", "anything"))
    assert spec_schema.is_field(("apiVersion",))


def test_validate_status_paths():
    schema = StructuralSchema(
        {
            "type": "object",
            "properties": {"status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}},
        }
    )
    assert [e.render() for e in schema.validate_status({"status": {"ready": "yes"}})] == [
        'status.ready: Invalid value: "string": ready in body must be of type boolean: "string"'
    ]


def test_field_error_rendering():
    assert FieldError("FieldValueRequired", "spec.predictor").render() == "spec.predictor: Required value"
    assert FieldError("FieldValueNotSupported", "spec.z", 'supported values: "b", "c"', "a").render() == (
        'spec.z: Unsupported value: "a": supported values: "b", "c"'
    )
    assert FieldError(
        "FieldValueTypeInvalid", "spec.w", 'spec.w in body must be of type integer: "string"', "string"
    ).render() == ('spec.w: Invalid value: "string": spec.w in body must be of type integer: "string"')
    assert FieldError("FieldValueInvalid", "spec.n", "must be positive", -3).render() == (
        "spec.n: Invalid value: -3: must be positive"
    )
    assert FieldError("FieldValueInvalid", "spec.f", "x", 1.5).render() == "spec.f: Invalid value: 1.5: x"
    assert FieldError("FieldValueInvalid", "spec.b", "x", True).render() == "spec.b: Invalid value: true: x"
    assert FieldError("FieldValueDuplicate", "spec.l[1]", "", {"name": "a<b"}).render() == (
        'spec.l[1]: Duplicate value: {"name":"a\\u003cb"}'
    )
    assert FieldError(
        "FieldValueTooLong", "spec.s", "may not be more than 1 byte", "<value omitted>"
    ).render() == ("spec.s: Too long: may not be more than 1 byte")
    assert FieldError("FieldValueForbidden", "spec.x", "disabled").render() == "spec.x: Forbidden: disabled"
    assert FieldError("FieldValueInvalid", "metadata.name", "bad", 'quote"d\n').render() == (
        'metadata.name: Invalid value: "quote\\"d\\n": bad'
    )


def test_invalid_status_several_errors_and_core_group():
    errs = [
        FieldError("FieldValueRequired", "spec.a"),
        FieldError("FieldValueRequired", "spec.a"),
        FieldError("FieldValueInvalid", "spec.b", "bad", 1),
    ]
    st = invalid_status("ConfigMap", "", "cm", errs)
    assert (
        st["message"] == 'ConfigMap "cm" is invalid: [spec.a: Required value, spec.b: Invalid value: 1: bad]'
    )
    assert st["details"] == {
        "name": "cm",
        "kind": "ConfigMap",
        "causes": [
            {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.a"},
            {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.a"},
            {"reason": "FieldValueInvalid", "message": "Invalid value: 1: bad", "field": "spec.b"},
        ],
    }
