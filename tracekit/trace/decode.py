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
import gzip
import os
import zlib
from typing import Any, Union

import msgspec

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


def read_bytes(path: str) -> bytes:
    """The decompressed bytes of a trace file, or a TracekitError saying what is wrong."""
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
    if data[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(data)
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as e:
            raise TracekitError(f"{path} is a truncated or corrupt gzip file ({e})") from None
    if data[:4] == b"\x28\xb5\x2f\xfd":
        try:
            import zstandard
        except ImportError:
            raise TracekitError(
                f"{path} is zstd-compressed; install the zstd extra (pip install 'tracekit[zstd]') or decompress it"
            ) from None
        # One decompressobj per frame: it stops at the end of a frame (multi-frame
        # files come from pzstd and concatenation), and says nothing about a
        # truncated one except by not reaching ``eof``.
        parts = []
        rest = data
        try:
            while rest:
                frame = zstandard.ZstdDecompressor().decompressobj()
                parts.append(frame.decompress(rest))
                if not frame.eof:
                    raise TracekitError(f"{path} is a truncated zstd file (it ends in the middle of a frame)")
                rest = frame.unused_data
        except zstandard.ZstdError as e:
            raise TracekitError(f"{path} is a truncated or corrupt zstd file ({e})") from None
        return b"".join(parts)
    return data


def decode(path: str, data: bytes, exact_ts: bool = False) -> tuple[list[Event], dict[str, Any]]:
    """(events, top-level metadata) of a trace document.

    ``exact_ts`` decodes timestamps as decimals; the reader asks for it only when
    float microseconds cannot hold the trace's nanoseconds.
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
        if "truncated" in msg:
            raise TracekitError(f"{path} ends in the middle of the JSON: the file looks truncated") from None
        raise TracekitError(f"{path} is not valid JSON ({msg})") from None
    return events, meta


def list_trace_files(directory: str) -> list[str]:
    """Trace files of a directory of per-rank traces, sorted; sidecars and other JSON excluded."""
    names = sorted(
        n
        for n in os.listdir(directory)
        if n.endswith(TRACE_EXTENSIONS) and not n.endswith(".tracekit.json")
    )
    return [os.path.join(directory, n) for n in names]
