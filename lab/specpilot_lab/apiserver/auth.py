"""Authentication and RBAC authorization, as kube-apiserver does them wherever a client can tell.

Authentication (``authenticate``):

- the lab admin's static token (``ADMIN_TOKEN``, what every lab kubeconfig holds) is the user
  ``ADMIN_USER`` in ``system:masters`` (kubeadm's admin.conf is in that group too);
- ServiceAccount tokens from the TokenRequest API (``POST .../serviceaccounts/NAME/token``,
  ``kubectl create token``): JWTs with the claims the real issuer writes (``sub``
  ``system:serviceaccount:NS:NAME``, ``kubernetes.io.serviceaccount.uid``, ``aud``, ``exp``),
  signed with a per-process HMAC key instead of the cluster's RSA key. A token is refused once
  it expires, once its ServiceAccount is deleted (or recreated: the uid must match) and when its
  audiences lack the API server's;
- no token: anonymous is allowed only on ``/healthz``, ``/livez`` and ``/readyz``, as an
  AuthenticationConfiguration with ``anonymous.conditions`` on those paths has it
  (Kubernetes 1.32+); everything else, and any unknown token, is 401 ``Unauthorized``.

Authorization (``Authorizer``): the privileged-group authorizer (``system:masters`` may do
anything), then RBAC: kubernetes ``plugin/pkg/auth/authorizer/rbac/rbac.go`` (``RuleAllows``,
``authorizingVisitor``) over the rules ``pkg/registry/rbac/validation/rule.go``
(``VisitRulesFor``, ``appliesToUser``) collects, with the matchers of
``pkg/apis/rbac/v1/evaluation_helpers.go`` (``VerbMatches``, ``APIGroupMatches``,
``ResourceMatches`` incl. ``*/subresource``, ``ResourceNameMatches``, ``NonResourceURLMatches``).
A denial is the 403 of ``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/
errors.go`` (``ForbiddenStatusError``, ``forbiddenMessage``). Not emulated: aggregated
ClusterRoles (``aggregationRule``: no controller fills their rules), the escalation check on
writes of Roles and bindings.

Impersonation (``Authorizer.impersonate``): the ``Impersonate-User`` and ``Impersonate-Group`` headers, as
``staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation.go`` (``WithImpersonation``) handles them:
the authenticated user must be allowed the verb ``impersonate`` on ``users`` (``serviceaccounts`` in the
namespace, for a ServiceAccount's username) and on ``groups``, by name; the request then runs as the
impersonated user, with ``system:authenticated`` added (and a ServiceAccount's own groups when no group is
asked for). Groups without a user are a 400. Not emulated: ``Impersonate-Uid`` and ``Impersonate-Extra-*``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable

from . import errors
from .errors import ApiError

ADMIN_TOKEN = "specpilot-lab-token"
ADMIN_USER = "specpilot-lab-admin"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
ANONYMOUS_PATHS = ("/healthz", "/livez", "/readyz")
SA_PREFIX = "system:serviceaccount:"
RBAC = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict, compare=False)


ADMIN = User(ADMIN_USER, groups=(MASTERS, AUTHENTICATED))
ANONYMOUS = User("system:anonymous", groups=(UNAUTHENTICATED,))


@dataclass
class Attributes:
    """What the authorizer judges (authorizer.Attributes)."""

    user: User
    verb: str
    resource_request: bool
    path: str = ""
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""


def unauthorized() -> ApiError:
    """apierrors.NewUnauthorized("Unauthorized"), what the authentication filter answers."""
    return ApiError(401, "Unauthorized", "Unauthorized")


# ------------------------------------------------------------------ ServiceAccount tokens
def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sa_username(namespace: str, name: str) -> str:
    return f"{SA_PREFIX}{namespace}:{name}"


def sa_user(namespace: str, name: str, uid: str) -> User:
    """serviceaccount.UserInfo: the user and groups a ServiceAccount token authenticates as."""
    groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED)
    return User(sa_username(namespace, name), uid, groups)


class TokenIssuer:
    """Mints and checks ServiceAccount JWTs (HS256 with a key of this process)."""

    def __init__(self, key: bytes | None = None):
        self._key = key or secrets.token_bytes(32)
        self.kid = _b64(hashlib.sha256(self._key).digest()[:12])

    def _sign(self, signing_input: str) -> str:
        return _b64(hmac.new(self._key, signing_input.encode(), hashlib.sha256).digest())

    def mint(
        self, namespace: str, name: str, uid: str, audiences: list[str], seconds: int
    ) -> tuple[str, int]:
        now = int(time.time())
        claims = {
            "aud": audiences,
            "exp": now + seconds,
            "iat": now,
            "iss": API_AUDIENCE,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
            "nbf": now,
            "sub": sa_username(namespace, name),
        }
        header = _b64(json.dumps({"alg": "HS256", "kid": self.kid}).encode())
        payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
        return f"{header}.{payload}.{self._sign(header + '.' + payload)}", claims["exp"]

    def claims(self, token: str) -> dict | None:
        """The claims of a token this issuer signed and that has not expired, else None."""
        parts = token.split(".")
        if len(parts) != 3 or not hmac.compare_digest(self._sign(parts[0] + "." + parts[1]), parts[2]):
            return None
        try:
            claims = json.loads(_unb64(parts[1]))
        except ValueError:
            return None
        if not isinstance(claims, dict) or int(claims.get("exp") or 0) <= time.time():
            return None
        return claims


class Authenticator:
    """Bearer token -> User; ``lookup_sa(namespace, name)`` returns the stored ServiceAccount or None."""

    def __init__(self, lookup_sa: Callable[[str, str], dict | None], static: dict[str, User] | None = None):
        self.lookup_sa = lookup_sa
        self.static = {ADMIN_TOKEN: ADMIN, **(static or {})}
        self.issuer = TokenIssuer()

    def authenticate(self, authorization: str | None, path: str) -> User:
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            if path in ANONYMOUS_PATHS:
                return ANONYMOUS
            raise unauthorized()
        user = self.static.get(token) or self._sa_token(token)
        if user is None:
            raise unauthorized()
        return user

    def _sa_token(self, token: str) -> User | None:
        claims = self.issuer.claims(token)
        if claims is None or API_AUDIENCE not in (claims.get("aud") or []):
            return None
        ref = claims.get("kubernetes.io") or {}
        sa = ref.get("serviceaccount") or {}
        stored = self.lookup_sa(ref.get("namespace", ""), sa.get("name", ""))
        if stored is None or (stored.get("metadata") or {}).get("uid") != sa.get("uid"):
            return None
        return sa_user(ref["namespace"], sa["name"], sa["uid"])


# ------------------------------------------------------------------ rule matching (evaluation_helpers.go)
def verb_matches(rule: dict, verb: str) -> bool:
    return any(v in ("*", verb) for v in rule.get("verbs") or [])


def api_group_matches(rule: dict, group: str) -> bool:
    return any(g in ("*", group) for g in rule.get("apiGroups") or [])


def resource_matches(rule: dict, combined: str, subresource: str) -> bool:
    """``*``, the exact ``resource`` or ``resource/subresource``, or ``*/subresource``."""
    for res in rule.get("resources") or []:
        if res in ("*", combined):
            return True
        if subresource and res == "*/" + subresource:
            return True
    return False


def resource_name_matches(rule: dict, name: str) -> bool:
    names = rule.get("resourceNames") or []
    return not names or name in names


def non_resource_url_matches(rule: dict, path: str) -> bool:
    """``*``, the exact path, or a prefix ending in ``*``."""
    for url in rule.get("nonResourceURLs") or []:
        if url in ("*", path):
            return True
        if url.endswith("*") and path.startswith(url.rstrip("*")):
            return True
    return False


def rule_allows(attrs: Attributes, rule: dict) -> bool:
    """rbac.go RuleAllows."""
    if not verb_matches(rule, attrs.verb):
        return False
    if not attrs.resource_request:
        return non_resource_url_matches(rule, attrs.path)
    combined = attrs.resource + ("/" + attrs.subresource if attrs.subresource else "")
    return (
        api_group_matches(rule, attrs.api_group)
        and resource_matches(rule, combined, attrs.subresource)
        and resource_name_matches(rule, attrs.name)
    )


# ------------------------------------------------------------------ subjects and rules (rule.go)
def applies_to(subject: dict, user: User, binding_namespace: str) -> bool:
    """rule.go appliesToUser: User by name, Group by membership, ServiceAccount by its username."""
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return user.name == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_namespace
        return bool(ns) and user.name == sa_username(ns, name or "")
    return False


def describe_subject(subject: dict, binding_namespace: str) -> str:
    if subject.get("kind") == "ServiceAccount":
        ns = subject.get("namespace") or binding_namespace
        return f'{subject["kind"]} "{subject.get("name")}/{ns}"'
    return f'{subject.get("kind")} "{subject.get("name")}"'


class Authorizer:
    """``lookup(group_resource, namespace)`` lists stored objects (namespace "" for cluster-scoped)."""

    def __init__(self, lookup: Callable[[tuple[str, str], str], Iterable[dict]]):
        self.lookup = lookup

    def _role_rules(self, ref: dict, namespace: str) -> tuple[list[dict], str | None]:
        kind, name = ref.get("kind"), ref.get("name", "")
        plural, ns = ("clusterroles", "") if kind == "ClusterRole" else ("roles", namespace)
        for role in self.lookup((RBAC, plural), ns):
            if (role.get("metadata") or {}).get("name") == name:
                return list(role.get("rules") or []), None
        return [], f'{plural[:-1]}.{RBAC} "{name}" not found'

    def _bindings(self, namespace: str) -> Iterable[tuple[str, dict]]:
        for b in self.lookup((RBAC, "clusterrolebindings"), ""):
            yield "ClusterRoleBinding", b
        if namespace:
            for b in self.lookup((RBAC, "rolebindings"), namespace):
                yield "RoleBinding", b

    def authorize(self, attrs: Attributes) -> tuple[bool, str]:
        """(allowed, reason): reason says which binding allowed, or the RBAC errors met on the way."""
        if MASTERS in attrs.user.groups:
            return True, ""
        problems: list[str] = []
        for kind, binding in self._bindings(attrs.namespace if attrs.resource_request else ""):
            md = binding.get("metadata") or {}
            bns = md.get("namespace", "")
            subject = next((s for s in binding.get("subjects") or [] if applies_to(s, attrs.user, bns)), None)
            if subject is None:
                continue
            ref = binding.get("roleRef") or {}
            rules, problem = self._role_rules(ref, bns)
            if problem:
                problems.append(problem)
            if any(rule_allows(attrs, r) for r in rules):
                where = md.get("name", "") + (f"/{bns}" if kind == "RoleBinding" else "")
                return True, (
                    f'RBAC: allowed by {kind} "{where}" of {ref.get("kind")} "{ref.get("name")}" '
                    f"to {describe_subject(subject, bns)}"
                )
        if not problems:
            return False, ""
        return False, "RBAC: " + (problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]")

    def check(self, attrs: Attributes) -> None:
        allowed, reason = self.authorize(attrs)
        if not allowed:
            raise forbidden(attrs, reason)

    def impersonate(self, user: User, requested_user: str | None, requested_groups: list[str]) -> User:
        """impersonation.go WithImpersonation: ``user`` itself when nothing is asked, else the impersonated user
        once ``user`` may impersonate each name asked (else 403, naming the first one refused)."""
        if not requested_user:
            if requested_groups:
                kinds = ", ".join("{Group %s}" % g for g in requested_groups)
                raise errors.bad_request(f"requested [{kinds}] without impersonating a user")
            return user
        for group in requested_groups:
            self.check(Attributes(user, "impersonate", True, resource="groups", name=group))
        if requested_user.startswith(SA_PREFIX) and requested_user.count(":") == 3:
            namespace, name = requested_user[len(SA_PREFIX):].split(":")
            asked = Attributes(user, "impersonate", True, namespace=namespace, resource="serviceaccounts", name=name)
            self.check(asked)
            groups = list(requested_groups) or ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
        else:
            self.check(Attributes(user, "impersonate", True, resource="users", name=requested_user))
            groups = list(requested_groups)
        if requested_user != ANONYMOUS.name and AUTHENTICATED not in groups:
            groups.append(AUTHENTICATED)
        return User(requested_user, groups=tuple(groups))


def forbidden_message(attrs: Attributes) -> str:
    """responsewriters.forbiddenMessage."""
    user = attrs.user.name
    if not attrs.resource_request:
        return f'User "{user}" cannot {attrs.verb} path "{attrs.path}"'
    res = attrs.resource + ("/" + attrs.subresource if attrs.subresource else "")
    if attrs.namespace:
        return (
            f'User "{user}" cannot {attrs.verb} resource "{res}" in API group "{attrs.api_group}" '
            f'in the namespace "{attrs.namespace}"'
        )
    return f'User "{user}" cannot {attrs.verb} resource "{res}" in API group "{attrs.api_group}" at the cluster scope'


def forbidden(attrs: Attributes, reason: str = "") -> ApiError:
    """responsewriters.ForbiddenStatusError: apierrors.NewForbidden(group/resource, name, message)."""
    why = forbidden_message(attrs) + (f": {reason}" if reason else "")
    if not attrs.resource_request:
        return ApiError(403, "Forbidden", f"forbidden: {why}", {})
    return errors.forbidden(attrs.resource, attrs.api_group, attrs.name, why)


# ------------------------------------------------------------------ bootstrap policy
def _bootstrap(kind: str, name: str) -> dict:
    """The head of a default (bootstrap) RBAC object, labelled and annotated as kube-apiserver's are."""
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        },
    }


