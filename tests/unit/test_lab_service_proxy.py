"""The lab's Service stand-in (lab/specpilot_lab/controller/proxy.py) forwards a token stream as it
comes, like kube-proxy: no chunk waits for the client's delayed ACK (Nagle). Before, on a kept-alive
connection (as the load generator uses), a response's header write left the next chunks waiting for
the client's delayed ACK (~40 ms), so streams arrived in one burst and the benchmark's validity check
marked the lab's levels invalid."""

from __future__ import annotations

import socket
import threading
import time

from specpilot_lab.controller.proxy import ServiceProxy

ROUNDS, CHUNKS, GAP_S = 6, 8, 0.004


def _streamer():
    """A keep-alive server: per request, a header write, then small chunks GAP_S apart (SSE's shape)."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve():
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(ROUNDS):
            conn.recv(1024)
            conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
            for i in range(CHUNKS):
                time.sleep(GAP_S)
                conn.sendall(b"data: %d\n\n" % i)
        conn.close()
        srv.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1]


def _response(client):
    """Arrival times of one response's chunks, relative to the request."""
    t0 = time.perf_counter()
    client.sendall(b"POST / HTTP/1.1\r\n\r\n")
    seen, times = b"", []
    while seen.count(b"data: ") < CHUNKS:
        got = client.recv(65536)
        assert got, "the proxy closed the stream"
        seen += got
        times.append(time.perf_counter() - t0)
    return times


def test_streamed_chunks_pass_the_proxy_as_they_come_on_a_kept_alive_connection():
    port = _streamer()
    proxy = ServiceProxy(lambda: port)
    try:
        client = socket.create_connection(("127.0.0.1", proxy.port))
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        responses = [_response(client) for _ in range(ROUNDS)]
        client.close()
    finally:
        proxy.close()
    for times in responses:
        # CHUNKS chunks GAP_S apart: about CHUNKS arrivals, the last after ~CHUNKS*GAP_S, no 40 ms stall
        assert len(times) >= CHUNKS // 2, responses
        assert max(b - a for a, b in zip([0.0] + times, times)) < 0.025, responses
