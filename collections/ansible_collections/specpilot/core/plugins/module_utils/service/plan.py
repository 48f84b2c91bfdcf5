# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""The plan of one service: what every role acts on, typed, built once by the validator.

``validator.validate`` assembles the plan's facts from the spec (and the cluster probe's, where the
cluster was reached) and hands them to :func:`build`, which returns a frozen :class:`Plan`.  What the
roles used to recompute each for itself is here, once:

* the resource that serves it (``kind``: InferenceService, the default, or LLMInferenceService; its
  ``api_version``) and the rendered manifests (:class:`Manifests`: the ServingRuntime and the
  InferenceService, or the LLMInferenceService; ``serving``: the one of ``kind``);
* the engine args with and without speculative decoding (``args``, ``args_without_speculative``);
* the benchmark's baseline twin (:class:`BenchmarkTwin`: those args, the digest it is labelled with);
* the wait plan of a rollout (:class:`WaitPlan`, with the spec's startup timeout; a rollback waits
  for other args with :meth:`WaitPlan.for_args`);
* the KServe deployment mode, normalised once (:func:`normalise_mode`: the legacy RawDeployment is
  Standard, Serverless is Knative).

Roles get it as a dict (:meth:`Plan.as_dict`, the ``plan`` of ``specpilot.core.spec_validate``
through the ``specpilot_validate`` role's entry point ``plan``): the keys it always had, and
``wait_plan`` and ``benchmark_twin``.  :func:`from_dict` reads such a dict back.  Pure standard library.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib

__all__ = [
    "MODES",
    "KINDS",
    "LEGACY_MODES",
    "DEFAULT_STARTUP_TIMEOUT",
    "normalise_mode",
    "WaitPlan",
    "BenchmarkTwin",
    "Manifests",
    "Plan",
    "build",
    "from_dict",
]

MODES = ("Standard", "Knative")
# the serving resources a plan can name (the first is the default); service/live.py has a view of each
KINDS = ("InferenceService", "LLMInferenceService")
API_VERSIONS = {"InferenceService": "serving.kserve.io/v1beta1"}
# KServe's names before 0.16 (still accepted by its controller and in most published examples)
LEGACY_MODES = {"RawDeployment": "Standard", "Serverless": "Knative"}
# the startup budget of a plan that names none (render.startup_budget's floor for one artifact)
DEFAULT_STARTUP_TIMEOUT = 900

# keys of the plan dict that the dataclasses type; every other key is kept as the validator gave it
_TYPED = (
    "name",
    "namespace",
    "deployment_mode",
    "spec_digest",
    "args",
    "args_without_speculative",
    "speculative_args",
    "speculative_config",
    "startup_timeout_seconds",
    "servingruntime",
    "inferenceservice",
    "llminferenceservice",
    "kind",
    "api_version",
    "serving",
    "wait_plan",
    "benchmark_twin",
)


def normalise_mode(value, default="Standard"):
    """``Standard`` or ``Knative`` for any name KServe gives a deployment mode (``RawDeployment``,
    ``Serverless`` too); an empty value is ``default``; an unknown one is returned as it is (the
    schema and the modules' choices refuse it, naming the field)."""
    if value in (None, ""):
        return default
    return LEGACY_MODES.get(value, value)


@dataclasses.dataclass(frozen=True)
class WaitPlan:
    """What ``specpilot.core.rollout_wait`` waits for: these args, this digest, in this mode."""

    name: str
    namespace: str
    spec_digest: str
    args: tuple
    deployment_mode: str
    startup_timeout_seconds: int
    kind: str = KINDS[0]
    api_version: str = API_VERSIONS[KINDS[0]]

    def for_args(self, args, spec_digest):
        """The same service waited for with other args (a rollback's)."""
        return dataclasses.replace(self, args=tuple(args or ()), spec_digest=spec_digest)

    def as_dict(self):
        out = dataclasses.asdict(self)
        out["args"] = list(self.args)
        if self.kind == KINDS[0]:  # an InferenceService's wait keeps the keys it always had
            out.pop("kind")
            out.pop("api_version")
        return out


@dataclasses.dataclass(frozen=True)
class BenchmarkTwin:
    """The benchmark's baseline: the service's InferenceService without speculative decoding."""

    args: tuple
    digest: str
    method: str = "off"
    purpose: str = "baseline of the specpilot benchmark"

    def as_dict(self):
        out = dataclasses.asdict(self)
        out["args"] = list(self.args)
        return out


@dataclasses.dataclass(frozen=True)
class Manifests:
    """The rendered objects, each with the spec digest annotation (None when not rendered)."""

    servingruntime: dict = None
    inferenceservice: dict = None
    llminferenceservice: dict = None


@dataclasses.dataclass(frozen=True)
class Plan:
    """One service's plan.  ``facts``: the validator's other keys (profile, delivery, staging...),
    kept as they are for the roles that read them."""

    name: str
    namespace: str
    deployment_mode: str
    spec_digest: str
    args: tuple
    args_without_speculative: tuple
    speculative_args: tuple
    speculative_config: dict
    startup_timeout_seconds: int
    manifests: Manifests
    facts: dict = dataclasses.field(default_factory=dict)
    # the validator's order of the keys (the rendered plan.yaml keeps it)
    key_order: tuple = dataclasses.field(default=(), compare=False, repr=False)
    kind: str = KINDS[0]
    api_version: str = API_VERSIONS[KINDS[0]]

    @property
    def serving(self):
        """The rendered serving object of this plan's kind (what deploy applies last)."""
        if self.kind == "LLMInferenceService":
            return self.manifests.llminferenceservice
        return self.manifests.inferenceservice

    @property
    def speculative(self):
        return bool(self.speculative_config)

    @property
    def wait(self):
        """The wait of this plan's own rollout."""
        return WaitPlan(
            name=self.name,
            namespace=self.namespace,
            spec_digest=self.spec_digest,
            args=self.args,
            deployment_mode=self.deployment_mode,
            startup_timeout_seconds=self.startup_timeout_seconds,
            kind=self.kind,
            api_version=self.api_version,
        )

    @property
    def twin(self):
        """The benchmark's baseline twin (its name, ``<name><suffix>``, is the benchmark's setting)."""
        digest_of = "%s without speculative decoding" % self.spec_digest
        return BenchmarkTwin(
            args=self.args_without_speculative,
            digest=hashlib.sha256(digest_of.encode("utf-8")).hexdigest(),
        )

    def as_dict(self):
        """The dict the roles get: the validator's keys, then ``wait_plan`` and ``benchmark_twin``."""
        typed = dict(
            name=self.name,
            namespace=self.namespace,
            deployment_mode=self.deployment_mode,
            spec_digest=self.spec_digest,
            args=list(self.args),
            args_without_speculative=list(self.args_without_speculative),
            speculative_args=list(self.speculative_args),
            speculative_config=copy.deepcopy(self.speculative_config),
            startup_timeout_seconds=self.startup_timeout_seconds,
            servingruntime=copy.deepcopy(self.manifests.servingruntime),
            inferenceservice=copy.deepcopy(self.manifests.inferenceservice),
            kind=self.kind,
            api_version=self.api_version,
            wait_plan=self.wait.as_dict(),
            benchmark_twin=self.twin.as_dict(),
        )
        if self.kind != KINDS[0]:  # an InferenceService's plan keeps the keys it always had
            typed.update(
                llminferenceservice=copy.deepcopy(self.manifests.llminferenceservice),
                serving=copy.deepcopy(self.serving),
            )
        out = {}
        for key in self.key_order + tuple(self.facts) + tuple(typed):
            if key not in out and (key in typed or key in self.facts):
                out[key] = typed[key] if key in typed else copy.deepcopy(self.facts[key])
        return out


def build(values):
    """The typed plan from the validator's plan dict (also the way back from :meth:`Plan.as_dict`)."""
    values = dict(values or {})
    startup = values.get("startup_timeout_seconds")
    return Plan(
        name=values["name"],
        namespace=values["namespace"],
        deployment_mode=normalise_mode(values.get("deployment_mode")),
        spec_digest=values.get("spec_digest") or "",
        args=tuple(values.get("args") or ()),
        args_without_speculative=tuple(values.get("args_without_speculative") or ()),
        speculative_args=tuple(values.get("speculative_args") or ()),
        speculative_config=copy.deepcopy(values.get("speculative_config")) or None,
        startup_timeout_seconds=int(startup) if startup else DEFAULT_STARTUP_TIMEOUT,
        manifests=Manifests(
            servingruntime=copy.deepcopy(values.get("servingruntime")),
            inferenceservice=copy.deepcopy(values.get("inferenceservice")),
            llminferenceservice=copy.deepcopy(values.get("llminferenceservice")),
        ),
        facts={k: copy.deepcopy(v) for k, v in values.items() if k not in _TYPED},
        key_order=tuple(values),
        kind=values.get("kind") or KINDS[0],
        api_version=values.get("api_version") or API_VERSIONS.get(values.get("kind") or KINDS[0]) or "",
    )


def from_dict(values):
    """A plan a role passed on (``Plan.as_dict``), or None for none (an empty dict, None)."""
    return build(values) if values else None
