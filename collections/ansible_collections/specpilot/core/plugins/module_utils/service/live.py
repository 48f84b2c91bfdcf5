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

from ansible_collections.specpilot.core.plugins.module_utils.service import plan as service_plan
from ansible_collections.specpilot.core.plugins.module_utils.service import spec_flags

__all__ = ["LiveService", "InferenceServiceView", "VIEWS", "view", "predictor_args"]

ANN_DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
ANN_DIGEST = "specpilot.io/spec-digest"
# KServe's name of the predictor container that runs the model server
CONTAINER = "kserve-container"


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


# kind -> its view (LLMInferenceService: the next one)
VIEWS = {InferenceServiceView.kind: InferenceServiceView}


def view(obj, kind=None):
    """The view of a live object, chosen by its ``kind`` (or ``kind``; InferenceService when unsaid)."""
    kind = kind or (obj or {}).get("kind") or InferenceServiceView.kind
    if kind not in VIEWS:
        raise ValueError("no live view of kind %s (known: %s)" % (kind, ", ".join(sorted(VIEWS))))
    return VIEWS[kind](obj)
