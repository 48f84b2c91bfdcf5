"""A TCP forwarder standing in for an InferenceService's Service: one stable local port
(what ``status.url`` shows) in front of whichever predictor pod is ready, so the address
does not change across rollouts. No ready pod: the connection is closed at once."""

from __future__ import annotations

import socket
import threading
from typing import Callable


class ServiceProxy:
    def __init__(self, target: Callable[[], int | None], host: str = "127.0.0.1", port: int = 0):
        self.target = target
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(64)
        self.host = host
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name=f"svc-proxy-{self.port}", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        port = self.target()
        if port is None:
            conn.close()
            return
        try:
            up = socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            conn.close()
            return
        up.settimeout(None)
        # no Nagle: a Service forwards each streamed chunk as it comes (kube-proxy does not buffer);
        # with Nagle a chunk written while the last is unacknowledged waits for the client's delayed
        # ACK (40 ms), so a token stream arrived in bursts and the benchmark flagged it invalid
        for s in (conn, up):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t = threading.Thread(target=_pipe, args=(up, conn), daemon=True)
        t.start()
        _pipe(conn, up)
        t.join(timeout=3600)
        for s in (conn, up):
            try:
                s.close()
            except OSError:
                pass

    def close(self) -> None:
        self._stop.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
