"""Pod exec in the lab: ``kubectl exec`` and ``kubernetes.core.k8s_exec`` into a running container.

The controller publishes, for each container it runs, the sandbox the container runs in (the
bubblewrap argv up to ``--``: the pod's volumes at their mountPaths, the container's env and working
directory); the API server runs an exec'd command in a fresh sandbox built from it, so the command
sees the container's filesystem (``ls /mnt/models``, the engine's ``python3 -c 'import vllm'``) as it
would in the pod. It runs beside the engine, not in its process namespace (``ps`` does not show the
engine).

The wire protocol is the one the API server speaks for ``pods/exec`` over WebSocket
(k8s.io/apimachinery/pkg/util/remotecommand and the kubelet's streaming server): the
``v4.channel.k8s.io`` and ``v5.channel.k8s.io`` subprotocols, binary frames whose first byte is the
channel (0 stdin, 1 stdout, 2 stderr, 3 the status, 255 v5's close signal), and the command's end
as a metav1.Status on channel 3: ``Success``, or ``Failure`` with reason ``NonZeroExitCode`` and the
exit code as the first cause (what kubernetes.stream's ``returncode`` reads).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
from pathlib import Path

from . import podlogs

SPEC = "exec.json"
PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")  # the server's preference (the kubelet's)
STDIN, STDOUT, STDERR, ERROR, CLOSE = 0, 1, 2, 3, 255
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455, section 1.3
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


# ---------------------------------------------------------------- the running container's sandbox
def spec_path(state_dir: str | os.PathLike, namespace: str, pod: str, container: str) -> Path:
    return podlogs.container_dir(state_dir, namespace, pod, container) / SPEC


def publish(state_dir, namespace: str, pod: str, container: str, argv: list[str]) -> None:
    """The container runs: exec may run commands in ``argv`` (the sandbox, up to and including ``--``)."""
    path = spec_path(state_dir, namespace, pod, container)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"argv": list(argv)}))
    os.replace(tmp, path)


def withdraw(state_dir, namespace: str, pod: str, container: str) -> None:
    """The container stopped: exec finds it not running."""
    try:
        spec_path(state_dir, namespace, pod, container).unlink()
    except FileNotFoundError:
        pass


def sandbox(state_dir, namespace: str, pod: str, container: str) -> list[str] | None:
    """The running container's sandbox argv, or None when it does not run."""
    try:
        return json.loads(spec_path(state_dir, namespace, pod, container).read_text())["argv"]
    except (OSError, ValueError, KeyError):
        return None


# ---------------------------------------------------------------- WebSocket (RFC 6455), server side
def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.strip().encode() + _GUID).digest()).decode()


def choose_protocol(offered: str | None) -> str | None:
    """The subprotocol to answer with: the server's first preference the client offers."""
    names = [p.strip() for p in (offered or "").split(",") if p.strip()]
    return next((p for p in PROTOCOLS if p in names), None)


def frame(opcode: int, payload: bytes) -> bytes:
    """One final, unmasked frame (a server never masks)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


def channel_frame(channel: int, data: bytes) -> bytes:
    return frame(OP_BINARY, bytes([channel]) + data)


def close_frame(code: int = 1000) -> bytes:
    return frame(OP_CLOSE, struct.pack("!H", code))


def read_frame(rfile) -> tuple[int, bytes] | None:
    """(opcode, unmasked payload) of the client's next frame, or None at the end of the stream."""
    head = rfile.read(2)
    if len(head) < 2:
        return None
    opcode, length = head[0] & 0x0F, head[1] & 0x7F
    if length == 126:
        length = struct.unpack("!H", rfile.read(2))[0]
    elif length == 127:
        length = struct.unpack("!Q", rfile.read(8))[0]
    mask = rfile.read(4) if head[1] & 0x80 else b""
    data = rfile.read(length)
    if mask:
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    return opcode, data


# ---------------------------------------------------------------- the command's end, as the kubelet says it
def exit_status(code: int, command: list[str]) -> dict:
    """The metav1.Status on the error channel (kubelet remotecommand: NonZeroExitCode / ExitCode)."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": "command terminated with non-zero exit code: error executing command %s, exit code %d"
        % (json.dumps(command), code),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }
