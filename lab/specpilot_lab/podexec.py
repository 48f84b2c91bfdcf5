"""Pod exec in the lab: ``kubectl exec`` and ``kubernetes.core.k8s_exec`` into a running container.

The controller publishes, for each container it runs, the sandbox the container runs in (the
bubblewrap argv up to ``--``: the pod's volumes at their mountPaths, the container's env and working
directory), the pid of the sandbox's first process (bwrap with ``--unshare-pid`` forks it as its
child: pid 1 in the sandbox), the container's env and working directory. The API server runs an
exec'd command (:func:`target`):

- **inside the running container's namespaces** when it can (CAP_SYS_ADMIN and CAP_SYS_CHROOT in
  its effective set, util-linux ``nsenter``, the sandbox still there): ``nsenter --target PID --pid
  --mount --uts --ipc --root --wdns=WORKDIR`` with the container's env, so ``ps`` and ``ls /proc``
  show the engine, and the command sees the container's filesystem, hostname and /tmp, as
  ``kubectl exec`` in a real pod;
- otherwise (an unprivileged lab) **in a fresh sandbox** built from the published argv: the same
  mounts, env and working directory (``ls /mnt/models``, the engine's ``python3 -c 'import vllm'``),
  but beside the engine, not in its pid namespace (``ps`` does not show the engine).

The same command-running code (:func:`run`) serves two wire protocols, as the kubelet's streaming
server does (k8s.io/kubernetes pkg/kubelet/cri/streaming/remotecommand, httpstream.go
``createStreams``):

- **WebSocket** (:class:`WebSocketWire`; k8s.io/apimachinery/pkg/util/remotecommand, kubectl >= 1.30,
  kubernetes.stream, kubernetes.core.k8s_exec): the ``v4.channel.k8s.io`` and ``v5.channel.k8s.io``
  subprotocols, binary frames whose first byte is the channel (0 stdin, 1 stdout, 2 stderr, 3 the
  status, 255 v5's close signal);
- **SPDY/3.1** (:class:`SpdyWire`, framing in spdy.py; kubectl before 1.30, Debian's 1.20): the
  ``X-Stream-Protocol-Version`` ``v4``/``v3``/``v2.channel.k8s.io``; the client opens one stream per
  ``streamtype`` (error, stdin, stdout, stderr, resize), the server accepts each with SYN_REPLY,
  sends stdout and stderr as data frames and ends each stream with FIN.

Either way the command's end goes out on the error channel as the kubelet says it (exec.go
``ServeExec``; httpstream.go ``v4WriteStatusFunc``): a metav1.Status, ``Success`` or ``Failure``
with reason ``NonZeroExitCode`` and the exit code as the first cause (what kubernetes.stream's
``returncode`` and kubectl's "command terminated with exit code N" read); v2 and v3 get only a
failure's message (``v1WriteStatusFunc``). No terminal: ``tty`` runs the command on pipes.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import queue
import shutil
import signal
import struct
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import podlogs, spdy

SPEC = "exec.json"
PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")  # the server's preference (the kubelet's)
# SPDY: the kubelet's (pkg/kubelet/cri/streaming/remotecommand, SupportedStreamingProtocols) but v1
SPDY_PROTOCOLS = ("v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io")
STREAM_CREATION_TIMEOUT = 30.0  # the kubelet's default streamCreationTimeout
STDIN, STDOUT, STDERR, ERROR, CLOSE = 0, 1, 2, 3, 255
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455, section 1.3
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


# ---------------------------------------------------------------- the running container's sandbox
def spec_path(state_dir: str | os.PathLike, namespace: str, pod: str, container: str) -> Path:
    return podlogs.container_dir(state_dir, namespace, pod, container) / SPEC


def publish(
    state_dir,
    namespace: str,
    pod: str,
    container: str,
    argv: list[str],
    pid: int | None = None,
    env: dict[str, str] | None = None,
    workdir: str | None = None,
) -> None:
    """The container runs: exec may run commands in ``argv`` (the sandbox, up to and including ``--``),
    or, given the pid of the sandbox's first process and the container's env, inside its namespaces."""
    path = spec_path(state_dir, namespace, pod, container)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"argv": list(argv), "pid": pid, "env": env, "workdir": workdir}))
    os.replace(tmp, path)


def withdraw(state_dir, namespace: str, pod: str, container: str) -> None:
    """The container stopped: exec finds it not running."""
    try:
        spec_path(state_dir, namespace, pod, container).unlink()
    except FileNotFoundError:
        pass


def _spec(state_dir, namespace: str, pod: str, container: str) -> dict | None:
    try:
        spec = json.loads(spec_path(state_dir, namespace, pod, container).read_text())
    except (OSError, ValueError):
        return None
    return spec if isinstance(spec, dict) and isinstance(spec.get("argv"), list) else None


@dataclass
class Target:
    """Where an exec'd command runs: argv + the command, with env (None: the argv sets it)."""

    argv: list[str]
    env: dict[str, str] | None
    entered: bool  # inside the running container's namespaces, not a fresh sandbox


