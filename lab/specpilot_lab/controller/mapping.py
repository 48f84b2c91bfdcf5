"""From a container as stored in the pod to a process on this machine.

The pod keeps the container's view (``/mnt/models``, ``python -m vllm...``, ``--port=8080``) and so
does the engine: it runs in the pod's filesystem (sandbox.py), so model paths, ``--speculative-config``
and the env reach it unchanged. Only what this machine cannot give every pod is rewritten: the
interpreter (``.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server``), ``--host 127.0.0.1``
and the port (a free local one; the controller proxies the service's URL to it).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from ..engine import SERVER_MODULE, set_arg

_PY = re.compile(r"^python(3(\.\d+)?)?$")


class CommandError(Exception):
    """The container's command is not something the lab can run."""


def expand_vars(text: str, env: dict[str, str]) -> str:
    """Kubernetes $(VAR) expansion in command/args ($$ escapes; unknown names are kept)."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i):
            end = text.find(")", i + 2)
            name = text[i + 2 : end] if end > 0 else ""
            if end > 0 and name in env:
                out.append(env[name])
                i = end + 1
            else:
                out.append(text[i])
                i += 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def engine_argv(container: dict, vllm_python: Path, env: dict[str, str]) -> tuple[list[str], list[str]]:
    """(command prefix, vLLM server args) for the container.

    Accepted: no command (the vLLM OpenAI image's entrypoint), ``python[3] -m
    vllm.entrypoints.openai.api_server``, ``vllm serve [MODEL]``. Anything else raises
    CommandError (the lab runs the vLLM server only; images are not pulled)."""
    command = [expand_vars(c, env) for c in container.get("command") or []]
    args = [expand_vars(a, env) for a in container.get("args") or []]
    prefix = [str(vllm_python), "-m", SERVER_MODULE]
    if not command:
        if args[:1] == ["serve"] or args[:2] == ["vllm", "serve"]:
            return prefix, _serve_args(args[args.index("serve") + 1 :])
        return prefix, args
    exe = os.path.basename(command[0])
    if _PY.match(exe) and command[1:3] == ["-m", SERVER_MODULE]:
        return prefix, command[3:] + args
    if _PY.match(exe) and command[1:3] == ["-m", "vllm.entrypoints.cli.main"] and command[3:4] == ["serve"]:
        return prefix, _serve_args(command[4:] + args)
    if exe == "vllm" and command[1:2] == ["serve"]:
        return prefix, _serve_args(command[2:] + args)
    if exe == "vllm" and not command[1:] and args[:1] == ["serve"]:
        return prefix, _serve_args(args[1:])
    raise CommandError(
        f"the lab runs only the vLLM OpenAI server; cannot run command {shlex.join(command)!r} "
        "(expected python -m vllm.entrypoints.openai.api_server, vllm serve, or no command)"
    )


def _serve_args(rest: list[str]) -> list[str]:
    """``vllm serve MODEL --x`` -> ``--model MODEL --x``."""
    if rest and not rest[0].startswith("-"):
        return ["--model", rest[0]] + rest[1:]
    return rest


def engine_args(args: list[str], port: int) -> list[str]:
    """Container args -> engine args: ``--host 127.0.0.1 --port PORT``; nothing else is touched
    (model paths and ``--speculative-config`` stay the container's: the engine sees the pod's
    filesystem)."""
    return set_arg(set_arg(list(args), "--host", "127.0.0.1"), "--port", str(port))


def container_port(args: list[str], default: int = 8080) -> int:
    for i, a in enumerate(args):
        if a == "--port" and i + 1 < len(args):
            try:
                return int(args[i + 1])
            except ValueError:
                pass
        elif a.startswith("--port="):
            try:
                return int(a.split("=", 1)[1])
            except ValueError:
                pass
    return default
