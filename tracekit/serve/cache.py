"""The traces an MCP session asks about: paths confined to the allowed folders, each trace read
and analysed once and kept while it is unchanged.

An agent asks many small questions about the same few traces; reading and analysing is the slow
part (seconds to minutes for a big trace), so each analysis is kept, with the report's JSON
document and the per-phase kernel tables computed once, in a small LRU. The key is the file's
identity (real path, mtime, size: a rewritten trace is analysed again) and the options that
change the figures (model, GPU, tensor-parallel degree).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from tracekit.errors import TracekitError

DEFAULT_SIZE = 4  # analyses kept; a big trace's analysis holds its tables (hundreds of MB)


class Confinement:
    """The folders tools may read under. A path is resolved (``~``, relative to the server's
    folder, ``..`` and every symlink) before it is checked, so neither a link nor ``..`` leads out."""

    def __init__(self, roots: list[str], base: str | None = None):
        self.base = os.path.realpath(base or os.getcwd())
        self.roots = [os.path.realpath(os.path.join(self.base, os.path.expanduser(r))) for r in roots] or [self.base]

    def resolve(self, path: str, what: str = "path") -> str:
        """The real path of ``path``, or a TracekitError sentence when it is outside or absent."""
        if not isinstance(path, str) or not path.strip():
            raise TracekitError(f"{what} is empty: give a trace file or folder under {self._where()}")
        if "\0" in path:
            raise TracekitError(f"{what} {path!r} holds a NUL byte")
        real = os.path.realpath(os.path.join(self.base, os.path.expanduser(path)))
        if not self._inside(real):
            raise TracekitError(
                f"{path} is outside the folders this server may read ({self._where()}); "
                "start it with --allow for another folder"
            )
        if not os.path.exists(real):
            raise TracekitError(f"{path}: no such file or folder")
        if os.path.isdir(real):
            # A folder of ranks is read file by file: a member that links out is refused too.
            from tracekit.trace.decode import list_trace_files

            for f in list_trace_files(real):
                if not self._inside(os.path.realpath(f)):
                    raise TracekitError(
                        f"{path} holds {os.path.basename(f)}, a link to outside the folders this "
                        f"server may read ({self._where()})"
                    )
        return real

    def _inside(self, real: str) -> bool:
        return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in self.roots)

    def _where(self) -> str:
        return ", ".join(self.roots)


def identity(real: str) -> tuple:
    """What changes when a trace is rewritten: a file's mtime and size, a folder's listing of them."""
    try:
        if os.path.isdir(real):
            from tracekit.trace.decode import list_trace_files

            return tuple(
                (os.path.basename(f), os.stat(f).st_mtime_ns, os.stat(f).st_size)
                for f in sorted(list_trace_files(real))
            )
        st = os.stat(real)
    except OSError as e:
        raise TracekitError(f"{real}: cannot read it ({e.strerror or e})") from None
    return (st.st_mtime_ns, st.st_size)


@dataclass
class Entry:
    """One analysed trace: the analysis, its JSON document, and what the tools derive from it."""

    path: str
    analysis: Any
    doc: dict[str, Any]
    # None for the merged windows of a split (tracekit split): no single trace to project.
    trace: Any = None
    parts: Any = None
    match: Any = None
    derived: dict[Any, Any] = field(default_factory=dict)
    key: tuple = ()  # the cache key it was made under: what derived values of two entries are kept by
    lock: threading.Lock = field(default_factory=threading.Lock)

    def once(self, key: Any, make: Callable[[], Any]) -> Any:
        """``make()`` the first time ``key`` is asked for, the kept value after."""
        with self.lock:
            if key not in self.derived:
                self.derived[key] = make()
            return self.derived[key]


class AnalysisCache:
    """An LRU of analyses keyed by (real path, identity, options); thread-safe (the SDK runs
    each tool call on a worker thread), and a trace asked for twice at once is analysed once."""

    def __init__(self, confinement: Confinement, size: int = DEFAULT_SIZE):
        self.confinement = confinement
        self.size = max(1, size)
        self._entries: OrderedDict[tuple, Entry] = OrderedDict()
        self._building: dict[tuple, threading.Lock] = {}
        self._lock = threading.Lock()
        self.misses = 0  # analyses made (the benchmark and tests read it)

    def get(
        self, path: str, *, model: str | None = None, gpu: str | None = None, tp: int | None = None, what: str = "path"
    ) -> Entry:
        real = self.confinement.resolve(path, what)
        model_arg, model_key = self._model(model)
        if tp is not None and (not isinstance(tp, int) or tp < 1):
            raise TracekitError(f"tp {tp!r} is not a whole number above 0")
        if gpu is not None:
            from tracekit.specs import lookup

            lookup(None, gpu=gpu)  # a GPU not in the database fails before the slow read
        key = (real, identity(real), model_key, gpu, tp)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit
            building = self._building.setdefault(key, threading.Lock())
        with building:
            with self._lock:
                hit = self._entries.get(key)
                if hit is not None:
                    return hit
            try:
                entry = _analyse(real, model_arg, gpu, tp)
            finally:
                with self._lock:
                    self._building.pop(key, None)
            entry.key = key
            with self._lock:
                self.misses += 1
                self._entries[key] = entry
                while len(self._entries) > self.size:
                    self._entries.popitem(last=False)
            return entry

    def __len__(self) -> int:
        """Analyses held now."""
        return len(self._entries)

    def _model(self, model: str | None) -> tuple[Any, Any]:
        """(what ``analyze(model=...)`` gets, the cache key part). A model that names a file or
        folder is a path like any other: confined, and keyed by its identity."""
        if model is None or model == "":
            return None, None
        from tracekit.models import load_model

        candidate = os.path.join(self.confinement.base, os.path.expanduser(model))
        if os.path.exists(candidate) or os.sep in model or model.endswith(".json"):
            real = self.confinement.resolve(model, "model")
            return load_model(real), ("file", real, identity(real))
        return load_model(model), ("name", model)


def _analyse(real: str, model, gpu: str | None, tp: int | None) -> Entry:
    from tracekit.analysis.analyze import assemble, measure
    from tracekit.analysis.windows import analyse_windows, window_paths
    from tracekit.trace import read_trace

    options = dict(gpu=gpu, model=model, tp=tp)
    windows = window_paths(real) if os.path.isdir(real) else None
    if windows:
        analysis = analyse_windows(windows, read_trace, **options)
        return Entry(real, analysis, analysis.to_dict())
    trace = read_trace(real)
    # analyze() is measure + assemble; the parts are kept so that `project` re-prices them
    # without segmenting and pricing the trace again.
    parts, match = measure(trace, **options)
    analysis = assemble(trace, parts, match)
    return Entry(real, analysis, analysis.to_dict(), trace, parts, match)
