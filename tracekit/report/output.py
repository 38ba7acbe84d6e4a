"""Where a report goes: default names, and writing without ever leaving half a file.

Output names are derived from the trace's *file name* only (the path the user gave),
never from anything inside the trace, and are sanitised to ``[A-Za-z0-9._-]``, so a
default name can never leave the output folder.
"""

from __future__ import annotations

import os
import re
import tempfile

from tracekit.errors import TracekitError

DEFAULT_DIR = "reports"
_SUFFIXES = (".gz", ".zst", ".json", ".trace", ".pt")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def report_stem(trace_path: str) -> str:
    """``/x/tiny-bs1.pt.trace.json.gz`` -> ``tiny-bs1``; a folder of ranks -> its name."""
    base = os.path.basename(os.path.normpath(str(trace_path)))
    stem = base
    changed = True
    while changed:
        changed = False
        for suffix in _SUFFIXES:
            if stem.lower().endswith(suffix) and len(stem) > len(suffix):
                stem = stem[: -len(suffix)]
                changed = True
    stem = _UNSAFE.sub("_", stem).strip("._-")[:100]
    return stem or "report"


def default_output(trace_path: str, extension: str, folder: str = DEFAULT_DIR) -> str:
    return os.path.join(folder, report_stem(trace_path) + extension)


def refuse_overwrite(path: str, force: bool) -> None:
    if os.path.exists(path) and not force:
        raise TracekitError(f"{path} already exists; pass --force to overwrite it or -o to choose another name")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str, text: str, *, make_parent: bool = False) -> int:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a
    rename, so a failure leaves either the old file or none, never half a report.
    Returns the number of bytes written."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        if not make_parent:
            raise TracekitError(f"cannot write {path}: the folder {os.path.dirname(path) or '.'} does not exist")
        os.makedirs(folder, exist_ok=True)
    data = text.encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tracekit-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise TracekitError(f"cannot write {path}: {e.strerror or e}") from None
        raise
    return len(data)
