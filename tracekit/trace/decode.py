"""Bytes -> typed events, fast.

A Kineto trace is one big JSON document. ``json.loads`` would build a dict per
event (hundreds of thousands of them) only for us to pick a dozen fields out of
each; instead msgspec decodes straight into small typed structs and skips every
field we do not name, which is where the speed comes from (see benchmarks/).

Only this module knows the JSON field names; ``reader`` turns the structs into
tables.
"""

from __future__ import annotations

import decimal
import math
import os
import re
import zlib
from typing import Any, Union

import msgspec
import numpy as np

from tracekit.errors import TracekitError


_ABSENT = msgspec.Raw(b"")


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
    input_dims: msgspec.Raw = msgspec.field(default=_ABSENT, name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=_ABSENT, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=_ABSENT, name="Concrete Inputs")
    # Kernel launch grid ([x, y, z] CTAs): the one shape-like fact a trace without
    # recorded shapes still has (GEMM grids grow with the tokens of a step). Raw, so a
    # malformed grid costs that kernel its grid, not the whole read.
    grid: msgspec.Raw = _ABSENT


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

    ts: decimal.Decimal = decimal.Decimal(0)


class FlowStart(msgspec.Struct, gc=False, frozen=True, tag_field="ph", tag="s"):
    """A flow start ("s"): only its category is kept, because it dates the schema
    (``async`` in PyTorch 1.9, ``async_cpu_to_gpu`` in 2022, ``ac2g`` since)."""

    cat: Union[str, None] = None


# Every other phase of the Chrome trace format (flow steps and ends, instants,
# metadata, counters, async and object events) decodes into an empty struct: a
# third of a typical trace's events are flows and instants, and skipping their
# fields is cheaper than materialising them only to drop them.
# (S, T, p and F are the deprecated async phases, still written by old tools.)
_OTHER_PHASES = "BEiIbneCftPNODMVvRc()STpF"
_SKIPPED = tuple(
    msgspec.defstruct(f"Skipped_{i}", [], tag_field="ph", tag=ph, gc=False, frozen=True)
    for i, ph in enumerate(_OTHER_PHASES)
)
AnyEvent = Union[(Event, FlowStart, *_SKIPPED)]  # type: ignore[valid-type]
AnyExactEvent = Union[(ExactEvent, FlowStart, *_SKIPPED)]  # type: ignore[valid-type]


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

TRACE_EXTENSIONS = (".json", ".json.gz", ".json.zst")


# The size guard. A deflate stream expands at most ~1000x and a zstd one ~30000x, so a
# small file can claim any amount of memory; the guard stops at a limit instead of
# letting the kernel kill the process. Default: half the machine's physical memory.
# Reading needs ~2.6x the JSON size in memory (benchmarks/bench_read.py), so a trace
# over half the memory could not be analysed anyway: the default never refuses a
# readable trace, yet stops a bomb while half the memory is still free. Where the
# memory size is unknown (no sysconf, e.g. Windows), 32 GB, as generous as a workstation.
MAX_SIZE_ENV = "TRACEKIT_MAX_DECOMPRESSED_GB"
_GB = 10**9
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_FALLBACK_LIMIT = 32 * _GB


def max_decompressed_bytes(max_bytes: int | None = None) -> int:
    """The decompressed-size limit in bytes: ``max_bytes``, else $TRACEKIT_MAX_DECOMPRESSED_GB, else the default."""
    if max_bytes is not None:
        if not _positive_finite(max_bytes):
            raise TracekitError(f"max_bytes must be a positive number of bytes, not {max_bytes!r}")
        return max(1, int(max_bytes))
    raw = os.environ.get(MAX_SIZE_ENV, "").strip()
    if raw:
        try:
            gb = float(raw)
        except ValueError:
            gb = math.nan
        if not _positive_finite(gb):
            raise TracekitError(f"{MAX_SIZE_ENV} must be a positive number of GB, not {raw!r}")
        return max(1, int(gb * _GB))
    return _default_limit()


def _positive_finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _default_limit() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (AttributeError, ValueError, OSError):
        return _FALLBACK_LIMIT


def _too_big(path: str, limit: int) -> TracekitError:
    return TracekitError(
        f"{path} decompresses to more than {limit / _GB:.3g} GB, the limit that guards against "
        f"compression bombs; set {MAX_SIZE_ENV} (a number of GB) to raise it"
    )


def read_bytes(path: str, max_bytes: int | None = None) -> tuple[bytes, str | None]:
    """(decompressed bytes of a trace file, how its stream was cut or None), or a TracekitError.

    A gzip or zstd stream that ends early (a profiler killed while flushing) gives
    what it decompresses to before the cut, with "gzip stream ended early" (or zstd);
    the JSON inside is then cut too, and ``close_truncated`` salvages its events.
    ``max_bytes`` caps the decompressed size (see ``max_decompressed_bytes``).
    """
    data = _file_bytes(path)
    if data[:2] == _GZIP_MAGIC:
        kind, unpack = "gzip", _gunzip
    elif data[:4] == _ZSTD_MAGIC:
        kind, unpack = "zstd", _unzstd
    else:
        # Plain JSON is not guarded: its size is the file's, already on disk and read.
        return data, None
    out, ended_early = unpack(path, data, max_decompressed_bytes(max_bytes))
    if not ended_early:
        return out, None
    if not out:
        raise TracekitError(f"{path} is a truncated {kind} file that ends before any trace data")
    return out, f"{kind} stream ended early"


def _file_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise TracekitError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TracekitError(f"{path} is a directory, not a trace file") from None
    except OSError as e:
        raise TracekitError(f"{path} cannot be read: {e.strerror or e}") from None
    if not data:
        raise TracekitError(f"{path} is empty, not a trace")
    return data