def _cluster_role(name: str, rules: list[dict]) -> dict:
    return dict(_bootstrap("ClusterRole", name), rules=rules)


def _cluster_binding(name: str, role: str, groups: list[str]) -> dict:
    return {
        **_bootstrap("ClusterRoleBinding", name),
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": RBAC, "kind": "Group", "name": g} for g in groups],
    }


def bootstrap_policy() -> list[dict]:
    """The default ClusterRoles and bindings (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go)
    that clients meet: cluster-admin for system:masters, discovery, public info, basic-user."""
    discovery = ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*"]
    public = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
    return [
        _cluster_role(
            "cluster-admin",
            [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ],
        ),
        _cluster_role(
            "system:discovery",
            [{"nonResourceURLs": discovery + ["/readyz", "/version", "/version/"], "verbs": ["get"]}],
        ),
        _cluster_role("system:public-info-viewer", [{"nonResourceURLs": public, "verbs": ["get"]}]),
        _cluster_role(
            "system:basic-user",
            [
                {
                    "apiGroups": ["authorization.k8s.io"],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    "verbs": ["create"],
                },
                {
                    "apiGroups": ["authentication.k8s.io"],
                    "resources": ["selfsubjectreviews"],
                    "verbs": ["create"],
                },
            ],
        ),
        _cluster_binding("cluster-admin", "cluster-admin", [MASTERS]),
        _cluster_binding("system:discovery", "system:discovery", [AUTHENTICATED]),
        _cluster_binding(
            "system:public-info-viewer", "system:public-info-viewer", [AUTHENTICATED, UNAUTHENTICATED]
        ),
        _cluster_binding("system:basic-user", "system:basic-user", [AUTHENTICATED]),
    ]