def target(state_dir, namespace: str, pod: str, container: str) -> Target | None:
    """The running container's namespaces where this process can enter them, else a fresh sandbox
    from the published argv; None when the container does not run."""
    spec = _spec(state_dir, namespace, pod, container)
    if spec is None:
        return None
    pid, env = spec.get("pid"), spec.get("env")
    if isinstance(pid, int) and isinstance(env, dict) and can_enter(pid):
        return Target(nsenter_argv(pid, spec.get("workdir") or "/"), env, True)
    return Target(list(spec["argv"]), None, False)


# ---------------------------------------------------------------- the container's namespaces
CAP_SYS_CHROOT, CAP_SYS_ADMIN = 18, 21  # linux/capability.h


def effective_caps(status: str | None = None) -> int:
    """CapEff of this process (/proc/self/status), as a bit mask."""
    if status is None:
        try:
            status = Path("/proc/self/status").read_text()
        except OSError:
            return 0
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


@functools.lru_cache(maxsize=1)
def nsenter_path() -> str | None:
    """util-linux nsenter, where this process may setns(2) into another's mount and pid namespaces
    (CAP_SYS_ADMIN; ``--root``: CAP_SYS_CHROOT): None otherwise."""
    caps = effective_caps()
    if not (caps >> CAP_SYS_ADMIN & 1 and caps >> CAP_SYS_CHROOT & 1):
        return None
    return shutil.which("nsenter")


