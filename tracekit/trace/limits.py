"""The decompressed-size guard, and the magic bytes that say how a trace file is compressed.

A deflate stream expands at most ~1000x and a zstd one ~30000x, so a small file can
claim any amount of memory; the guard stops at a limit instead of letting the kernel
kill the process. Default: half the machine's physical memory. Since the reader
streams, its memory is the tables plus one chunk of text (about a third of the JSON
size for a real trace), not the JSON, so the default is conservative: a trace bigger
than half the memory reads fine once the limit is raised (set the variable below).
Where the memory size is unknown (no sysconf, e.g. Windows), 32 GB.
"""

from __future__ import annotations

import math
import os

from tracekit.errors import TracekitError

MAX_SIZE_ENV = "TRACEKIT_MAX_DECOMPRESSED_GB"
GB = 10**9
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_FALLBACK_LIMIT = 32 * GB


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
        return max(1, int(gb * GB))
    return _default_limit()


def _positive_finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _default_limit() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (AttributeError, ValueError, OSError):
        return _FALLBACK_LIMIT


def too_big(path: str, limit: int, for_analysis: bool = True) -> TracekitError:
    """The guard's sentence; ``for_analysis``: the trace is being read to analyse it, and one
    larger than memory can be split into windows instead (``tracekit split``)."""
    split = " (a trace larger than memory: cut it into windows with tracekit split)" if for_analysis else ""
    return TracekitError(
        f"{path} decompresses to more than {limit / GB:.3g} GB, the limit that guards against "
        f"compression bombs; set {MAX_SIZE_ENV} (a number of GB) to raise it{split}"
    )