# ------------------------------------------------------------------ reviews
def access_review_attributes(user: User, spec: dict) -> Attributes:
    """A SelfSubjectAccessReview's spec as authorizer attributes."""
    res = spec.get("resourceAttributes")
    if isinstance(res, dict):
        return Attributes(
            user,
            str(res.get("verb") or ""),
            True,
            api_group=str(res.get("group") or ""),
            api_version=str(res.get("version") or ""),
            namespace=str(res.get("namespace") or ""),
            resource=str(res.get("resource") or ""),
            subresource=str(res.get("subresource") or ""),
            name=str(res.get("name") or ""),
        )
    non = spec.get("nonResourceAttributes")
    if isinstance(non, dict):
        return Attributes(user, str(non.get("verb") or ""), False, path=str(non.get("path") or ""))
    raise ApiError(
        422,
        "Invalid",
        'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes: Invalid value: '
        '"null": exactly one of nonResourceAttributes or resourceAttributes must be specified',
        {"group": "authorization.k8s.io", "kind": "SelfSubjectAccessReview"},
    )


def user_info(user: User) -> dict:
    info: dict = {"username": user.name, "groups": list(user.groups)}
    if user.uid:
        info["uid"] = user.uid
    if user.extra:
        info["extra"] = dict(user.extra)
    return info
