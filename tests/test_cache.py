"""The cache for the second look (tracekit.cache, tracekit.trace.cache, tracekit.cli.cached).

What a cached read or document gives must equal what the uncached one gives, on real traces; an
entry that was damaged, edited or written by something else is never used, only rebuilt; and
``--no-cache`` leaves no file behind. Every test has an empty cache folder of its own
(conftest's ``_own_cache``).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from tests.conftest import real_trace_path
from tracekit import cache, read_trace
from tracekit.analysis.analyze import analyze
from tracekit.cli import main
from tracekit.trace import cache as tables
from tracekit.trace.columns import TABLES

# Text columns, ROCm, a serving trace with graphs, a pt1.9-era schema, a CPU-bound training trace.
ROUND_TRIP = ["a100_dlrm", "mi300x_extend", "rtx3090_vllm", "v100_pt19", "v100_ddp"]


class Reads:
    """``read_trace`` that counts its calls: a cache hit reads nothing."""

    def __init__(self):
        self.n = 0

    def __call__(self, path):
        self.n += 1
        return read_trace(path)


def _entries(kind: str | None = None) -> list[Path]:
    root = Path(cache.cache_dir()) / cache.FORMAT
    if not root.exists():
        return []
    return sorted(p for p in root.iterdir() if kind is None or p.name.startswith(kind + "-"))


def _assert_same_trace(got, want):
    for f in dataclasses.fields(want):
        if f.name in TABLES:
            pd.testing.assert_frame_equal(getattr(got, f.name), getattr(want, f.name), check_exact=True)
        else:
            assert getattr(got, f.name) == getattr(want, f.name), f.name


@pytest.fixture
def every_size(monkeypatch):
    """Keep traces of any size (the default leaves small ones to the JSON reader)."""
    monkeypatch.setenv(tables.MIN_ENV, "0")


@pytest.mark.parametrize("key", ROUND_TRIP)
def test_a_cached_read_gives_the_trace_and_the_analysis_of_the_uncached_one(key, every_size):
    path = str(real_trace_path(key))
    reads = Reads()
    first = tables.read_cached(path, reads)
    second = tables.read_cached(path, reads)
    assert reads.n == 1 and len(_entries("trace")) == 1
    want = read_trace(path)
    _assert_same_trace(first, want)
    _assert_same_trace(second, want)
    assert analyze(second).to_dict() == analyze(want).to_dict()


def test_a_folder_of_ranks_round_trips_and_takes_the_path_as_given(tmp_path, every_size):
    with gzip.open(real_trace_path("a100_nccl"), "rt") as f:
        doc = json.load(f)
    folder = tmp_path / "run"
    folder.mkdir()
    for rank in (0, 1):
        doc["distributedInfo"] = {**(doc.get("distributedInfo") or {}), "rank": rank, "world_size": 2}
        with gzip.open(folder / f"rank{rank}.json.gz", "wt") as f:
            json.dump(doc, f)
    reads = Reads()
    tables.read_cached(str(folder), reads)
    # The same files elsewhere (copied with their mtimes): the entry is keyed by content, and
    # the trace's paths are the ones given now.
    moved = tmp_path / "elsewhere"
    shutil.copytree(folder, moved)
    got = tables.read_cached(str(moved), reads)
    assert reads.n == 1
    want = read_trace(moved)
    _assert_same_trace(got, want)
    assert got.metadata["files"] == [str(moved / "rank0.json.gz"), str(moved / "rank1.json.gz")]
    assert analyze(got).to_dict() == analyze(want).to_dict()


def _damage_arrow(entry: Path):
    p = entry / "kernels.arrow"
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _edit_manifest(entry: Path):
    m = json.loads((entry / cache.MANIFEST).read_text())
    m["files"]["trace.json"]["sha256"] = "0" * 64
    (entry / cache.MANIFEST).write_text(json.dumps(m))


def _foreign_format(entry: Path):
    m = json.loads((entry / cache.MANIFEST).read_text())
    m["format"] = "tracekit-cache-0"
    (entry / cache.MANIFEST).write_text(json.dumps(m))


def _forged_garbage(entry: Path):
    """Garbage where a table was, with a manifest that vouches for it: verified, then unreadable."""
    p = entry / "kernels.arrow"
    p.write_bytes(b"not an arrow file" * 100)
    m = json.loads((entry / cache.MANIFEST).read_text())
    m["files"]["kernels.arrow"] = {"bytes": p.stat().st_size, "sha256": cache.file_digest(str(p)).split(":")[1]}
    (entry / cache.MANIFEST).write_text(json.dumps(m))


def _extra_file(entry: Path):
    (entry / "python.arrow.orig").write_bytes(b"x")


def _no_manifest(entry: Path):
    (entry / cache.MANIFEST).unlink()


@pytest.mark.parametrize(
    "damage", [_damage_arrow, _edit_manifest, _foreign_format, _forged_garbage, _extra_file, _no_manifest]
)
def test_a_damaged_or_foreign_entry_is_rebuilt_not_used(damage, every_size):
    path = str(real_trace_path("a100_nccl"))
    reads = Reads()
    tables.read_cached(path, reads)
    [entry] = _entries("trace")
    damage(entry)
    got = tables.read_cached(path, reads)
    assert reads.n == 2  # read again, not loaded from the damaged entry
    _assert_same_trace(got, read_trace(path))
    # ... and rebuilt whole: the next read is a hit again.
    [rebuilt] = _entries("trace")
    assert cache.lookup("trace", rebuilt.name.split("-", 1)[1]) is not None
    tables.read_cached(path, reads)
    assert reads.n == 2


def test_a_changed_file_is_read_again_even_with_its_old_size_and_mtime(tmp_path, every_size):
    # A copy that kept an old file's mtime and size (cp -p of another run): the digest tells.
    doc = json.loads(gzip.decompress(real_trace_path("b300_moe").read_bytes()))
    path = tmp_path / "t.json"
    path.write_text(json.dumps({**doc, "traceName": "aaaa"}))
    reads = Reads()
    assert tables.read_cached(str(path), reads).metadata["traceName"] == "aaaa"
    st = path.stat()
    path.write_text(json.dumps({**doc, "traceName": "bbbb"}))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert tables.read_cached(str(path), reads).metadata["traceName"] == "bbbb"
    assert reads.n == 2


def test_a_big_file_is_sampled_and_a_change_in_a_sampled_block_shows(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "FULL_HASH_BYTES", 4 * 2**20)
    p = tmp_path / "big.json"
    p.write_bytes(os.urandom(8 * 2**20))
    before = cache.file_digest(str(p))
    assert before.startswith("sampled:")
    st = p.stat()
    with open(p, "r+b") as f:
        f.write(b"X")  # the head is always sampled
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert cache.file_digest(str(p)) != before


def test_small_traces_are_left_to_the_reader():
    path = str(real_trace_path("a100_triton"))
    reads = Reads()
    tables.read_cached(path, reads)
    tables.read_cached(path, reads)
    assert reads.n == 2 and _entries() == []


def _summary(*args):
    r = CliRunner().invoke(main, ["summary", *args])
    assert r.exit_code == 0, r.output
    return r.stdout


def test_the_second_summary_prints_the_first_without_reading(monkeypatch, every_size):
    path = str(real_trace_path("h100_hf"))
    first = _summary(path)
    assert len(_entries("summary")) == 1 and len(_entries("trace")) == 1

    import tracekit.cli.summary as summary

    def boom(*a, **k):
        raise AssertionError("read and analysed again")

    with monkeypatch.context() as m:
        m.setattr(summary, "_summary", boom)
        assert _summary(path) == first
    assert _summary(path, "--no-cache") == first
    # Other options make another document (from the kept tables).
    assert _summary(path, "--top", "3") != first
    assert len(_entries("summary")) == 2 and len(_entries("trace")) == 1


def test_no_cache_writes_nothing(tmp_path, monkeypatch, every_size):
    path = str(real_trace_path("h100_hf"))
    out = tmp_path / "r.json"
    _summary(path, "--no-cache")
    r = CliRunner().invoke(main, ["report", path, "-o", str(out), "--no-cache"])
    assert r.exit_code == 0, r.output
    assert list(Path(cache.cache_dir()).rglob("*")) == []
    monkeypatch.setenv(cache.OFF_ENV, "1")
    _summary(path)
    assert list(Path(cache.cache_dir()).rglob("*")) == []


@pytest.mark.parametrize("fmt", ["json", "md"])
def test_a_report_from_the_kept_analysis_is_the_report(tmp_path, fmt, every_size):
    path = str(real_trace_path("mi300x_extend"))
    outs = []
    for i, extra in enumerate(([], [], ["--no-cache"])):
        out = tmp_path / f"r{i}.{fmt}"
        r = CliRunner().invoke(main, ["report", path, "-o", str(out), *extra])
        assert r.exit_code == 0, r.output
        outs.append(out.read_text())
    assert len(_entries("analysis")) == 1
    assert outs[0] == outs[1] == outs[2]


def test_an_html_report_from_the_kept_analysis_is_the_report(tmp_path, every_size):
    # In processes of their own: Bokeh numbers its objects per process, so two renderings in one
    # process differ by their ids; the first run analyses, the second loads the analysis.
    path = str(real_trace_path("mi300x_extend"))
    outs = []
    for i in range(2):
        out = tmp_path / f"r{i}.html"
        subprocess.run(
            [sys.executable, "-m", "tracekit", "report", path, "-o", str(out)], check=True, capture_output=True
        )
        outs.append(out.read_text())
    assert len(_entries("analysis")) == 1
    assert outs[0] == outs[1]


def test_an_option_naming_a_file_keys_on_the_file(tmp_path, monkeypatch):
    from tracekit.cli.cached import document_key

    monkeypatch.setattr("click.get_current_context", lambda silent=False: None)
    trace = str(real_trace_path("a100_triton"))
    spec = tmp_path / "spec.json"
    spec.write_text('{"name": "a"}')
    k1 = document_key("summary", [trace], {"spec_file": str(spec)})
    assert k1 == document_key("summary", [trace], {"spec_file": str(spec)})
    spec.write_text('{"name": "b"}')
    assert document_key("summary", [trace], {"spec_file": str(spec)}) != k1
    k2 = document_key("summary", [trace], {"spec_file": None})
    assert k2 != k1 and k2 != document_key("analysis", [trace], {"spec_file": None})
    monkeypatch.setenv("TRACEKIT_STRICT_BOOKS", "")  # a setting that changes what an analysis does
    assert document_key("summary", [trace], {"spec_file": None}) != k2


def test_the_cap_evicts_the_least_recently_used(monkeypatch):
    monkeypatch.setenv(cache.MAX_ENV, "0.0000045")  # 4.5 kB: three entries of ~1.24 kB, not four
    for i in range(3):
        assert cache.put_text("doc", f"k{i}", "x" * 1000)
        os.utime(Path(cache.cache_dir()) / cache.FORMAT / f"doc-k{i}" / cache.MANIFEST, (1000 + i, 1000 + i))
    assert cache.get_text("doc", "k0") == "x" * 1000  # used now: the newest
    assert cache.put_text("doc", "k3", "y" * 1000)
    assert [p.name for p in _entries("doc")] == ["doc-k0", "doc-k2", "doc-k3"]
    assert not cache.put_text("doc", "big", "z" * 10_000)  # one entry over the cap is not kept
    assert cache.get_text("doc", "big") is None


def test_a_failed_write_leaves_nothing(monkeypatch):
    def fail(p):
        raise OSError("disk full")

    assert not cache.store("doc", "k", {"a": fail})
    assert _entries() == []
    assert cache.get_text("doc", "k") is None


def test_where_the_cache_lives(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.DIR_ENV, str(tmp_path / "c"))
    assert cache.cache_dir() == str(tmp_path / "c")
    monkeypatch.delenv(cache.DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache.cache_dir() == str(tmp_path / "x" / "tracekit")


def test_without_pyarrow_reads_parse_and_documents_are_still_kept(monkeypatch, every_size):
    monkeypatch.setattr(tables, "_have_arrow", lambda: False)
    path = str(real_trace_path("a100_nccl"))
    reads = Reads()
    tables.read_cached(path, reads)
    tables.read_cached(path, reads)
    assert reads.n == 2 and _entries("trace") == []
    assert _summary(path) == _summary(path)
    assert len(_entries("summary")) == 1


@pytest.mark.parametrize("command", ["report", "summary", "compare", "project", "plan", "annotate"])
def test_every_command_that_reads_traces_takes_no_cache(command):
    r = CliRunner().invoke(main, [command, "--help"])
    assert r.exit_code == 0 and "--no-cache" in r.output


def test_the_key_lists_trace_files_as_the_reader_does():
    from tracekit.trace.decode import TRACE_EXTENSIONS

    assert cache.TRACE_EXTENSIONS == TRACE_EXTENSIONS


def test_a_rank_file_is_read_again_when_its_run_gains_a_rank(tmp_path, every_size):
    # No distributedInfo: the reader takes the rank from the name and the world size from the
    # run's files beside it; a report written beside it changes neither.
    doc = json.loads(gzip.decompress(real_trace_path("b300_moe").read_bytes()))
    doc.pop("distributedInfo", None)
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc))
    reads = Reads()
    assert tables.read_cached(str(path), reads).distributed.get("world_size") is None
    (tmp_path / "rank0-report.json").write_text("{}")
    tables.read_cached(str(path), reads)
    assert reads.n == 1
    shutil.copy(path, tmp_path / "rank1.json")
    assert tables.read_cached(str(path), reads).distributed["world_size"] == 2
    assert reads.n == 2
