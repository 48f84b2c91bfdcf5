# -*- coding: utf-8 -*-
# Copyright: specpilot maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the staging roles: the status ConfigMap data after a staging Job, readable
one-line summaries, and Kubernetes quantities in bytes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from decimal import ROUND_CEILING

from ansible.errors import AnsibleFilterError

from ansible_collections.specpilot.core.plugins.module_utils.staging.pvc_staging import PlanError, status_data
from ansible_collections.specpilot.core.plugins.module_utils.staging.stager import human


# the sources the staging program (module_utils/staging/stager.py) fetches with a package that is not in the
# standard library, and that package: https:// and http:// need only python3
STAGER_PACKAGES = {"hf": "huggingface_hub", "s3": "boto3"}


def stage_image_problem(artifacts, image, schemes=None):
    """The staging plan's artifacts | stage_image_problem(image, schemes) -> why the staging image cannot fetch
    their sources ('' when it can): an hf:// or s3:// source needs its package in the image, which the role knows
    only from specpilot_stage_pvc_image_schemes (the default image, python:3.12-slim, has neither)."""
    can = {str(s).lower().split(":", 1)[0] for s in (schemes or [])}
    problems = []
    for art in artifacts or []:
        uri = str(art.get("uri") or "")
        scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
        if scheme in STAGER_PACKAGES and scheme not in can:
            problems.append(
                "specpilot_%s.uri is %s: the staging image %s cannot fetch %s:// (the staging program needs %s in it). "
                "Set specpilot_stage_pvc_image to an image with %s and add %s to specpilot_stage_pvc_image_schemes, "
                "or stage the model another way (an https:// source, a PVC filled beforehand, option A or B)."
                % (art.get("role"), uri, image, scheme, STAGER_PACKAGES[scheme], STAGER_PACKAGES[scheme], scheme)
            )
    return " ".join(problems)


def stage_status_data(plan, result):
    try:
        return status_data(plan, result)
    except PlanError as exc:
        raise AnsibleFilterError(str(exc))


def stage_summary_line(decision, pvc=None):
    where = "pvc://%s/%s" % (pvc, decision.get("dest")) if pvc else decision.get("dest")
    state = "up to date" if decision.get("up_to_date") else "to stage"
    return "%s: %s <- %s: %s (%s)" % (
        decision.get("role"),
        where,
        decision.get("uri"),
        state,
        decision.get("reason"),
    )


def stage_result_line(art):
    secs = art.get("seconds") or 0
    rate = (" (%s/s)" % human(art.get("throughput_bps"))) if art.get("throughput_bps") else ""
    return "%s: %s files, %s in %s; downloaded %s, already there %s, resumed %s; %.1f s%s" % (
        art.get("role"),
        art.get("files"),
        human(art.get("bytes")),
        art.get("dest"),
        human(art.get("bytes_downloaded")),
        human(art.get("bytes_reused")),
        human(art.get("bytes_resumed")),
        secs,
        rate,
    )


def k8s_quantity_bytes(value):
    """A Kubernetes quantity in bytes, rounded up, by the Kubernetes client's own grammar
    (kubernetes.utils.parse_quantity: Ki..Ei, k..E, m, e-notation, exact for large values)."""
    try:
        from kubernetes.utils import parse_quantity
    except ImportError as exc:  # the kubernetes client comes with kubernetes.core's requirements
        raise AnsibleFilterError("k8s_quantity_bytes needs the Python kubernetes client: %s" % exc)
    try:
        quantity = parse_quantity(value if isinstance(value, (int, float)) else str(value).strip())
    except (ValueError, TypeError):
        raise AnsibleFilterError("not a Kubernetes quantity: %r (e.g. 200Gi, 512Ki, 1e3, 500m)" % (value,))
    return int(quantity.to_integral_value(rounding=ROUND_CEILING))


def secret_data(secret):
    """A Secret object's data, base64-decoded (stringData merged)."""
    import base64

    out = {}
    for key, value in ((secret or {}).get("data") or {}).items():
        try:
            out[key] = base64.b64decode(value).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            raise AnsibleFilterError("Secret key %s is not base64 UTF-8 text" % key)
    out.update((secret or {}).get("stringData") or {})
    return out


def modelcar_artifact(art, models_dir, spec):
    """{role, subdir, path} of a staging artifact for modelcar_build: the fetched copy under
    models_dir when it has a uri, else the spec's local_path."""
    role = art.get("role")
    if art.get("uri"):
        path = "%s/%s" % (models_dir.rstrip("/"), art["subdir"])
    else:
        path = ((spec or {}).get(role) or {}).get("local_path")
        if not path:
            raise AnsibleFilterError("%s has neither uri nor local_path" % role)
    return {"role": role, "subdir": art["subdir"], "path": path}


def modelcar_layer_line(layer):
    return "%s: /models/%s layer %s (%s%s)" % (
        layer.get("role"),
        layer.get("subdir"),
        layer.get("digest"),
        human(layer.get("size")),
        ", unchanged" if layer.get("cached") else "",
    )


def modelcar_build_lines(build, spec_digest=None):
    """The result of modelcar_build as lines: pushed / would push / already there, each layer, the
    blobs uploaded (when pushed), and the digest to set in the spec when it has another one."""
    if not isinstance(build, dict):
        raise AnsibleFilterError(
            "modelcar_build_lines expects the result of modelcar_build, got %s" % type(build).__name__
        )
    if build.get("pushed"):
        state = "pushed"
    else:
        state = "check mode: would push" if build.get("changed") else "already in the registry"
    lines = ["%s: %s" % (state, build.get("image_ref"))]
    lines += [modelcar_layer_line(layer) for layer in build.get("layers") or []]
    if build.get("pushed"):
        up, skipped = build.get("blobs_uploaded", 0), build.get("blobs_skipped", 0)
        lines.append(
            "uploaded %d of %d blob(s), %d bytes" % (up, up + skipped, build.get("bytes_uploaded", 0))
        )
    if (spec_digest or "") != build.get("digest"):
        lines.append(
            "set specpilot_modelcar.image_digest: %s (the spec has %s)"
            % (build.get("digest"), spec_digest or "none")
        )
    return lines


class FilterModule(object):
    def filters(self):
        return {
            "stage_image_problem": stage_image_problem,
            "stage_status_data": stage_status_data,
            "stage_summary_line": stage_summary_line,
            "stage_result_line": stage_result_line,
            "k8s_quantity_bytes": k8s_quantity_bytes,
            "secret_data": secret_data,
            "modelcar_artifact": modelcar_artifact,
            "modelcar_layer_line": modelcar_layer_line,
            "modelcar_build_lines": modelcar_build_lines,
        }
