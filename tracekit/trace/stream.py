"""Decompressed slices -> chunks of decoded events, never the whole document at once.

A trace is one JSON document whose bulk is the ``traceEvents`` array. The stream
keeps the top-level text around that array (the keys before it, and after it:
``baseTimeNanoseconds`` and ``traceName`` come last in Kineto's files), and cuts
the array itself, as the slices arrive, after its last complete event: that
prefix, bracketed, is a JSON array that msgspec decodes on its own. The rest waits
for the next slice.

Finding the cut cheaply: a raw newline never occurs inside a JSON string, and
events are separated by ``}`` ``,`` ``{`` (with whitespace), so the last such
separator is a candidate. It is only a candidate (the same bytes occur inside
strings and nested arguments), and decoding proves it: the chunk starts at an event
boundary, so it decodes as an array exactly when the cut is at one too. A candidate
that fails falls back to the exact structural scan (quotes, then braces outside
strings, then depth), which ``decode.close_truncated`` uses for truncated files.

Anything unusual (not an object or list at the top, no ``traceEvents`` array, a
chunk that does not decode at its exact cut, text after the document) raises
``NotStreamable``: the reader then reads the whole document the old way, which
gives every error its established sentence.
"""

from __future__ import annotations

from typing import Callable, Generic, Iterable, Iterator, TypeVar

import msgspec
import numpy as np

from tracekit.trace import decode as dec

# The keys before traceEvents (deviceProperties, distributedInfo, ...) are small;
# a document whose events have not begun by then is left to the whole-document path.
_HEADER_MAX = 64 << 20
_TRAILER_MAX = 64 << 20
_WS = b" \t\r\n"
_OPEN, _COMMA, _CLOSE_BRACE = ord("["), ord(","), ord("}")
# How many separator candidates to try from the end of a buffer before scanning exactly.
_CANDIDATES = 32

Chunk = tuple[list, Callable[[], list]]
# What the slices come from (``inflate.Inflated``, whose ``total`` callers read afterwards).
SlicesT = TypeVar("SlicesT", bound=Iterable[bytes])


class NotStreamable(Exception):
    """The document needs the whole-document path (which also words any error)."""


