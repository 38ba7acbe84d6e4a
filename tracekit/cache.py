"""The second look: what reading and analysing a trace made, kept on disk and keyed by its inputs.

An entry is one folder under the cache directory: the files a caller wrote (Arrow tables, a
JSON document, a text) and ``manifest.json``, which names the entry's format, kind and key and
gives each file's size and SHA-256. The key is a SHA-256 over everything the entry was made
from: tracekit's code (version and the identity of every file of the package and its templates,
so an edited checkout misses), the identity of each input path (size, mtime and a content
digest) and the caller's options. An entry is written into a temporary folder and renamed into
place whole, so a reader never sees half of one. On the way out it is checked against its
manifest before anything in it is parsed; one that fails (truncated, edited, written by another
format or under another key) is deleted and rebuilt: an entry is never trusted, only verified.

The cache lives in $TRACEKIT_CACHE_DIR, else $XDG_CACHE_HOME/tracekit, else the platform's user
cache folder; $TRACEKIT_NO_CACHE=1 (or ``--no-cache``) neither reads nor writes it. Its size is
capped ($TRACEKIT_CACHE_MAX_GB, default 10, and never more than a quarter of the disk's free
space): the least recently used entries go first.

Only the standard library here: a cache hit must not pay for pandas (``tracekit summary``'s
second look is this module plus printing a text).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import sys
import time
from typing import Any, Callable

from tracekit import __version__
from tracekit.markers import SIDECAR_SUFFIX, sidecar_path_for

FORMAT = "tracekit-cache-1"  # bump when an entry's layout changes: older entries then miss
MANIFEST = "manifest.json"
DIR_ENV = "TRACEKIT_CACHE_DIR"
OFF_ENV = "TRACEKIT_NO_CACHE"
MAX_ENV = "TRACEKIT_CACHE_MAX_GB"
DEFAULT_MAX_BYTES = 10 * 10**9
# Files up to this size are hashed whole (SHA-256 runs at ~1 GB/s: 20 ms for a 23 MB gzip trace,
# a hundredth of reading it). Above it, the digest covers size, mtime and sampled blocks.
FULL_HASH_BYTES = 64 * 2**20
_EDGE = 2**20  # sampled digest: the first and last MiB ...
_BLOCK, _BLOCKS = 2**16, 64  # ... and 64 blocks of 64 KiB spread evenly between them
_STALE_TMP_S = 3600  # a temporary folder this old belongs to a writer that died
# The reader's (tracekit.trace.decode.TRACE_EXTENSIONS, which tests hold equal): spelled here so
# that a key needs no import of the reader, which brings pandas.
TRACE_EXTENSIONS = (".json", ".json.gz", ".json.zst")


def disabled() -> bool:
    return os.environ.get(OFF_ENV, "").strip() not in ("", "0")


def cache_dir() -> str:
    """Where entries live (not created here)."""
    d = os.environ.get(DIR_ENV, "").strip()
    if d:
        return os.path.expanduser(d)
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    if xdg:
        return os.path.join(xdg, "tracekit")
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return os.path.join(os.environ["LOCALAPPDATA"], "tracekit", "Cache")
    if sys.platform == "darwin":
        return os.path.join(os.path.expanduser("~"), "Library", "Caches", "tracekit")
    return os.path.join(os.path.expanduser("~"), ".cache", "tracekit")


def _root() -> str:
    return os.path.join(cache_dir(), FORMAT)


# --- keys ------------------------------------------------------------------------------------


_DIGESTS: dict[tuple, str] = {}


def file_digest(path: str) -> str:
    """SHA-256 of a file's content, or for a file over ``FULL_HASH_BYTES`` of its size, mtime and
    sampled blocks (see ``path_identity`` for why that is enough). Kept for the process while the
    file's stat is unchanged: a command asks for a trace's key up to three times (its document,
    its tables, and after the read), and any write sets ctime, which no tool can set back."""
    st = os.stat(path)
    seen = (os.path.abspath(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, FULL_HASH_BYTES)
    if seen not in _DIGESTS:
        _DIGESTS[seen] = _digest(path, st)
    return _DIGESTS[seen]


def _digest(path: str, st: os.stat_result) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if st.st_size <= FULL_HASH_BYTES:
            while chunk := f.read(2**20):
                h.update(chunk)
            return "sha256:" + h.hexdigest()
        h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
        step = (st.st_size - 2 * _EDGE) // (_BLOCKS + 1)
        for offset, n in [
            (0, _EDGE),
            *(((i + 1) * step + _EDGE, _BLOCK) for i in range(_BLOCKS)),
            (st.st_size - _EDGE, _EDGE),
        ]:
            f.seek(offset)
            h.update(f.read(n))
    return "sampled:" + h.hexdigest()


def _file_identity(path: str) -> list:
    st = os.stat(path)
    return [os.path.basename(path), st.st_size, st.st_mtime_ns, file_digest(path)]


def path_identity(path: str) -> list:
    """What a trace path's read depends on, as JSON: for a file, its name, size, mtime_ns and
    content digest, its collect sidecar's, and the rank its name gives (counting the ranks of the
    files beside it, as the reader does); for a folder, the same for every file in it.

    A rewritten file has a new mtime (every write sets it) and almost always a new size; the
    digest is the check for a copy that kept an old file's mtime and size (``cp -p``, ``rsync
    -t``). Files up to ``FULL_HASH_BYTES`` are hashed whole. A larger trace's head
    (deviceProperties, the first events' timestamps), tail (the last events,
    ``baseTimeNanoseconds``) and blocks of events spread through it differ between any two runs
    (timestamps are absolute and every ID grows), compressed or not, so the digest of those ~6 MiB
    differs too, where hashing all of a multi-GB file would cost a tenth of reading it."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if os.path.isfile(os.path.join(path, n)))
        return ["folder", [_file_identity(os.path.join(path, n)) for n in names]]
    from tracekit.frameworks import rank_from_path

    side = sidecar_path_for(path)
    # What the reader takes from the file's name and its neighbours' (a per-rank file's rank and
    # world size), not the neighbours themselves: a report written beside the trace changes nothing.
    siblings = sorted(
        n for n in os.listdir(os.path.dirname(path)) if n.endswith(TRACE_EXTENSIONS) and not n.endswith(SIDECAR_SUFFIX)
    )
    return [
        "file",
        _file_identity(path),
        _file_identity(side) if os.path.isfile(side) else None,
        rank_from_path(path, siblings),
    ]


