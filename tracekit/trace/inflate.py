"""A trace file's decompressed bytes, as a stream of slices.

The reader never needs the whole decompressed text at once (``stream`` cuts it into
chunks of complete events), so gzip and zstd are inflated a slice at a time and the
compressed file is read a slice at a time too: memory holds one slice, not the JSON.

gzip goes through ISA-L (the ``isal`` package, the ``fast`` extra) when it is
installed: it inflates 2-3x faster than zlib with the same streaming API. zlib is
the fallback, with identical results.

The size guard (``limits.max_decompressed_bytes``) is applied as the slices come
out, so a compression bomb stops one slice after the limit.
"""

from __future__ import annotations

import zlib
from types import ModuleType
from typing import Iterator

from tracekit.errors import TracekitError
from tracekit.trace.limits import GZIP_MAGIC, ZSTD_MAGIC, too_big

_fast_zlib: ModuleType | None
try:  # ISA-L's inflate, when installed: same decompressobj API as zlib, faster.
    from isal import isal_zlib as _fast_zlib
except ImportError:  # pragma: no cover - exercised by the fallback test through monkeypatch
    _fast_zlib = None

# Which zlib implementation inflates gzip; a module attribute so tests can force the fallback.
ZLIB = _fast_zlib or zlib

# Default size of the slices handed on, in decompressed bytes: each becomes one chunk of
# decoded events, and the columns are made by a dozen passes over that chunk. At 1 MiB
# (a few thousand events) the chunk's objects stay in a core's L2 cache between passes;
# at 8 MiB every pass went back to memory, and decoding plus building columns took about 1.4x
# as long (`python benchmarks/bench_read.py --chunks`).
SLICE_BYTES = 1 << 20
# Compressed input is fed this much at a time: a call stopped by the output bound copies
# the input it did not reach (unconsumed_tail), so the input slice is kept small.
_IN_SLICE = 1 << 20
# zstd expands at most ~32,000x and zstandard's streaming object has no output bound,
# so its input goes in slices this small: at most ~64 MiB comes out per call.
_ZSTD_IN_SLICE = 2048