@functools.lru_cache(maxsize=1)
def _has_wdns(nsenter: str) -> bool:
    """``--wdns`` (util-linux >= 2.38): the working directory resolved in the target's mounts."""
    try:
        out = subprocess.run([nsenter, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "--wdns" in out


def can_enter(pid: int) -> bool:
    """This process may enter the namespaces of pid, which still runs in a pid namespace of its own."""
    if nsenter_path() is None:
        return False
    try:
        return os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid") and os.access(
            f"/proc/{pid}/ns/mnt", os.R_OK
        )
    except OSError:
        return False


def nsenter_argv(pid: int, workdir: str) -> list[str]:
    nsenter = nsenter_path() or "nsenter"
    wd = f"--wdns={workdir}" if _has_wdns(nsenter) else "--wd"  # --wd alone: the target's own
    return [nsenter, "--target", str(pid), "--pid", "--mount", "--uts", "--ipc", "--root", wd, "--"]


def _ns_pids(pid: int) -> list[str]:
    """NSpid of pid (/proc/PID/status): its pid in each pid namespace it is in, outermost first."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return line.split()[1:]
    except OSError:
        pass
    return []


def _children(pid: int) -> list[int]:
    out = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return out


def sandbox_init(bwrap_pid: int, timeout: float = 5.0) -> int | None:
    """The sandbox's first process: the descendant of bwrap (bwrap --unshare-pid clones it at once)
    that is pid 1 of its own pid namespace; None if none shows within timeout."""
    deadline = time.monotonic() + timeout
    while True:
        todo, seen = [bwrap_pid], 0
        while todo and seen < 16:
            pid = todo.pop(0)
            seen += 1
            ns = _ns_pids(pid)
            if len(ns) > 1 and ns[-1] == "1":
                return pid
            todo += _children(pid)
        if time.monotonic() > deadline or not Path(f"/proc/{bwrap_pid}").exists():
            return None
        time.sleep(0.05)


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
    if code < 0:  # killed by a signal: what a shell reports
        code = 128 - code
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


# ---------------------------------------------------------------- one exec, whichever the wire
STDIN_EOF, GONE, STOP = "stdin-eof", "gone", "stop"  # what a wire's inbox holds beside stdin bytes


def run(wire, target: Target, command: list[str], stdin: bool) -> None:
    """Run the command where target says; its stdout and stderr go out on the wire as they come, the
    wire's inbox feeds its stdin (STDIN_EOF closes it, GONE - the client left - kills it); its end
    goes out as the kubelet's status (exit_status)."""
    try:
        proc = subprocess.Popen(
            target.argv + command,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=target.env,
            start_new_session=True,  # its own group: GONE kills what nsenter forked too
        )
    except OSError as exc:  # the sandbox's own program is missing: the command cannot start
        wire.send(STDERR, f"{exc}\n".encode())
        wire.finish(exit_status(127, command))
        return
    pumps = [
        threading.Thread(target=_pump, args=(s, wire, c), daemon=True)
        for s, c in ((proc.stdout, STDOUT), (proc.stderr, STDERR))
    ]
    for t in pumps:
        t.start()
    threading.Thread(target=_feed, args=(wire.inbox, proc), daemon=True).start()
    code = proc.wait()
    for t in pumps:
        t.join()
    wire.inbox.put(STOP)
    wire.finish(exit_status(code, command))


def _pump(stream, wire, channel: int) -> None:
    for chunk in iter(lambda: stream.read1(65536), b""):
        wire.send(channel, chunk)


def _feed(inbox: queue.Queue, proc: subprocess.Popen) -> None:
    while True:
        item = inbox.get()
        if item == STOP:
            return
        if item == GONE:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
            return
        if proc.stdin is None or proc.stdin.closed:
            continue
        try:
            if item == STDIN_EOF:
                proc.stdin.close()
            else:
                proc.stdin.write(item)
                proc.stdin.flush()
        except OSError:
            pass


class _Wire:
    """What run() needs of a wire: an inbox, send(channel, data), finish(status)."""

    def __init__(self, rfile, wfile) -> None:
        self.rfile, self.wfile = rfile, wfile
        self.inbox: queue.Queue = queue.Queue()
        self._lock = threading.Lock()

    def _write(self, *frames: bytes) -> None:
        with self._lock:
            try:
                self.wfile.write(b"".join(frames))
                self.wfile.flush()
            except OSError:
                pass


class WebSocketWire(_Wire):
    """The channel protocol over WebSocket (v4/v5.channel.k8s.io)."""

    def open(self) -> bool:
        threading.Thread(target=self._read, daemon=True).start()
        return True

    def send(self, channel: int, data: bytes) -> None:
        self._write(channel_frame(channel, data))

    def finish(self, status: dict) -> None:
        self._write(channel_frame(ERROR, json.dumps(status).encode()), close_frame())

    def _read(self) -> None:
        """The client's frames: stdin data, v5's close signal for stdin, or the end of the session."""
        while True:
            try:
                got = read_frame(self.rfile)
            except (OSError, ValueError):
                got = None
            if got is None:
                self.inbox.put(GONE)
                return
            opcode, data = got
            if opcode == OP_CLOSE:
                return
            if opcode not in (OP_BINARY, OP_TEXT) or not data:
                continue
            if data[0] == CLOSE and data[1:2] == bytes([STDIN]):
                self.inbox.put(STDIN_EOF)
            elif data[0] == STDIN:
                self.inbox.put(data[1:])


# ---------------------------------------------------------------- SPDY/3.1 (kubectl before 1.30)
def spdy_protocol(offered: list[str]) -> str | None:
    """apimachinery httpstream.Handshake: the client's first preference the server accepts."""
    names = [p.strip() for value in offered for p in value.split(",") if p.strip()]
    return next((p for p in names if p in SPDY_PROTOCOLS), None)


def spdy_streams(protocol: str, stdin: bool, stdout: bool, stderr: bool, tty: bool) -> set[str]:
    """The streams the client opens (httpstream.go createHTTPStreamStreams' expectedStreams)."""
    wanted = {"error"} | {n for n, on in (("stdin", stdin), ("stdout", stdout), ("stderr", stderr)) if on}
    if tty and protocol != "v2.channel.k8s.io":
        wanted.add("resize")
    return wanted


class SpdyWire(_Wire):
    """The streams of one SPDY connection (apimachinery httpstream/spdy, the kubelet's v2-v4 handlers):
    each SYN_STREAM is accepted with a SYN_REPLY, stdin's data goes to the inbox, PINGs are answered."""

    NAMES = {STDOUT: "stdout", STDERR: "stderr"}

    def __init__(self, rfile, wfile, protocol: str) -> None:
        super().__init__(rfile, wfile)
        self.protocol = protocol
        self.codec = spdy.HeaderCodec()
        self.streams: dict[str, int] = {}
        self.last_stream = 0
        self.closed = threading.Event()
        self._cond = threading.Condition()

    def open(self, wanted: set[str], timeout: float = STREAM_CREATION_TIMEOUT) -> bool:
        """Serve the connection; True once the client has opened the wanted streams (the kubelet's
        waitForStreams), False if it left or took longer than timeout."""
        threading.Thread(target=self._read, daemon=True).start()
        with self._cond:
            self._cond.wait_for(lambda: wanted <= set(self.streams) or self.closed.is_set(), timeout)
            return wanted <= set(self.streams) and not self.closed.is_set()

    def send(self, channel: int, data: bytes) -> None:
        sid = self.streams.get(self.NAMES.get(channel, ""))
        if sid:
            self._write(spdy.data_frame(sid, data))

    def finish(self, status: dict, linger: float = 10.0) -> None:
        """The status on the error stream (v4: JSON; v2, v3: a failure's message), FIN on every stream,
        GOAWAY (spdystream Connection.Close), then wait for the client to hang up."""
        message = json.dumps(status) if self.protocol == "v4.channel.k8s.io" else status.get("message", "")
        frames = [spdy.data_frame(self.streams["error"], message.encode())] if message else []
        frames += [spdy.data_frame(sid, b"", fin=True) for sid in sorted(self.streams.values())]
        self._write(*frames, spdy.goaway(self.last_stream))
        self.closed.wait(linger)

    def _read(self) -> None:
        while True:
            try:
                frame = spdy.read_frame(self.rfile, self.codec)
            except (OSError, ValueError):
                frame = None
            if frame is None:
                break
            self._on_frame(frame)
        with self._cond:
            self.closed.set()
            self._cond.notify_all()
        self.inbox.put(GONE)

    def _on_frame(self, frame: spdy.Frame) -> None:
        stdin = self.streams.get("stdin")
        if frame.kind == spdy.SYN_STREAM:
            self._accept(frame)
        elif frame.kind == 0 and frame.stream_id == stdin:
            if frame.data:
                self.inbox.put(frame.data)
            if frame.fin:
                self.inbox.put(STDIN_EOF)
        elif frame.kind == spdy.RST_STREAM and frame.stream_id == stdin:
            self.inbox.put(STDIN_EOF)
        elif frame.kind == spdy.PING:
            self._write(spdy.ping(frame.value))  # spdystream handlePingFrame: echo the peer's

    def _accept(self, frame: spdy.Frame) -> None:
        """apimachinery spdy connection.newSpdyStream: a SYN_REPLY to every stream; its type by the
        ``streamtype`` header (k8s.io/api/core/v1 StreamType)."""
        kind = (frame.headers.get("streamtype") or [""])[0]
        with self._lock:  # the header zlib stream: frames compressed in the order they are sent
            try:
                self.wfile.write(spdy.syn_reply(self.codec, frame.stream_id))
                self.wfile.flush()
            except OSError:
                pass
        with self._cond:
            self.last_stream = max(self.last_stream, frame.stream_id)
            self.streams.setdefault(kind, frame.stream_id)
            self._cond.notify_all()
        if kind == "stdin" and frame.fin:
            self.inbox.put(STDIN_EOF)