class EventChunks(Generic[SlicesT]):
    """Iterate for (events, exact) per chunk, ``exact()`` re-decoding that chunk with
    decimal timestamps; afterwards ``meta`` holds the top-level keys other than
    traceEvents and ``json_cut`` says whether the JSON ended before it closed. ``decoder``
    turns a chunk's text (a JSON array) into its events (default: ``decode.EVENTS``)."""

    def __init__(self, path: str, slices: SlicesT, decoder=None):
        self.path = path
        self.slices = slices
        self._events = decoder or dec.EVENTS
        self.meta: dict = {}
        self.json_cut = False
        self.n_decoded = 0
        # Decompressed bytes after the last complete event of a cut array (the part of an
        # event the cut broke off): 0 unless ``json_cut`` came from the events being cut.
        self.dropped = 0
        self._header = b""
        self._bare = False
        self._after_cut = 0

    def __iter__(self) -> Iterator[Chunk]:
        it = iter(self.slices)
        buf = self._start(it)
        trailer: bytearray | None = None
        for piece in it:
            if trailer is not None:
                trailer += piece
                if len(trailer) > _TRAILER_MAX:
                    raise NotStreamable
                continue
            buf += piece
            cut = _candidate(buf)
            if cut < 0:
                continue
            chunk = self._decode(buf, cut)
            if chunk is None:
                # Not at an event boundary after all: scan exactly.
                chunk, rest, trailer = self._exact(buf, final=False)
            else:
                rest = _rest(buf, cut, self._after_cut)
            if chunk is not None:
                yield chunk
                # Dropped before the next chunk is decoded: held here, the last chunk's
                # events would stay alive beside the next one's.
                del chunk
            buf = rest
        if trailer is None:
            buf += b" "  # so that the last event's closing brace is never the last byte
            chunk, _, trailer = self._exact(buf, final=True)
            if chunk is not None:
                yield chunk
        self._finish(trailer)

    # -- the document's start ----------------------------------------------------------

    def _start(self, it: Iterator[bytes]) -> bytearray:
        """Read until the events' array opens; keep the text before it, return the array's text."""
        data = b""
        for piece in it:
            data += piece
            start = data.lstrip(_WS)[:1]
            if not start:
                continue
            if start == b"[":
                self._bare = True
                return bytearray(data[data.index(b"[") :])
            if start != b"{":
                raise NotStreamable
            opening = _events_opening(data)
            if opening >= 0:
                self._header = data[:opening]
                return bytearray(data[opening:])
            if len(data) > _HEADER_MAX:
                raise NotStreamable
        raise NotStreamable  # the document ends (or is cut) before its events begin

    # -- chunks -------------------------------------------------------------------------

    def _decode(self, buf: bytearray, cut: int) -> Chunk | None:
        """The events of ``buf`` up to the closing brace at ``cut``, or None when they do not decode."""
        first = _first_non_ws(buf)
        if buf[first] not in (_OPEN, _COMMA):
            raise NotStreamable
        buf[first] = _OPEN
        # The byte after the brace (whitespace or the comma) becomes the chunk's closing
        # bracket; ``_rest`` puts it back at the start of the text that is left.
        self._after_cut = buf[cut + 1]
        buf[cut + 1] = ord("]")
        view = memoryview(buf)[first : cut + 2]
        try:
            events = self._events.decode(view)
        except (msgspec.DecodeError, msgspec.ValidationError):
            buf[cut + 1] = self._after_cut
            return None
        self.n_decoded += len(events)
        return events, (lambda: dec.EXACT_EVENTS.decode(view))

    def _exact(self, buf: bytearray, final: bool) -> tuple[Chunk | None, bytearray, bytearray | None]:
        """(chunk, what is left of the array's text, the text after the array or None), by the exact scan."""
        first = _first_non_ws(buf)
        if first >= len(buf) or buf[first] not in (_OPEN, _COMMA):
            raise NotStreamable
        buf[first] = _OPEN  # the scan then sees the chunk as an array of its own
        last_event, array_end = _scan(memoryview(buf)[first:])
        if array_end >= 0:
            array_end += first
            trailer = bytearray(memoryview(buf)[array_end + 1 :])
            body = memoryview(buf)[first : array_end + 1]
            # Decoded even without a complete event: whatever else the array holds is validated.
            return self._whole(body), bytearray(), trailer
        if not final:
            cut = first + last_event
            if last_event < 0 or cut + 1 >= len(buf):
                # No complete event yet, or one whose brace is the last byte (the chunk
                # borrows the byte after it): wait for more text.
                return None, buf, None
            chunk = self._decode(buf, cut)
            if chunk is None:
                raise NotStreamable  # a real error in these events: the whole-document path words it
            return chunk, _rest(buf, cut, self._after_cut), None
        # The text ends inside the array: the file was cut mid-write. Keep the complete events.
        self.json_cut = True
        if last_event < 0:
            if self.n_decoded == 0:
                raise NotStreamable  # nothing survives; the whole-document path says so
            self.dropped = len(buf) - 1  # all of it follows the last event (less the space added)
            return None, bytearray(), None
        self.dropped = len(buf) - (first + last_event) - 2  # after the closing brace, less the space
        chunk = self._decode(buf, first + last_event)
        if chunk is None:
            raise NotStreamable
        return chunk, bytearray(), None

    def _whole(self, body: memoryview) -> Chunk:
        try:
            events = self._events.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise NotStreamable from None
        self.n_decoded += len(events)
        return events, (lambda: dec.EXACT_EVENTS.decode(body))

    # -- the document's end -------------------------------------------------------------

    def _finish(self, trailer: bytearray | None) -> None:
        """The top-level keys: the document with its events' array emptied, decoded."""
        if self._bare:
            if trailer is not None and bytes(trailer).strip(_WS):
                raise NotStreamable
            return
        if self.json_cut or trailer is None:
            doc = self._header + b"[]}"
        else:
            doc = self._header + b"[]" + bytes(trailer)
        try:
            top = dec.TOP.decode(doc)
        except msgspec.DecodeError as e:
            if self.json_cut or not dec.ends_early(str(e), len(doc)):
                raise NotStreamable from None
            # Cut in a key after the events: every event is there, the keys after them are lost.
            self.json_cut = True
            try:
                top = dec.TOP.decode(self._header + b"[]}")
            except msgspec.DecodeError:
                raise NotStreamable from None
        except msgspec.ValidationError:
            raise NotStreamable from None
        try:
            self.meta = {k: dec.ANY.decode(v) for k, v in top.items() if k != "traceEvents"}
        except msgspec.DecodeError:
            raise NotStreamable from None  # a key's value is not valid JSON text (bad UTF-8)