class Inflated:
    """Iterate for the decompressed slices of ``path``; afterwards ``cut`` says how the
    compressed stream ended early ("gzip stream ended early", ...) or is None, and
    ``total`` is the number of decompressed bytes."""

    def __init__(self, path: str, limit: int, slice_bytes: int = SLICE_BYTES, for_analysis: bool = True):
        self.path = path
        self.limit = limit
        self.for_analysis = for_analysis  # (for the guard's sentence: see limits.too_big)
        self.slice_bytes = max(1, int(slice_bytes))
        self.cut: str | None = None
        self.total = 0

    def __iter__(self) -> Iterator[bytes]:
        f = _open(self.path)
        with f:
            head = _read(self.path, f, self.slice_bytes)
            if not head:
                raise TracekitError(f"{self.path} is empty, not a trace")
            if head[:2] == GZIP_MAGIC:
                yield from self._gunzip(f, head)
            elif head[:4] == ZSTD_MAGIC:
                yield from self._unzstd(f, head)
            else:
                # Plain JSON is not guarded: its size is the file's, already on disk.
                while head:
                    self.total += len(head)
                    yield head
                    head = _read(self.path, f, self.slice_bytes)

    def _count(self, out: bytes) -> None:
        self.total += len(out)
        if self.total > self.limit:
            raise too_big(self.path, self.limit, self.for_analysis)

    def _gunzip(self, f, pending: bytes) -> Iterator[bytes]:
        """One or more gzip members; a truncated stream gives what it inflates to before the cut."""
        z = ZLIB
        member = z.decompressobj(16 + z.MAX_WBITS)
        member_start = 0  # file offset where the current member starts
        member_out = 0  # bytes the current member has inflated to so far
        try:
            while True:
                if not pending:
                    pending = _read(self.path, f, _IN_SLICE)
                    if not pending:
                        break
                out = member.decompress(pending, min(self.limit - self.total + 1, self.slice_bytes))
                pending = member.unconsumed_tail
                if out:
                    self._count(out)
                    member_out += len(out)
                    yield out
                if member.eof:
                    pending = self._next_member(f, member.unused_data)
                    if not pending:
                        return
                    member_start = f.tell() - len(pending)
                    member_out = 0
                    member = z.decompressobj(16 + z.MAX_WBITS)
            # The input ended before the member did: hand over what is still buffered.
            out = member.flush()
            if out:
                self._count(out)
                member_out += len(out)
                yield out
        except z.error as e:
            raise TracekitError(f"{self.path} is a corrupt gzip file ({e})") from None
        if z is not zlib:
            # ISA-L holds back the last few bytes of a cut stream that zlib hands over, and
            # what a cut file salvages must not depend on which is installed: zlib inflates
            # the cut member once more and gives the bytes past those already handed on.
            tail = self._zlib_tail(f, member_start, member_out)
            if tail:
                self._count(tail)
                yield tail
        if self.total == 0:
            raise TracekitError(f"{self.path} is a truncated gzip file that ends before any trace data")
        self.cut = "gzip stream ended early"

    def _zlib_tail(self, f, start: int, skip: int) -> bytes:
        """What zlib inflates the cut member at ``start`` to beyond its first ``skip`` bytes."""
        f.seek(start)
        member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        seen = 0
        tail: list[bytes] = []
        try:
            while data := _read(self.path, f, _IN_SLICE):
                while data:
                    out = member.decompress(data, self.slice_bytes)
                    data = member.unconsumed_tail
                    keep = out[max(0, skip - seen) :]
                    seen += len(out)
                    if keep:
                        tail.append(keep)
            tail.append(member.flush()[max(0, skip - seen) :])
        except zlib.error:
            return b""
        return b"".join(tail)

    def _next_member(self, f, rest: bytes) -> bytes:
        """The input that starts the next gzip member (b"" when none follows)."""
        # gzip and gzip.decompress accept zero padding between and after members.
        rest = rest.lstrip(b"\0")
        while not rest:
            rest = _read(self.path, f, _IN_SLICE)
            if not rest:
                return b""
            rest = rest.lstrip(b"\0")
        if len(rest) == 1:
            rest += _read(self.path, f, 1)
        if not GZIP_MAGIC.startswith(rest[:2]):
            raise TracekitError(
                f"{self.path} is a corrupt gzip file (data that is not gzip follows the compressed stream)"
            )
        return rest

    def _unzstd(self, f, pending: bytes) -> Iterator[bytes]:
        """One or more zstd frames; multi-frame files come from pzstd and concatenation."""
        try:
            import zstandard
        except ImportError:
            raise TracekitError(
                f"{self.path} is zstd-compressed; install the zstd extra (pip install 'tracekit[zstd]') or decompress it"
            ) from None
        # One decompressobj per frame: it stops at the end of a frame, and says nothing
        # about a truncated one except by not reaching ``eof``.
        frame = None
        parts: list[bytes] = []
        held = 0
        try:
            while True:
                if not pending:
                    pending = _read(self.path, f, _ZSTD_IN_SLICE << 8)
                    if not pending:
                        break
                if frame is None:
                    frame = zstandard.ZstdDecompressor().decompressobj()
                step, pending = pending[:_ZSTD_IN_SLICE], pending[_ZSTD_IN_SLICE:]
                out = frame.decompress(step)
                if out:
                    self._count(out)
                    parts.append(out)
                    held += len(out)
                    if held >= self.slice_bytes:
                        yield b"".join(parts)
                        parts, held = [], 0
                if frame.eof:
                    pending = frame.unused_data + pending
                    frame = None
        except zstandard.ZstdError as e:
            raise TracekitError(f"{self.path} is a corrupt zstd file ({e})") from None
        if parts:
            yield b"".join(parts)
        if frame is not None:
            if self.total == 0:
                raise TracekitError(f"{self.path} is a truncated zstd file that ends before any trace data")
            self.cut = "zstd stream ended early"


def _open(path: str):
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise TracekitError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TracekitError(f"{path} is a directory, not a trace file") from None
    except OSError as e:
        raise TracekitError(f"{path} cannot be read: {e.strerror or e}") from None


def _read(path: str, f, n: int) -> bytes:
    try:
        return f.read(n)
    except IsADirectoryError:
        raise TracekitError(f"{path} is a directory, not a trace file") from None
    except OSError as e:
        raise TracekitError(f"{path} cannot be read: {e.strerror or e}") from None


def read_all(path: str, limit: int) -> tuple[bytes, str | None]:
    """(the whole decompressed text, how its stream was cut or None): the non-streaming path."""
    inflated = Inflated(path, limit)
    data = b"".join(inflated)
    return data, inflated.cut
