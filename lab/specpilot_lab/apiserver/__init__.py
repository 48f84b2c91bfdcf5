"""A Kubernetes API server emulator for specpilot's local lab.

It speaks the Kubernetes REST API over plain HTTP on 127.0.0.1 closely enough that
kubectl, the kubernetes Python client and kubernetes.core behave as they would against
a real kube-apiserver for everything the project does.  Start it with
``python -m specpilot_lab.apiserver`` (see ``--help``) or in-process with
:func:`specpilot_lab.apiserver.server.serve`.

This package keeps its ``__init__`` light on purpose: importing ``schema`` or
``patch`` does not pull in the HTTP server.
"""

#: The Kubernetes version the emulator reports on /version.
KUBE_VERSION = "v1.31.4"
