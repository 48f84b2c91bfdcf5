# -*- coding: utf-8 -*-
# Copyright: specpilot contributors
# Apache-2.0 (see LICENSE)
# SPDX-License-Identifier: Apache-2.0
"""One view of a live serving resource: its engine args, its speculative flags, its deployment mode.

:class:`LiveService` is the interface; :class:`InferenceServiceView` reads a KServe InferenceService
(``spec.predictor.model`` or its ``kserve-container``).  A second serving resource (KServe's
LLMInferenceService) is a second subclass registered in :data:`VIEWS`, not a new set of readers:
rollback, the acceptance guard, smoke, the canary and the benchmark read a live object only through
:func:`view`.  Which flags are speculative is ``spec_flags`` (from the version profiles); the mode's
legacy names are normalised by ``plan.normalise_mode``.  Pure standard library.
"""

from __future__ import annotations

from ansible_collections.specpilot.core.plugins.module_utils.service import llmisvc
from ansible_collections.specpilot.core.plugins.module_utils.service import plan as service_plan
from ansible_collections.specpilot.core.plugins.module_utils.service import render
from ansible_collections.specpilot.core.plugins.module_utils.service import spec_flags

__all__ = [
    "LiveService", "InferenceServiceView", "LLMInferenceServiceView", "VIEWS", "view", "predictor_args", "ENGINE_CONTAINERS",
    "RUNNING", "changes", "plan_image", "runs_plan", "runtime_image",
]

ANN_DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
ANN_DIGEST = "specpilot.io/spec-digest"
# the changes that make the live object run something else than the plan (``changes``' fields)
RUNNING = ("args", "image")
# KServe's name of the predictor container that runs the model server
CONTAINER = "kserve-container"
# the container that runs vLLM in a serving pod, per kind: an InferenceService's predictor pods, an
# LLMInferenceService's workload pods (its ``main``; llmisvc.py cites KServe's templates)
ENGINE_CONTAINERS = (CONTAINER, llmisvc.CONTAINER)


class LiveService:
    """A live serving object (a dict as the API returns it, or None when it does not exist)."""

    kind = ""

    def __init__(self, obj):
        self.obj = obj or {}

    @property
    def exists(self):
        return bool(self.obj)

    @property
    def metadata(self):
        return self.obj.get("metadata") or {}

    @property
    def name(self):
        return self.metadata.get("name")

    @property
    def namespace(self):
        return self.metadata.get("namespace")

    @property
    def annotations(self):
        return self.metadata.get("annotations") or {}

    @property
    def spec_digest(self):
        return self.annotations.get(ANN_DIGEST)

    @property
    def deployment_mode(self):
        """``Standard`` or ``Knative``, whatever name the object gives it."""
        return service_plan.normalise_mode(self.annotations.get(ANN_DEPLOYMENT_MODE))

    @property
    def vllm_version(self):
        """The vLLM release deploy recorded on the object (``specpilot.io/vllm-version``, from the spec), or None."""
        return self.annotations.get(render.ANN_VLLM)

    @property
    def image(self):
        """The engine's image where the object names it itself, or None (an InferenceService's runtime gives it)."""
        return None

    @property
    def args(self):
        """The args the engine is given (a list, as stored)."""
        raise NotImplementedError

    @property
    def command_line(self):
        """The engine's command and args, as strings (what runs: a shell command line too)."""
        raise NotImplementedError

    @property
    def speculative_flags(self):
        """The speculative items of the command line, as written (``spec_flags.speculative_args``)."""
        return spec_flags.speculative_args(self.command_line)

    @property
    def speculative(self):
        return any(spec_flags.is_speculative(w) for w in self.speculative_words)

    @property
    def speculative_words(self):
        """Every word of the command line that names a speculative flag (inside shell lines too)."""
        words = []
        for item in self.command_line:
            words += item.split() if " " in item else [item]
        return [w for w in words if spec_flags.is_removed_by_rollback(w)]


def _model(predictor):
    model = (predictor or {}).get("model")
    return model if isinstance(model, dict) else None


def _engine_container(predictor):
    containers = [c for c in (predictor or {}).get("containers") or [] if isinstance(c, dict)]
    named = [c for c in containers if c.get("name") == CONTAINER]
    return (named or containers or [None])[0]


def predictor_args(predictor):
    """The engine args of an InferenceService predictor (a live one or a recorded one):
    ``model.args``, or the engine container's (``kserve-container``, else the first)."""
    model = _model(predictor)
    if model is not None:
        return list(model.get("args") or [])
    container = _engine_container(predictor) or {}
    return list(container.get("args") or [])


class InferenceServiceView(LiveService):
    """A KServe InferenceService (serving.kserve.io/v1beta1)."""

    kind = "InferenceService"

    @property
    def predictor(self):
        return (self.obj.get("spec") or {}).get("predictor") or {}

    @property
    def args(self):
        return predictor_args(self.predictor)

    @property
    def command_line(self):
        """The model's command and args (KServe's model spec is a container), or, when it gives
        neither, the engine container's."""
        model = _model(self.predictor) or {}
        if not (model.get("command") or model.get("args")):
            model = _engine_container(self.predictor) or {}
        return [str(a) for a in (model.get("command") or []) + (model.get("args") or [])]

    @property
    def image(self):
        """``model.image`` (KServe merges the predictor's container over its runtime's, the image included:
        ``MergeRuntimeContainers``, pkg/controller/v1beta1/inferenceservice/utils/utils.go), else the engine
        container's, else None: the runtime's."""
        model = _model(self.predictor)
        if model is not None:
            return model.get("image") or None
        return (_engine_container(self.predictor) or {}).get("image") or None