# Gzip output is taken at most this much per call, so the size guard sees a bomb one
# slice after the limit rather than when memory is full. It is large so that an
# ordinary trace comes out of one call as one bytes object: nothing to join, hence
# gzip.decompress's speed. Compressed input is fed in slices too, because a call cut
# short by the output bound copies the input it did not reach (unconsumed_tail).
_GZIP_OUT_SLICE = 256 << 20
_GZIP_IN_SLICE = 16 << 20
_ZERO_PADDING = re.compile(rb"\0*")


def _gunzip(path: str, data: bytes, limit: int) -> tuple[bytes, bool]:
    """(decompressed bytes, whether the stream ends early) of one or more gzip members.

    zlib's streaming object (rather than gzip.decompress) because it hands over what a
    truncated stream decompresses to instead of raising, and can stop at the limit.
    """
    parts: list[bytes] = []
    total = 0
    view = memoryview(data)
    pos = 0  # where the input not yet fed to zlib starts
    member = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending: Union[bytes, memoryview] = b""
    try:
        while True:
            if not pending:
                if pos >= len(data):
                    break
                pending = view[pos : pos + _GZIP_IN_SLICE]
                pos += len(pending)
            out = member.decompress(pending, min(limit - total + 1, _GZIP_OUT_SLICE))
            total += len(out)
            if total > limit:
                raise _too_big(path, limit)
            parts.append(out)
            pending = member.unconsumed_tail
            if member.eof:
                pos = _next_gzip_member(path, data, pos - len(member.unused_data))
                if pos >= len(data):
                    return b"".join(parts), False
                member = zlib.decompressobj(16 + zlib.MAX_WBITS)
    except zlib.error as e:
        raise TracekitError(f"{path} is a corrupt gzip file ({e})") from None
    return b"".join(parts), True


def _next_gzip_member(path: str, data: bytes, end: int) -> int:
    """Where the member after the one ending at ``end`` starts (len(data) when none does)."""
    # gzip and gzip.decompress accept zero padding between and after members.
    start = _ZERO_PADDING.match(data, end).end()
    rest = data[start : start + 2]
    if rest and not _GZIP_MAGIC.startswith(rest):
        raise TracekitError(f"{path} is a corrupt gzip file (data that is not gzip follows the compressed stream)")
    return start


# zstd expands at most ~32,000x (a 4-byte RLE block gives 128 KiB), and zstandard's
# streaming object has no output bound, so the input is fed in slices this small:
# at most ~64 MiB comes out per call, and the calls cost nothing measurable.
_ZSTD_IN_SLICE = 2048


def _unzstd(path: str, data: bytes, limit: int) -> tuple[bytes, bool]:
    """(decompressed bytes, whether the stream ends early) of one or more zstd frames."""
    try:
        import zstandard
    except ImportError:
        raise TracekitError(
            f"{path} is zstd-compressed; install the zstd extra (pip install 'tracekit[zstd]') or decompress it"
        ) from None
    # One decompressobj per frame: it stops at the end of a frame (multi-frame
    # files come from pzstd and concatenation), and says nothing about a
    # truncated one except by not reaching ``eof``.
    parts: list[bytes] = []
    total = 0
    view = memoryview(data)
    pos = 0
    frame = None
    try:
        while pos < len(data):
            if frame is None:
                frame = zstandard.ZstdDecompressor().decompressobj()
            chunk = view[pos : pos + _ZSTD_IN_SLICE]
            out = frame.decompress(chunk)
            total += len(out)
            if total > limit:
                raise _too_big(path, limit)
            parts.append(out)
            pos += len(chunk)
            if frame.eof:
                pos -= len(frame.unused_data)
                frame = None
    except zstandard.ZstdError as e:
        raise TracekitError(f"{path} is a corrupt zstd file ({e})") from None
    return b"".join(parts), frame is not None


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
        if _ends_early(msg, len(data)):
            raise TruncatedJSON(f"{path} ends in the middle of the JSON: the file looks truncated") from None
        raise TracekitError(f"{path} is not valid JSON ({msg})") from None
    return events, meta


_ERROR_BYTE = re.compile(r"\(byte (\d+)\)")


def _ends_early(msg: str, size: int) -> bool:
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
    quotes = _string_quotes(chars)
    pos = _structure_positions(chars)
    # A brace or bracket between an opening quote and its closing one is text.
    pos = pos[np.searchsorted(quotes, pos) % 2 == 0]
    depth = np.cumsum(_DEPTH_STEP[chars[pos]], dtype=np.int64)  # depth after each of them
    # The events' array: the document itself (a bare list), or the '[' of traceEvents.
    opened, level = (0, 1) if bare else (_trace_events_opening(data, quotes, pos, depth), 2)
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
_DEPTH_STEP = np.zeros(256, dtype=np.int8)
_DEPTH_STEP[[ord("{"), ord("[")]] = 1
_DEPTH_STEP[[ord("}"), ord("]")]] = -1
# numpy passes over the bytes run in slices that stay in cache, ~2x faster than whole.
_SCAN_SLICE = 1 << 22


def _string_quotes(chars: np.ndarray) -> np.ndarray:
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


def _structure_positions(chars: np.ndarray) -> np.ndarray:
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


def _trace_events_opening(data: bytes, quotes: np.ndarray, pos: np.ndarray, depth: np.ndarray) -> int:
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
        n
        for n in os.listdir(directory)
        if n.endswith(TRACE_EXTENSIONS) and not n.endswith(".tracekit.json")
    )
    return [os.path.join(directory, n) for n in names]
