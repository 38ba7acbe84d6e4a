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
    if os.path.isfile(path) and not force:
        raise TracekitError(f"{path} already exists; pass --force to overwrite it or -o to choose another name")


def is_stream(path: str) -> bool:
    """An existing target that is not a regular file (``/dev/null``, a FIFO, a terminal):
    written directly, never replaced through a rename."""
    return os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path)


def refuse_folder(path: str | None) -> None:
    """A folder given where a file is needed (checked before the format is chosen from it)."""
    if path and os.path.isdir(path):
        raise TracekitError(f"{path} is a folder; give a file name, e.g. {os.path.join(path, 'report.html')}")


def check_output(path: str, *, force: bool, ours: bool) -> bool:
    """Refuse, before any slow work, an output that cannot be written: a folder, an existing
    file without ``force`` (unless tracekit named it itself, ``ours``: a rerun replaces its own
    default file), a missing parent (unless ``ours``: tracekit creates its ``reports/``), a
    parent that cannot be written (probed by creating a file there). Returns whether an
    existing file will be replaced."""
    if is_stream(path):
        return False
    refuse_folder(path)
    replacing = os.path.isfile(path)
    if replacing and not (force or ours):
        refuse_overwrite(path, force)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        if not ours:
            raise TracekitError(f"cannot write {path}: the folder {os.path.dirname(path) or '.'} does not exist")
        return replacing
    probe(folder, path)
    return replacing


def probe(folder: str, path: str) -> None:
    """Create and remove a file in ``folder``: the only sure test that ``path`` can be written
    there (permission bits lie for root, /proc and /sys accept no files at all)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tracekit-probe-")
    except OSError as e:
        raise TracekitError(f"cannot write {path}: {e.strerror or e} in {folder}") from None
    os.close(fd)
    os.unlink(tmp)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str, text: str | bytes, *, make_parent: bool = False) -> int:
    """Write ``text`` (or bytes, e.g. gzip) to ``path`` through a temporary file in the same folder and a
    rename, so a failure leaves either the old file or none, never half a report.
    A stream target (``/dev/null``) is written directly. Returns the number of bytes written."""
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    if is_stream(path):
        try:
            with open(path, "wb") as f:
                f.write(data)
        except OSError as e:
            raise TracekitError(f"cannot write {path}: {e.strerror or e}") from None
        return len(data)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        if not os.path.isdir(folder):
            if not make_parent:
                raise TracekitError(f"cannot write {path}: the folder {os.path.dirname(path) or '.'} does not exist")
            os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tracekit-", suffix=".tmp")
    except OSError as e:
        raise TracekitError(f"cannot write {path}: {e.strerror or e}") from None
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
