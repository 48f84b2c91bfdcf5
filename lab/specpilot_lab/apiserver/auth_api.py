"""The create-only APIs of authentication and authorization: TokenRequest
(``serviceaccounts/token``, ``kubectl create token``), SelfSubjectAccessReview
(``kubectl auth can-i``) and SelfSubjectReview (``kubectl auth whoami``). Nothing is stored."""

from __future__ import annotations

from typing import Any

from . import auth
from .errors import ApiError
from .util import now_rfc3339

MIN_TOKEN_SECONDS = (
    600  # pkg/apis/authentication/validation: "may not specify a duration less than 10 minutes"
)
MAX_TOKEN_SECONDS = 1 << 32
DEFAULT_TOKEN_SECONDS = 3600


def _invalid(kind: str, group: str, name: str, field: str, value: Any, why: str) -> ApiError:
    return ApiError(
        422,
        "Invalid",
        f'{kind}.{group} "{name}" is invalid: {field}: Invalid value: {value}: {why}',
        {
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [
                {"reason": "FieldValueInvalid", "message": f"Invalid value: {value}: {why}", "field": field}
            ],
        },
    )


def _spec(body: Any) -> dict:
    spec = body.get("spec") if isinstance(body, dict) else None
    return spec if isinstance(spec, dict) else {}


def token_request(server, user: auth.User, namespace: str, name: str, body: Any) -> dict:
    """POST /api/v1/namespaces/NS/serviceaccounts/NAME/token: a token for that ServiceAccount."""
    cluster = server.cluster
    sa = cluster.get(cluster.rt("", "v1", "serviceaccounts"), namespace, name)
    spec = _spec(body)
    seconds = spec.get("expirationSeconds")
    seconds = DEFAULT_TOKEN_SECONDS if seconds is None else seconds
    problem = (
        "may not specify a duration less than 10 minutes"
        if not isinstance(seconds, int) or seconds < MIN_TOKEN_SECONDS
        else "may not specify a duration larger than 2^32 seconds" if seconds > MAX_TOKEN_SECONDS else None
    )
    if problem:
        raise _invalid(
            "TokenRequest", "authentication.k8s.io", name, "spec.expirationSeconds", seconds, problem
        )
    audiences = [str(a) for a in spec.get("audiences") or []] or [auth.API_AUDIENCE]
    token, exp = server.authn.issuer.mint(namespace, name, sa["metadata"]["uid"], audiences, seconds)
    return {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
        "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": None},
        "status": {"token": token, "expirationTimestamp": now_rfc3339(exp)},
    }


def self_subject_access_review(server, user: auth.User, namespace: str, name: str, body: Any) -> dict:
    """POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews: may I?"""
    spec = _spec(body)
    allowed, reason = server.authz.authorize(auth.access_review_attributes(user, spec))
    status: dict = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    return {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": status,
    }


def self_subject_review(server, user: auth.User, namespace: str, name: str, body: Any) -> dict:
    """POST /apis/authentication.k8s.io/v1/selfsubjectreviews: who am I?"""
    return {
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "status": {"userInfo": auth.user_info(user)},
    }


# (group, plural, subresource) -> handler(server, user, namespace, name, body) -> the 201 body
CREATE_ONLY = {
    ("", "serviceaccounts", "token"): token_request,
    ("authorization.k8s.io", "selfsubjectaccessreviews", ""): self_subject_access_review,
    ("authentication.k8s.io", "selfsubjectreviews", ""): self_subject_review,
}
