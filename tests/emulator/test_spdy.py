"""SPDY/3.1 framing (specpilot_lab.spdy) as github.com/moby/spdystream writes and reads it, and the
server's half of an exec connection (podexec.SpdyWire) driven by a client written with it. kubectl
itself speaks it in test_pod_exec_spdy.py."""

from __future__ import annotations

import hashlib
import io
import json
import socket
import struct
import threading
import zlib

import pytest

from specpilot_lab import podexec, spdy


def test_the_header_dictionary_is_spdystreams():
    # spdy/dictionary.go headerDictionary: 1423 bytes, this digest
    assert len(spdy.DICTIONARY) == 1423
    digest = "51d27341373f923f3cd88e1eb7162aeaa3723d7585ff2399201dc06498407f02"
    assert hashlib.sha256(spdy.DICTIONARY).hexdigest() == digest
    assert spdy.DICTIONARY.startswith(b"\0\0\0\x07options\0\0\0\x04head")
    assert spdy.DICTIONARY.endswith(b"charset=iso-8859-1,utf-,*,enq=0.")


def test_header_blocks_share_one_zlib_stream_per_direction():
    client, server = spdy.HeaderCodec(), spdy.HeaderCodec()
    blocks = [{"streamtype": "error"}, {"streamtype": "stdout"}, {"Streamtype": ["a", "b"], "x": ""}]
    wire = [client.compress(b) for b in blocks]
    for data in wire:
        assert data.endswith(b"\0\0\xff\xff")  # each block ends with a sync flush (zlib.Writer.Flush)
    # later blocks are smaller: the stream remembers the earlier ones
    assert len(wire[1]) < len(wire[0])
    assert [server.decompress(d) for d in wire] == [
        {"streamtype": ["error"]},
        {"streamtype": ["stdout"]},
        {"streamtype": ["a", "b"], "x": [""]},  # names lowercased, values split on NUL
    ]
    # a fresh decompressor cannot read the second block alone: the stream is the connection's
    with pytest.raises(spdy.SpdyError):
        spdy.HeaderCodec().decompress(wire[1])
    # the block's own layout (write.go writeHeaderValueBlock)
    raw = spdy.encode_headers({"Streamtype": "stdin"})
    assert (
        raw == struct.pack("!I", 1) + struct.pack("!I", 10) + b"streamtype" + struct.pack("!I", 5) + b"stdin"
    )
    first = zlib.decompressobj(zdict=spdy.DICTIONARY).decompress(
        spdy.HeaderCodec().compress({"Streamtype": "stdin"})
    )
    assert first == raw


def test_frames_round_trip():
    out, back = spdy.HeaderCodec(), spdy.HeaderCodec()
    frames = b"".join(
        [
            spdy.syn_stream(out, 1, {"streamtype": "error"}),
            spdy.syn_reply(out, 3, fin=True),
            spdy.data_frame(5, b"hello"),
            spdy.data_frame(5, fin=True),
            spdy.rst_stream(7, spdy.CANCEL),
            spdy.settings([(1, 7, 65536)]),
            spdy.ping(9),
            spdy.goaway(7),
            spdy.window_update(5, 1024),
            struct.pack("!HHI", 0x8003, 10, 2) + b"??",  # CREDENTIAL: read over
        ]
    )
    # the control frame header: control bit, version 3, type; flags (8 bits) and length (24 bits)
    reply = spdy.syn_reply(spdy.HeaderCodec(), 3, fin=True)
    assert reply[:8] == struct.pack("!HHI", 0x8003, spdy.SYN_REPLY, 0x01000000 | (len(reply) - 8))
    rfile = io.BytesIO(frames)
    got = [spdy.read_frame(rfile, back) for _ in range(10)]
    assert spdy.read_frame(rfile, back) is None
    assert (got[0].kind, got[0].stream_id, got[0].headers) == (spdy.SYN_STREAM, 1, {"streamtype": ["error"]})
    assert (got[1].kind, got[1].stream_id, got[1].fin, got[1].headers) == (spdy.SYN_REPLY, 3, True, {})
    assert (got[2].kind, got[2].stream_id, got[2].data, got[2].fin) == (0, 5, b"hello", False)
    assert (got[3].data, got[3].fin) == (b"", True)
    assert (got[4].kind, got[4].stream_id, got[4].value) == (spdy.RST_STREAM, 7, spdy.CANCEL)
    assert (got[5].kind, got[5].settings) == (spdy.SETTINGS, [(1, 7, 65536)])
    assert (got[6].kind, got[6].value) == (spdy.PING, 9)
    assert (got[7].kind, got[7].stream_id, got[7].value) == (spdy.GOAWAY, 7, spdy.GOAWAY_OK)
    assert (got[8].kind, got[8].stream_id, got[8].value) == (spdy.WINDOW_UPDATE, 5, 1024)
    assert got[9].kind == 10
    # a data frame: no control bit, the 31-bit stream id, FIN in the flags byte
    assert spdy.data_frame(5, b"ab", fin=True) == struct.pack("!II", 5, 0x01000002) + b"ab"
    with pytest.raises(spdy.SpdyError):
        spdy.read_frame(io.BytesIO(struct.pack("!HHI", 0x8002, 6, 4) + b"\0\0\0\1"), back)  # SPDY/2
    assert spdy.read_frame(io.BytesIO(spdy.data_frame(1, b"abc")[:9]), back) is None  # cut short