@functools.lru_cache(maxsize=1)
def code_identity() -> str:
    """tracekit's version and the size and mtime of every file of the package and its templates,
    and where its main dependencies are installed and when: an edited checkout, a reinstall or
    another pandas makes new keys (the version alone stays put while a checkout changes)."""
    import importlib.util

    package = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256(f"{__version__} {sys.version}".encode())
    for top in (package, os.path.join(os.path.dirname(package), "templates")):
        for folder, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".pyc", ".pyo")):
                    continue
                p = os.path.join(folder, name)
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                h.update(f"{os.path.relpath(p, top)} {st.st_size} {st.st_mtime_ns}\n".encode())
    for dep in ("numpy", "pandas", "pyarrow", "msgspec", "jinja2"):
        origin: str | None = None
        try:
            spec = importlib.util.find_spec(dep)  # finds without importing
            origin = spec.origin if spec else None
            dep_st = os.stat(origin) if origin else None
        except (ImportError, ValueError, OSError):
            dep_st = None
        h.update(
            f"{dep} {origin if dep_st else None} {dep_st.st_size if dep_st else 0} "
            f"{dep_st.st_mtime_ns if dep_st else 0}\n".encode()
        )
    return h.hexdigest()


def make_key(kind: str, *parts: Any) -> str:
    """The key of an entry of ``kind`` made from ``parts`` (JSON values) by this tracekit."""
    text = json.dumps([FORMAT, kind, code_identity(), *parts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def env_settings() -> dict[str, str]:
    """The TRACEKIT_* variables that can change a result (all but the cache's own)."""
    return {
        k: v
        for k, v in sorted(os.environ.items())
        if k.startswith("TRACEKIT_") and k not in (DIR_ENV, OFF_ENV, MAX_ENV)
    }


# --- entries ---------------------------------------------------------------------------------


def _folder(kind: str, key: str) -> str:
    return os.path.join(_root(), f"{kind}-{key}")


def lookup(kind: str, key: str) -> tuple[str, dict] | None:
    """(folder, manifest) of a verified entry, or None. An entry that fails verification is
    deleted, so the caller rebuilds it."""
    if disabled():
        return None
    folder = _folder(kind, key)
    if not os.path.lexists(folder):
        return None
    manifest = _verified(folder, kind, key)
    if manifest is None:
        discard(folder)
        return None
    try:
        os.utime(os.path.join(folder, MANIFEST))  # last used: what eviction goes by
    except OSError:
        pass
    return folder, manifest


def _verified(folder: str, kind: str, key: str) -> dict | None:
    try:
        if os.path.islink(folder) or not os.path.isdir(folder):
            return None
        with open(os.path.join(folder, MANIFEST), "rb") as f:
            manifest = json.loads(f.read(2**20))
        files = manifest["files"]
        if (
            (manifest.get("format"), manifest.get("kind"), manifest.get("key")) != (FORMAT, kind, key)
            or not isinstance(files, dict)
            or set(os.listdir(folder)) != {MANIFEST, *files}
        ):
            return None
        for name, want in files.items():
            p = os.path.join(folder, name)
            if os.path.islink(p) or os.path.getsize(p) != want["bytes"] or _sha256(p) != want["sha256"]:
                return None
        return manifest
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(2**20):
            h.update(chunk)
    return h.hexdigest()


def discard(folder: str) -> None:
    """Delete an entry (or a link where one should be), ignoring what cannot be deleted."""
    if os.path.islink(folder) or os.path.isfile(folder):
        try:
            os.unlink(folder)
        except OSError:
            pass
    else:
        shutil.rmtree(folder, ignore_errors=True)


def store(kind: str, key: str, writers: dict[str, Callable[[str], None]], info: dict | None = None) -> bool:
    """Write an entry: ``writers`` maps each file name to a function writing that file's path.
    False (and nothing left behind) when the cache is off, the entry would pass the size cap,
    or anything fails: the cache never makes a command fail."""
    if disabled():
        return False
    root = _root()
    tmp = os.path.join(root, f"tmp-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.makedirs(tmp)
        for name, write in writers.items():
            write(os.path.join(tmp, name))
        sizes = {n: os.path.getsize(os.path.join(tmp, n)) for n in writers}
        files = {n: {"bytes": sizes[n], "sha256": _sha256(os.path.join(tmp, n))} for n in writers}
        if sum(sizes.values()) > max_bytes():
            discard(tmp)
            return False
        manifest = {
            "format": FORMAT,
            "kind": kind,
            "key": key,
            "files": files,
            "info": info or {},
            "tracekit": __version__,
            "created": time.time(),
        }
        with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as f:
            json.dump(manifest, f)
        final = _folder(kind, key)
        if os.path.lexists(final):
            if _verified(final, kind, key) is not None:  # a racing writer's, made of the same inputs
                discard(tmp)
                return True
            discard(final)
        os.rename(tmp, final)
    except Exception:  # noqa: BLE001  (a full disk, a read-only folder, a table Arrow cannot hold)
        discard(tmp)
        return False
    evict(root)
    return True


def max_bytes(root: str | None = None) -> int:
    """The size cap: $TRACEKIT_CACHE_MAX_GB, else 10 GB but at most a quarter of the free disk."""
    raw = os.environ.get(MAX_ENV, "").strip()
    if raw:
        try:
            return max(0, int(float(raw) * 1e9))
        except ValueError:
            pass
    try:
        free = shutil.disk_usage(root or cache_dir()).free
    except OSError:
        return DEFAULT_MAX_BYTES
    return min(DEFAULT_MAX_BYTES, free // 4)


def entries(root: str | None = None) -> list[tuple[float, int, str]]:
    """(last used, bytes, folder) of every entry, and the leftovers of dead writers removed."""
    root = root or _root()
    out: list[tuple[float, int, str]] = []
    try:
        names = os.listdir(root)
    except OSError:
        return out
    now = time.time()
    for name in names:
        folder = os.path.join(root, name)
        try:
            if name.startswith("tmp-"):
                if now - os.stat(folder).st_mtime > _STALE_TMP_S:
                    discard(folder)
                continue
            used = os.stat(os.path.join(folder, MANIFEST)).st_mtime
            size = sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))
        except OSError:
            continue
        out.append((used, size, folder))
    return out


def evict(root: str | None = None) -> None:
    """Delete the least recently used entries until the cache is within its cap."""
    found = sorted(entries(root))
    total = sum(size for _, size, _ in found)
    cap = max_bytes(root)
    for _, size, folder in found:
        if total <= cap:
            break
        discard(folder)
        total -= size


# --- small documents -------------------------------------------------------------------------


def get_text(kind: str, key: str) -> str | None:
    """The text of a ``put_text`` entry, verified."""
    hit = lookup(kind, key)
    if hit is None:
        return None
    try:
        with open(os.path.join(hit[0], "document"), encoding="utf-8", newline="") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        discard(hit[0])
        return None


def put_text(kind: str, key: str, text: str, info: dict | None = None) -> bool:
    def write(p: str) -> None:
        with open(p, "w", encoding="utf-8", newline="") as f:
            f.write(text)

    return store(kind, key, {"document": write}, info)
