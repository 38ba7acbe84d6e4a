"""Bytes -> typed events, fast.

A Kineto trace is one big JSON document. ``json.loads`` would build a dict per
event (hundreds of thousands of them) only for us to pick a dozen fields out of
each; instead msgspec decodes straight into small typed structs and skips every
field we do not name, which is where the speed comes from (see benchmarks/).

Only this module knows the JSON field names; ``columns`` turns the structs into
tables. The reader decodes the events chunk by chunk (``stream`` cuts the text and
decodes each chunk with ``EVENTS``); ``decode`` decodes a whole document at once,
the path for documents the stream cannot cut, and the one that words every error.
"""

from __future__ import annotations

import decimal
import os
import re
import sys
from typing import Any, Union

import msgspec
import numpy as np

from tracekit.errors import TracekitError
from tracekit.trace import inflate
from tracekit.trace.limits import max_decompressed_bytes

ABSENT = msgspec.Raw(b"")


# gc=False: these structs hold no cycles, and tracking 200k of them for the
# cyclic collector costs more than the decode itself.
class Args(msgspec.Struct, gc=False, frozen=True):
    # Current traces spell it "External id"; PyTorch 1.9 kernels and runtime calls
    # use "external id". Both are kept; the reader takes whichever is present.
    # Ids are ints in CUDA traces; ROCm traces write some of them as strings.
    # -1 stands for "absent" so whole columns convert to int64 arrays in C.
    external_id: Union[int, str] = msgspec.field(default=-1, name="External id")
    external_id_lc: Union[int, str] = msgspec.field(default=-1, name="external id")
    correlation: Union[int, str] = -1
    device: Union[int, str] = -1
    stream: Union[int, str] = -1
    # Shapes stay undecoded JSON text: most analyses touch a few thousand distinct
    # shapes, and decoding 50k nested lists up front would cost more than the read.
    # (msgspec.Raw cannot sit in a Union; an empty Raw means "absent".)
    # ROCm launch calls name the kernel they queue; graph-capture alignment uses it.
    kernel: str = ""
    input_dims: msgspec.Raw = msgspec.field(default=ABSENT, name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=ABSENT, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=ABSENT, name="Concrete Inputs")
    # Kernel launch grid ([x, y, z] CTAs): the one shape-like fact a trace without
    # recorded shapes still has (GEMM grids grow with the tokens of a step). Raw, so a
    # malformed grid costs that kernel its grid, not the whole read.
    grid: msgspec.Raw = ABSENT
    # Threads per block ([x, y, z]); ROCm traces write ``grid`` in threads, so blocks are grid / block.
    block: msgspec.Raw = ABSENT
    # Bytes a memcpy/memset moved: a default serving trace's only record of the sizes of the
    # arrays a step copies (input ids, positions, sampled tokens).
    nbytes: Union[int, str] = msgspec.field(default=-1, name="bytes")


_NO_ARGS = Args()