class Client:
    """The client's half, as client-go's remotecommand (v2 createStreams) opens the streams."""

    def __init__(self, sock: socket.socket):
        self.sock, self.rfile, self.codec = sock, sock.makefile("rb"), spdy.HeaderCodec()

    def open(self, sid: int, kind: str) -> spdy.Frame:
        self.sock.sendall(spdy.syn_stream(self.codec, sid, {"streamtype": kind}))
        return spdy.read_frame(self.rfile, self.codec)

    def frames(self) -> list[spdy.Frame]:
        out = []
        while (f := spdy.read_frame(self.rfile, self.codec)) is not None:
            out.append(f)
            if f.kind == spdy.GOAWAY:
                return out
        return out


def _session(protocol: str, command: list[str], feed: bytes | None):
    """One exec over a socket pair: the wire in a thread, the client here; returns the frames."""
    a, b = socket.socketpair()
    wire = podexec.SpdyWire(a.makefile("rb"), a.makefile("wb", buffering=0), protocol)
    wanted = podexec.spdy_streams(protocol, feed is not None, True, True, False)
    done = threading.Event()

    def serve():
        if wire.open(wanted, timeout=10):
            podexec.run(wire, podexec.Target([], None, False), command, feed is not None)
        done.set()

    threading.Thread(target=serve, daemon=True).start()
    client = Client(b)
    kinds = ["error"] + (["stdin"] if feed is not None else []) + ["stdout", "stderr"]
    ids = {k: 1 + 2 * i for i, k in enumerate(kinds)}
    for kind, sid in ids.items():
        reply = client.open(sid, kind)
        assert (reply.kind, reply.stream_id, reply.fin) == (spdy.SYN_REPLY, sid, False)
    b.sendall(spdy.ping(1))
    if feed is not None:
        b.sendall(spdy.data_frame(ids["stdin"], feed) + spdy.data_frame(ids["stdin"], fin=True))
    frames = client.frames()
    client.rfile.close()
    b.close()  # the client hangs up: the wire stops waiting
    assert done.wait(10)
    return ids, frames


def _stream(frames, sid: int) -> tuple[bytes, bool]:
    mine = [f for f in frames if f.kind == 0 and f.stream_id == sid]
    return b"".join(f.data for f in mine), bool(mine) and mine[-1].fin


def test_an_exec_session_over_spdy():
    ids, frames = _session("v4.channel.k8s.io", ["sh", "-c", "cat; echo oops >&2; exit 3"], b"fed\n")
    assert any(f.kind == spdy.PING and f.value == 1 for f in frames)  # echoed
    assert _stream(frames, ids["stdout"]) == (b"fed\n", True)
    assert _stream(frames, ids["stderr"]) == (b"oops\n", True)
    status, fin = _stream(frames, ids["error"])
    assert fin and json.loads(status)["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
    assert frames[-1].kind == spdy.GOAWAY
    # v2 and v3: the error stream holds a failure's message only, nothing on success
    ids, frames = _session("v3.channel.k8s.io", ["sh", "-c", "exit 2"], None)
    assert _stream(frames, ids["error"])[0].startswith(b"command terminated with non-zero exit code")
    ids, frames = _session("v2.channel.k8s.io", ["true"], None)
    assert _stream(frames, ids["error"]) == (b"", True)


def test_protocol_choice_and_streams():
    assert podexec.spdy_protocol(["v4.channel.k8s.io", "v3.channel.k8s.io"]) == "v4.channel.k8s.io"
    assert podexec.spdy_protocol(["channel.k8s.io, v2.channel.k8s.io"]) == "v2.channel.k8s.io"
    assert podexec.spdy_protocol(["channel.k8s.io"]) is None
    assert podexec.spdy_streams("v4.channel.k8s.io", False, True, True, False) == {
        "error",
        "stdout",
        "stderr",
    }
    assert podexec.spdy_streams("v4.channel.k8s.io", True, True, False, True) == {
        "error",
        "stdin",
        "stdout",
        "resize",
    }
    assert podexec.spdy_streams("v2.channel.k8s.io", False, True, False, True) == {"error", "stdout"}


def test_capabilities_are_read_from_capeff():
    assert podexec.effective_caps("Name:\tx\nCapEff:\t0000000000200000\n") == 1 << podexec.CAP_SYS_ADMIN
    assert podexec.effective_caps("CapEff:\t0000000000000000\n") == 0