def _first_non_ws(buf: bytearray) -> int:
    i = 0
    n = len(buf)
    while i < n and buf[i] in _WS:
        i += 1
    return i


def _candidate(buf: bytearray) -> int:
    """Position of the closing brace of a likely last complete event (``}`` ``,`` ``{``), or -1."""
    hi = len(buf)
    for _ in range(_CANDIDATES):
        k = buf.rfind(b"{", 0, hi)
        if k <= 0:
            return -1
        j = k - 1
        while j > 0 and buf[j] in _WS:
            j -= 1
        if buf[j] == _COMMA:
            j -= 1
            while j > 0 and buf[j] in _WS:
                j -= 1
            if buf[j] == _CLOSE_BRACE:
                return j
        hi = k
    return -1


def _rest(buf: bytearray, cut: int, after_cut: int) -> bytearray:
    """The text after the event closing at ``cut``, whose first byte (``after_cut``) the
    chunk borrowed as its closing bracket; it starts with the comma before the next
    event, which the next chunk borrows as its opening bracket."""
    rest = bytearray((after_cut,))
    rest += memoryview(buf)[cut + 2 :]
    return rest


def _scan(text: memoryview) -> tuple[int, int]:
    """(position of the last '}' that closes an element of the array opening ``text``,
    position of the ']' that closes the array), each -1 when absent."""
    chars = np.frombuffer(text, dtype=np.uint8)
    quotes = dec.string_quotes(chars)
    pos = dec.structure_positions(chars)
    pos = pos[np.searchsorted(quotes, pos) % 2 == 0]  # a brace between quotes is text
    depth = np.cumsum(dec.DEPTH_STEP[chars[pos]], dtype=np.int64)  # depth after each
    closed = np.flatnonzero(depth <= 0)
    array_end = int(pos[closed[0]]) if len(closed) else -1
    inside = slice(0, closed[0]) if len(closed) else slice(None)
    ends = np.flatnonzero((depth[inside] == 1) & (chars[pos[inside]] == _CLOSE_BRACE))
    last_event = int(pos[ends[-1]]) if len(ends) else -1
    return last_event, array_end


def _events_opening(data: bytes) -> int:
    """Byte position of the '[' that opens the top-level traceEvents array, or -1 (not yet seen)."""
    chars = np.frombuffer(data, dtype=np.uint8)
    quotes = dec.string_quotes(chars)
    pos = dec.structure_positions(chars)
    pos = pos[np.searchsorted(quotes, pos) % 2 == 0]
    depth = np.cumsum(dec.DEPTH_STEP[chars[pos]], dtype=np.int64)
    i = dec.trace_events_opening(data, quotes, pos, depth)
    if i >= 0:
        return int(pos[i])
    if len(depth) and (depth[1:] <= 0).any():
        raise NotStreamable  # the top-level object closed without an events array
    return -1
