"""Reading traces: bytes in, one ``Trace`` out. Nothing downstream touches raw JSON."""

from tracekit.trace.model import Trace
from tracekit.trace.reader import read_trace

__all__ = ["Trace", "read_trace"]
