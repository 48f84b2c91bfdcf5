"""SPDY/3.1 framing, as much of it as ``kubectl exec`` before 1.30 speaks (the lab's pod exec, podexec.py).

Ported from what the Go side reads and writes, github.com/moby/spdystream ``spdy/read.go``
(``Framer.ReadFrame``, ``parseControlFrame``, ``parseHeaderValueBlock``, ``parseDataFrame``),
``spdy/write.go`` (``writeControlFrameHeader``, ``writeHeaderValueBlock``, ``writeSynReplyFrame``,
``writeDataFrame``), ``spdy/types.go`` (frame types, flags) and ``spdy/dictionary.go``
(``headerDictionary``); the protocol is SPDY draft 3 (https://www.chromium.org/spdy/spdy-protocol/).

- A control frame: the control bit, version 3 and the type (16 bits each), then flags (8 bits) and
  the length (24 bits), then the type's fields. A data frame: the stream id (31 bits), flags and
  length, the payload. ``FLAG_FIN`` ends one direction of a stream.
- Header blocks (SYN_STREAM, SYN_REPLY, HEADERS) are zlib-compressed with the SPDY/3 dictionary,
  one zlib stream per direction for the whole connection, each block ending with a sync flush
  (Go's ``zlib.Writer.Flush``): :class:`HeaderCodec` keeps both.
- A header block: the number of pairs (uint32), then each name and value with a uint32 length;
  names lowercase; several values of one name joined with NUL.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN, FLAG_UNIDIRECTIONAL = 0x01, 0x02
# RST_STREAM status codes (types.go RstStreamStatus), GOAWAY's (GoAwayStatus)
PROTOCOL_ERROR, INVALID_STREAM, REFUSED_STREAM, CANCEL, INTERNAL_ERROR = 1, 2, 3, 5, 6
GOAWAY_OK = 0
MAX_DATA = (1 << 24) - 1

# spdy/dictionary.go headerDictionary (SPDY draft 3, 2.6.10.1): these words, each after its uint32
# length, then the tail as it is
_DICT_WORDS = (
    "options head post put delete trace accept accept-charset accept-encoding accept-language"
    " accept-ranges age allow authorization cache-control connection content-base content-encoding"
    " content-language content-length content-location content-md5 content-range content-type date"
    " etag expect expires from host if-match if-modified-since if-none-match if-range"
    " if-unmodified-since last-modified location max-forwards pragma proxy-authenticate"
    " proxy-authorization range referer retry-after server te trailer transfer-encoding upgrade"
    " user-agent vary via warning www-authenticate method get status"
).split() + ["200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin"]
_DICT_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request"
    "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented"
    "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00"
    " Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,"
    "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age="
    "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
DICTIONARY = b"".join(struct.pack("!I", len(w)) + w.encode() for w in _DICT_WORDS) + _DICT_TAIL.encode()


class SpdyError(ValueError):
    """A frame this codec cannot read."""


@dataclass
class Frame:
    """One frame, read or to write. kind: a control frame's type, or 0 for a data frame."""

    kind: int
    flags: int = 0
    stream_id: int = 0
    data: bytes = b""  # a data frame's payload
    headers: dict[str, list[str]] = field(default_factory=dict)  # SYN_STREAM, SYN_REPLY, HEADERS
    value: int = 0  # RST_STREAM and GOAWAY: the status; PING: the id; WINDOW_UPDATE: the delta
    settings: list[tuple[int, int, int]] = field(default_factory=list)  # (flags, id, value)

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


# ---------------------------------------------------------------- header blocks
def encode_headers(headers: dict[str, list[str] | str]) -> bytes:
    """write.go writeHeaderValueBlock: names lowercased, values joined with NUL (uncompressed)."""
    out = [struct.pack("!I", len(headers))]
    for name, values in headers.items():
        value = values if isinstance(values, str) else "\0".join(values)
        for part in (name.lower().encode(), value.encode()):
            out.append(struct.pack("!I", len(part)) + part)
    return b"".join(out)


def decode_headers(block: bytes) -> dict[str, list[str]]:
    """read.go parseHeaderValueBlock (an uncompressed block)."""
    (count,), pos, out = struct.unpack_from("!I", block), 4, {}
    for _ in range(count):
        pair = []
        for _ in range(2):
            (n,) = struct.unpack_from("!I", block, pos)
            pair.append(block[pos + 4 : pos + 4 + n].decode())
            pos += 4 + n
        if pos > len(block):
            raise SpdyError("header block shorter than its lengths")
        out.setdefault(pair[0].lower(), []).extend(pair[1].split("\0"))
    return out


class HeaderCodec:
    """The connection's two zlib streams (types.go NewFramer: BestCompression, the dictionary)."""

    def __init__(self) -> None:
        self._out = zlib.compressobj(9, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, DICTIONARY)
        self._in = zlib.decompressobj(zdict=DICTIONARY)

    def compress(self, headers: dict) -> bytes:
        return self._out.compress(encode_headers(headers)) + self._out.flush(zlib.Z_SYNC_FLUSH)

    def decompress(self, data: bytes) -> dict[str, list[str]]:
        try:
            return decode_headers(self._in.decompress(data))
        except (zlib.error, struct.error) as exc:
            raise SpdyError(f"bad header block: {exc}") from exc