class LLMInferenceServiceView(LiveService):
    """A KServe LLMInferenceService (serving.kserve.io/v1alpha1 or v1alpha2): the engine is the ``main``
    container of the decode workload (``spec.template``; llmisvc.py cites KServe's source).  Its args are
    the ``$@`` of the template's ``eval``, so what vLLM runs is their shell parse (``llmisvc.engine_words``):
    ``args`` and ``command_line`` are those words.  ``prefill_args``: the prefill workload's, where set."""

    kind = "LLMInferenceService"

    @property
    def spec(self):
        return self.obj.get("spec") or {}

    @property
    def deployment_mode(self):
        """Standard: KServe runs its workloads as Deployments (or LeaderWorkerSets), never Knative."""
        return "Standard"

    @staticmethod
    def _main_args(template):
        for container in (template or {}).get("containers") or []:
            if isinstance(container, dict) and container.get("name") == llmisvc.CONTAINER:
                return llmisvc.engine_words(container.get("args"))
        return []

    @property
    def args(self):
        return self._main_args(self.spec.get("template"))

    @property
    def stored_args(self):
        """The decode ``main`` container's args as stored (quoted for the eval)."""
        for container in (self.spec.get("template") or {}).get("containers") or []:
            if isinstance(container, dict) and container.get("name") == llmisvc.CONTAINER:
                return list(container.get("args") or [])
        return []

    @property
    def prefill_args(self):
        prefill = self.spec.get("prefill")
        return self._main_args(prefill.get("template")) if isinstance(prefill, dict) else None

    @property
    def command_line(self):
        return [str(a) for a in self.args]

    @property
    def model_uri(self):
        return (self.spec.get("model") or {}).get("uri")

    @property
    def served_model_name(self):
        """spec.model.name (KServe's template serves it with --served-model-name), else the object's name."""
        return (self.spec.get("model") or {}).get("name") or self.name

    @property
    def url(self):
        return (self.obj.get("status") or {}).get("url")

    @property
    def image(self):
        for container in (self.spec.get("template") or {}).get("containers") or []:
            if isinstance(container, dict) and container.get("name") == llmisvc.CONTAINER:
                return container.get("image") or None
        return None


# kind -> its view
VIEWS = {view_class.kind: view_class for view_class in (InferenceServiceView, LLMInferenceServiceView)}


def view(obj, kind=None):
    """The view of a live object, chosen by its ``kind`` (or ``kind``; InferenceService when unsaid)."""
    kind = kind or (obj or {}).get("kind") or InferenceServiceView.kind
    if kind not in VIEWS:
        raise ValueError("no live view of kind %s (known: %s)" % (kind, ", ".join(sorted(VIEWS))))
    return VIEWS[kind](obj)


def runtime_image(runtime):
    """The image of a (Cluster)ServingRuntime's engine container (``kserve-container``, else its first), or None."""
    containers = [c for c in ((runtime or {}).get("spec") or {}).get("containers") or [] if isinstance(c, dict)]
    named = [c for c in containers if c.get("name") == CONTAINER]
    return (named or containers or [{}])[0].get("image") or None


def plan_image(plan):
    """The runtime image a plan (``Plan.as_dict``) runs: its LLMInferenceService's own, its ServingRuntime's, else the
    spec's ``runtime.image``."""
    plan = plan or {}
    serving = plan.get("llminferenceservice")
    own = view(serving, LLMInferenceServiceView.kind).image if serving else None
    return own or runtime_image(plan.get("servingruntime")) or (plan.get("runtime") or {}).get("image") or None


def changes(obj, plan, runtime=None):
    """What a plan changes of a live serving object, ``[{field, live, spec}]``: ``args`` (the engine's), ``image``
    (the live one: the object's own, else its ``runtime``'s, the live (Cluster)ServingRuntime it names) and
    ``vllm_version`` (the release deploy recorded on it). The one definition of a change: the canary runs one when
    the args or the image differ (the release annotation alone names a release, the image holds it), validate shows
    the acceptance recorded for the running release when the image or the release differs. A side that says
    nothing (no image, no annotation) is not compared."""
    current = view(obj)
    pairs = (
        ("args", list(current.args), list((plan or {}).get("args") or [])),
        ("image", current.image or runtime_image(runtime), plan_image(plan)),
        ("vllm_version", current.vllm_version, (plan or {}).get("vllm_version")),
    )
    return [
        {"field": field, "live": now, "spec": wanted}
        for field, now, wanted in pairs
        if now != wanted and (field == "args" or (now and wanted))
    ]


def runs_plan(obj, plan, runtime=None):
    """Whether the live object runs the plan already: neither its args nor its image differ (:func:`changes`)."""
    return not [c for c in changes(obj, plan, runtime) if c["field"] in RUNNING]
