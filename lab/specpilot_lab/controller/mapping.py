"""From a container as stored in the pod to a process on this machine.

The pod keeps the container's view (``/mnt/models``, ``python -m vllm...``, ``--port=8080``) and so
does the engine: it runs in the pod's filesystem (sandbox.py), so model paths, ``--speculative-config``
and the env reach it unchanged. Only what this machine cannot give every pod is rewritten: the
interpreter (``.venv-vllm/bin/python``, running the entry point the container names: ``vllm serve``
as ``-m vllm.entrypoints.cli.main serve``, the module path as itself), ``--host 127.0.0.1`` and the
port (a free local one; the controller proxies the service's URL to it).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from ..engine import SERVER_MODULE, set_arg

_PY = re.compile(r"^python(3(\.\d+)?)?$")
_SHELLS = ("bash", "sh")
CLI_MODULE = "vllm.entrypoints.cli.main"  # the ``vllm`` console script's module (vllm serve)


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

    Accepted: no command (the vLLM OpenAI image's entrypoint, ``vllm serve``), ``vllm serve``,
    ``python[3] -m vllm.entrypoints.cli.main serve``, ``python[3] -m
    vllm.entrypoints.openai.api_server`` and ``bash -c SCRIPT`` where SCRIPT runs ``vllm serve``
    (KServe's LLMInferenceService templates; returned as it is: the shell is the prefix). The args reach the entry point as they are (``vllm
    serve``'s positional model wherever argparse finds it). Anything else raises CommandError (the
    lab runs the vLLM server only; images are not pulled)."""
    command = [expand_vars(c, env) for c in container.get("command") or []]
    args = [expand_vars(a, env) for a in container.get("args") or []]
    module = [str(vllm_python), "-m", SERVER_MODULE]
    serve = [str(vllm_python), "-m", CLI_MODULE, "serve"]
    exe = os.path.basename(command[0]) if command else None
    if not command:
        if args[:1] == ["serve"] or args[:2] == ["vllm", "serve"]:
            return serve, args[args.index("serve") + 1 :]
        return serve, args
    if _PY.match(exe) and command[1:3] == ["-m", SERVER_MODULE]:
        return module, command[3:] + args
    if _PY.match(exe) and command[1:3] == ["-m", CLI_MODULE] and command[3:4] == ["serve"]:
        return serve, command[4:] + args
    if exe == "vllm" and command[1:2] == ["serve"]:
        return serve, command[2:] + args
    if exe == "vllm" and not command[1:] and args[:1] == ["serve"]:
        return serve, args[1:]
    if exe in _SHELLS and command[1:2] == ["-c"] and len(command) > 2 and "vllm serve" in command[2]:
        # KServe's LLMInferenceService templates (config/llmisvcconfig/config-llm-template.yaml): a
        # script that ends in ``eval "exec vllm serve ... $@"``, run by bash as it is, with the args as
        # its positional parameters; ``vllm`` is the engine's console script (the interpreter's
        # directory leads PATH in the sandbox), so only --host and --port are rewritten, in ``$@``
        return command, args
    raise CommandError(
        f"the lab runs only the vLLM OpenAI server; cannot run command {shlex.join(command)!r} "
        "(expected python -m vllm.entrypoints.openai.api_server, vllm serve, or no command)"
    )


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