# ---------------------------------------------------------------- frames
def _control(kind: int, flags: int, body: bytes) -> bytes:
    """write.go writeControlFrameHeader."""
    return struct.pack("!HHI", 0x8000 | VERSION, kind, (flags << 24) | len(body)) + body


def data_frame(stream_id: int, data: bytes = b"", fin: bool = False) -> bytes:
    """write.go writeDataFrame."""
    if len(data) > MAX_DATA:
        raise SpdyError("data frame too large")
    return struct.pack("!II", stream_id & 0x7FFFFFFF, ((FLAG_FIN if fin else 0) << 24) | len(data)) + data


def syn_stream(codec: HeaderCodec, stream_id: int, headers: dict, fin: bool = False) -> bytes:
    """write.go writeSynStreamFrame (associated stream 0, priority 0, slot 0): what a client sends."""
    body = struct.pack("!IIBB", stream_id, 0, 0, 0) + codec.compress(headers)
    return _control(SYN_STREAM, FLAG_FIN if fin else 0, body)


def syn_reply(codec: HeaderCodec, stream_id: int, headers: dict | None = None, fin: bool = False) -> bytes:
    """write.go writeSynReplyFrame: accepts a stream (FIN: rejects it, apimachinery spdy newSpdyStream)."""
    return _control(
        SYN_REPLY, FLAG_FIN if fin else 0, struct.pack("!I", stream_id) + codec.compress(headers or {})
    )


def rst_stream(stream_id: int, status: int) -> bytes:
    return _control(RST_STREAM, 0, struct.pack("!II", stream_id, status))


def settings(entries: list[tuple[int, int, int]]) -> bytes:
    body = struct.pack("!I", len(entries)) + b"".join(
        struct.pack("!II", (f << 24) | i, v) for f, i, v in entries
    )
    return _control(SETTINGS, 0, body)


def ping(ping_id: int) -> bytes:
    return _control(PING, 0, struct.pack("!I", ping_id))


def goaway(last_good_stream: int, status: int = GOAWAY_OK) -> bytes:
    return _control(GOAWAY, 0, struct.pack("!II", last_good_stream, status))


def window_update(stream_id: int, delta: int) -> bytes:
    return _control(WINDOW_UPDATE, 0, struct.pack("!II", stream_id, delta))


def _read_exact(rfile, n: int) -> bytes | None:
    data = rfile.read(n) if n else b""
    if len(data) < n:
        return None
    return data


def read_frame(rfile, codec: HeaderCodec) -> Frame | None:
    """read.go Framer.ReadFrame: the peer's next frame, or None at the end of the connection."""
    head = _read_exact(rfile, 8)
    if head is None:
        return None
    first, flags_length = struct.unpack("!II", head)
    flags, length = flags_length >> 24, flags_length & 0xFFFFFF
    body = _read_exact(rfile, length)
    if body is None:
        return None
    if not first & 0x80000000:
        return Frame(0, flags, first & 0x7FFFFFFF, data=body)
    version, kind = (first >> 16) & 0x7FFF, first & 0xFFFF
    if version != VERSION:
        raise SpdyError(f"SPDY version {version}, not {VERSION}")
    return _control_frame(kind, flags, body, codec)


def _control_frame(kind: int, flags: int, body: bytes, codec: HeaderCodec) -> Frame:
    """read.go's per-type read functions."""
    try:
        if kind == SYN_STREAM:
            return Frame(kind, flags, _sid(body), headers=codec.decompress(body[10:]))
        if kind in (SYN_REPLY, HEADERS):
            return Frame(kind, flags, _sid(body), headers=codec.decompress(body[4:]))
        if kind in (RST_STREAM, GOAWAY, WINDOW_UPDATE):
            sid, value = struct.unpack_from("!II", body)
            return Frame(kind, flags, sid & 0x7FFFFFFF, value=value)
        if kind == PING:
            return Frame(kind, flags, value=struct.unpack_from("!I", body)[0])
        if kind == SETTINGS:
            return Frame(kind, flags, settings=_settings(body))
    except struct.error as exc:
        raise SpdyError(f"control frame {kind} too short") from exc
    return Frame(kind, flags)  # CREDENTIAL or an unknown type: read over, as the spec asks


def _sid(body: bytes) -> int:
    return struct.unpack_from("!I", body)[0] & 0x7FFFFFFF


def _settings(body: bytes) -> list[tuple[int, int, int]]:
    (count,) = struct.unpack_from("!I", body)
    pairs = [struct.unpack_from("!II", body, 4 + 8 * i) for i in range(count)]
    return [(fid >> 24, fid & 0xFFFFFF, value) for fid, value in pairs]