class Event(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    """A complete ("X") event: the only phase tracekit's tables are made of."""

    cat: Union[str, None] = None
    name: str = ""
    pid: Union[int, str] = -1
    tid: Union[int, str] = -1
    ts: float = 0.0
    dur: float = 0.0
    args: Args = _NO_ARGS


class ExactEvent(Event, tag="X"):
    """The same event with an exact timestamp, for traces whose float µs overflow ns precision."""

    # Another type for the field is the point of this subclass (msgspec decodes by annotation).
    ts: decimal.Decimal = decimal.Decimal(0)  # type: ignore[assignment]


class NotComplete:
    """What the ``cat`` of an event that is not a complete one reads: a class attribute, not
    the event's category, so that one pass over a chunk's categories also tells the complete
    events from the rest (``columns`` gives these keys no table)."""

    __slots__ = ("phase",)

    def __init__(self, phase: str) -> None:
        self.phase = phase

    def __repr__(self) -> str:
        return f"<not a complete event: {self.phase}>"


FLOW, OTHER = NotComplete("flow start"), NotComplete("other phase")


class FlowStart(msgspec.Struct, gc=False, frozen=True, tag_field="ph", tag="s"):
    """A flow start ("s"): only its category is kept, because it dates the schema
    (``async`` in PyTorch 1.9, ``async_cpu_to_gpu`` in 2022, ``ac2g`` since)."""

    flow_cat: Union[str, None] = msgspec.field(default=None, name="cat")
    cat = FLOW  # not a field: see NotComplete


# Every other phase of the Chrome trace format (flow steps and ends, instants,
# metadata, counters, async and object events) decodes into an empty struct: a
# third of a typical trace's events are flows and instants, and skipping their
# fields is cheaper than materialising them only to drop them.
# (S, T, p and F are the deprecated async phases, still written by old tools.)
_OTHER_PHASES = "BEiIbneCftPNODMVvRc()STpF"
SKIPPED = tuple(
    msgspec.defstruct(f"Skipped_{i}", [], tag_field="ph", tag=ph, gc=False, frozen=True, namespace={"cat": OTHER})
    for i, ph in enumerate(_OTHER_PHASES)
)
# Unions built from a runtime tuple: no static type to mypy (hence valid-type).
AnyEvent = Union[(Event, FlowStart) + SKIPPED]  # type: ignore[valid-type]
AnyExactEvent = Union[(ExactEvent, FlowStart) + SKIPPED]  # type: ignore[valid-type]


class Document(msgspec.Struct):
    traceEvents: list[AnyEvent] = []  # type: ignore[valid-type]


class ExactDocument(msgspec.Struct):
    traceEvents: list[AnyExactEvent] = []  # type: ignore[valid-type]


_EVENTS = msgspec.json.Decoder(list[AnyEvent])  # type: ignore[valid-type]
_DOCUMENT = msgspec.json.Decoder(Document)
_EXACT_EVENTS = msgspec.json.Decoder(list[AnyExactEvent])  # type: ignore[valid-type]
_EXACT_DOCUMENT = msgspec.json.Decoder(ExactDocument)
# The top level without materialising traceEvents: a cheap skim for metadata.
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY = msgspec.json.Decoder()
# For the stream (``stream``): chunks of events as JSON arrays, and the top level without them.
EVENTS, EXACT_EVENTS, TOP, ANY = _EVENTS, _EXACT_EVENTS, _TOP, _ANY

TRACE_EXTENSIONS = (".json", ".json.gz", ".json.zst")


def read_bytes(path: str, max_bytes: int | None = None) -> tuple[bytes, str | None]:
    """(decompressed bytes of a whole trace file, how its stream was cut or None), or a TracekitError.

    The non-streaming path (the reader streams; this is its fallback for documents the
    stream cannot cut, and the reference the tests compare the stream with). A gzip or
    zstd stream that ends early gives what it decompresses to before the cut, with
    "gzip stream ended early" (or zstd); the JSON inside is then cut too, and
    ``close_truncated`` salvages its events. ``max_bytes`` caps the decompressed size.
    """
    return inflate.read_all(path, max_decompressed_bytes(max_bytes))


class TruncatedJSON(TracekitError):
    """The document ends before it closes; ``close_truncated`` can salvage its complete events."""


def decode(path: str, data: bytes, exact_ts: bool = False) -> tuple[list[Event], dict[str, Any]]:
    """(events, top-level metadata) of a trace document.

    ``exact_ts`` decodes timestamps as decimals; the reader asks for it only when
    float microseconds cannot hold the trace's nanoseconds. A document that ends
    early raises ``TruncatedJSON``.
    """
    start = data.lstrip()[:1]
    if start not in (b"{", b"["):
        raise TracekitError(f"{path} is not JSON (it does not start with '{{' or '[')")
    try:
        if start == b"[":
            # Very old traces (2020) are a bare list of events.
            return (_EXACT_EVENTS if exact_ts else _EVENTS).decode(data), {}
        top = _TOP.decode(data)
        if "traceEvents" not in top:
            raise TracekitError(f"{path} is JSON but not a Chrome/Kineto trace: it has no traceEvents")
        events = (_EXACT_DOCUMENT if exact_ts else _DOCUMENT).decode(data).traceEvents
        meta = {k: _ANY.decode(v) for k, v in top.items() if k != "traceEvents"}
    except msgspec.ValidationError as e:
        raise TracekitError(f"{path} is not a valid trace: {e}") from None
    except msgspec.DecodeError as e:
        msg = str(e)
        if ends_early(msg, len(data)):
            raise TruncatedJSON(f"{path} ends in the middle of the JSON: the file looks truncated") from None
        raise TracekitError(f"{path} is not valid JSON ({msg})") from None
    return events, meta


def too_deep(path: str) -> TracekitError:
    """The error for a document nested past what the decoder recurses through (msgspec goes one
    level of Python recursion per array or object): no profiler writes one."""
    return TracekitError(
        f"{path} nests JSON arrays or objects too deep to be a trace (more than {sys.getrecursionlimit():,} levels)"
    )


_ERROR_BYTE = re.compile(r"\(byte (\d+)\)")


def ends_early(msg: str, size: int) -> bool:
    """Whether msgspec's error ``msg`` on ``size`` bytes means the document was cut short."""
    # msgspec says "truncated", except for a cut right after a number's "-" or ".",
    # which it calls malformed at the byte just past the end.
    if "truncated" in msg:
        return True
    at = _ERROR_BYTE.search(msg)
    return at is not None and int(at.group(1)) >= size


def close_truncated(path: str, data: bytes) -> bytes:
    """The document cut after its last complete trace event and closed, so that it decodes.

    Top-level keys before traceEvents are kept, those after it are lost; when the
    cut falls after the events' array has closed, every event is kept. The scan
    runs in numpy (a few hundred MB/s): quotes, then braces outside strings, then depth.
    Raises a TracekitError when no complete event survives the cut.
    """
    none_left = TracekitError(
        f"{path} ends in the middle of the trace before any complete event (the file is truncated): nothing to recover"
    )
    bare = data.lstrip()[:1] == b"["
    chars = np.frombuffer(data, dtype=np.uint8)
    quotes = string_quotes(chars)
    pos = structure_positions(chars)
    # A brace or bracket between an opening quote and its closing one is text.
    pos = pos[np.searchsorted(quotes, pos) % 2 == 0]
    depth = np.cumsum(DEPTH_STEP[chars[pos]], dtype=np.int64)  # depth after each of them
    # The events' array: the document itself (a bare list), or the '[' of traceEvents.
    opened, level = (0, 1) if bare else (trace_events_opening(data, quotes, pos, depth), 2)
    if opened < 0 or not len(pos):
        raise none_left
    after = slice(opened + 1, None)
    array_end = np.flatnonzero(depth[after] < level)
    if len(array_end):
        # The array is complete and the cut lies in a key after it: close the document there.
        end = int(pos[opened + 1 + array_end[0]])
        return data[: end + 1] + (b"" if bare else b"}")
    event_ends = np.flatnonzero((depth[after] == level) & (chars[pos[after]] == _CLOSE_BRACE))
    if not len(event_ends):
        raise none_left
    end = int(pos[opened + 1 + event_ends[-1]])
    return data[: end + 1] + (b"]" if bare else b"]}")


_QUOTE, _BACKSLASH, _CLOSE_BRACE = ord('"'), ord("\\"), ord("}")
# +1 for an opening bracket or brace, -1 for a closing one: cumulative sums give nesting depth.
DEPTH_STEP = np.zeros(256, dtype=np.int8)
DEPTH_STEP[[ord("{"), ord("[")]] = 1
DEPTH_STEP[[ord("}"), ord("]")]] = -1
# numpy passes over the bytes run in slices that stay in cache, ~2x faster than whole.
_SCAN_SLICE = 1 << 22


def string_quotes(chars: np.ndarray) -> np.ndarray:
    """Positions of the quotes that open and close strings (escaped ones left out), sorted."""
    quotes = _positions_of(chars, (_QUOTE,))
    slashes = _positions_of(chars, (_BACKSLASH,))
    if not len(slashes):
        return quotes
    # A quote is escaped when an odd run of backslashes ends right before it.
    run_start = np.ones(len(slashes), dtype=bool)
    run_start[1:] = np.diff(slashes) != 1
    starts = slashes[run_start]
    ends = slashes[np.append(run_start[1:], True)]
    odd_ends = ends[(ends - starts) % 2 == 0]
    if not len(odd_ends):
        return quotes
    at = np.minimum(np.searchsorted(odd_ends, quotes - 1), len(odd_ends) - 1)
    return quotes[odd_ends[at] != quotes - 1]


def structure_positions(chars: np.ndarray) -> np.ndarray:
    """Positions of every bracket and brace, sorted (those inside strings included: filter with ``string_quotes``)."""
    return _positions_of(chars, tuple(map(ord, "{}[]")))


def _positions_of(chars: np.ndarray, values: tuple[int, ...]) -> np.ndarray:
    found = []
    for s in range(0, len(chars), _SCAN_SLICE):
        part = chars[s : s + _SCAN_SLICE]
        mask = part == values[0]
        for v in values[1:]:
            mask |= part == v
        found.append(np.flatnonzero(mask) + s)
    return np.concatenate(found) if found else np.empty(0, dtype=np.int64)


_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


def trace_events_opening(data: bytes, quotes: np.ndarray, pos: np.ndarray, depth: np.ndarray) -> int:
    """Index in ``pos`` of the '[' that opens the top-level traceEvents array, or -1."""
    for m in _TRACE_EVENTS_KEY.finditer(data):
        q = int(np.searchsorted(quotes, m.start()))
        if q >= len(quotes) or quotes[q] != m.start() or q % 2:
            continue  # the text "traceEvents" inside some string
        opening = int(np.searchsorted(pos, m.end() - 1))
        at_top = opening < len(pos) and pos[opening] == m.end() - 1 and depth[opening] == 2
        if at_top:
            return opening
    return -1


def list_trace_files(directory: str) -> list[str]:
    """Trace files of a directory of per-rank traces, sorted; sidecars and other JSON excluded."""
    names = sorted(
        n for n in os.listdir(directory) if n.endswith(TRACE_EXTENSIONS) and not n.endswith(".tracekit.json")
    )
    return [os.path.join(directory, n) for n in names]
