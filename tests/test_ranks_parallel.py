"""A folder of rank traces read by several processes (tracekit.trace.parallel): the same report
as reading the files one by one, the same one sentence for a bad file, and as many processes as
the folder, the machine and the user allow.

The folders are copies of real traces written as the ranks of one run: the A100 NCCL training
trace (each rank's collectives lengthened by its own amount, so the ranks differ and a known one
is the straggler) and the B300 SGLang decode trace (serving steps to align rank by rank).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from tests.conftest import real_trace_path
from tracekit import read_trace
from tracekit.cli import main
from tracekit.errors import TracekitError
from tracekit.trace import parallel

TABLES = ("kernels", "runtime", "cpu_ops", "annotations", "python")


def _rank_folder(folder, key: str, ranks: int, lengthen_us: float = 0.0):
    """``ranks`` copies of the real trace ``key`` as the ranks of one run; rank r's NCCL kernels
    are r x ``lengthen_us`` longer."""
    with gzip.open(real_trace_path(key), "rt") as f:
        doc = json.load(f)
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        d = json.loads(json.dumps(doc)) if r else doc
        d["distributedInfo"] = {**(doc.get("distributedInfo") or {}), "rank": r, "world_size": ranks}
        for e in d["traceEvents"]:
            if r and e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel" and "nccl" in e["name"].lower():
                e["dur"] += r * lengthen_us
        with gzip.open(folder / f"rank{r}.json.gz", "wt", compresslevel=1) as f:
            json.dump(d, f)
    return folder


@pytest.fixture(scope="module")
def nccl_ranks(tmp_path_factory):
    return _rank_folder(tmp_path_factory.mktemp("par") / "nccl", "a100_nccl", 3, lengthen_us=20.0)


@pytest.fixture(scope="module")
def serving_ranks(tmp_path_factory):
    return _rank_folder(tmp_path_factory.mktemp("par") / "sglang", "b300_qwen3_moe", 3)


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    # Every read here must really read: a cached trace or analysis would compare nothing.
    monkeypatch.setenv("TRACEKIT_NO_CACHE", "1")
    monkeypatch.delenv(parallel.JOBS_ENV, raising=False)


def _report_json(folder, *extra) -> dict:
    result = CliRunner().invoke(main, ["report", str(folder), "-f", "json", "-o", "-", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize("fixture,jobs", [("nccl_ranks", ("3",)), ("serving_ranks", ("2", "3"))])
def test_report_json_is_the_same_read_one_by_one_or_in_parallel(fixture, jobs, request):
    folder = request.getfixturevalue(fixture)
    one = _report_json(folder, "--jobs", "1")
    assert len(one["ranks"]) == len(os.listdir(folder)) and one["source"]["files"]
    for n in jobs:
        # (No field of the report times tracekit itself: the whole document must match.)
        assert _report_json(folder, "--jobs", n) == one, n
    assert parallel._chosen is None  # --jobs holds for its own command only
    if fixture == "nccl_ranks":
        # Rank 0's collectives are the shortest: the others waited in them for it.
        assert one["rank_summary"]["straggler"] == 0 and one["rank_summary"]["lost_ms"] > 0


def test_summary_compare_and_project_take_jobs(serving_ranks):
    folder = str(serving_ranks)
    for args in (
        ["summary", folder],
        ["compare", folder, folder, "-f", "json", "-o", "-"],
        ["project", folder, "--to", "h100-sxm", "-f", "json", "-o", "-"],
    ):
        one = CliRunner().invoke(main, [*args, "--jobs", "1"])
        two = CliRunner().invoke(main, [*args, "--jobs", "2"])
        assert one.exit_code == 0 == two.exit_code, (args, one.output, two.output)
        assert one.output == two.output, args


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_tables_are_equal_whichever_way_the_processes_start(nccl_ranks, monkeypatch, method):
    import multiprocessing

    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} here")
    monkeypatch.setattr(parallel, "_context", lambda: multiprocessing.get_context(method))
    one, many = read_trace(nccl_ranks, jobs=1), read_trace(nccl_ranks, jobs=3)
    for name in TABLES:
        a, b = getattr(one, name), getattr(many, name)
        assert list(a.dtypes) == list(b.dtypes) and a.equals(b), name
    for field in ("path", "devices", "distributed", "metadata", "lacks", "n_events", "n_bytes", "era", "sidecar"):
        assert getattr(one, field) == getattr(many, field), field


def _spoil(folder, *names):
    for n in names:
        (folder / n).write_bytes(b"this is not json")


def _errors(folder, jobs: str) -> tuple[int, str]:
    """(exit status, stderr) of ``tracekit report FOLDER --jobs N`` in a process of its own."""
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit", "report", str(folder), "-f", "json", "-o", os.devnull, "--jobs", jobs],
        capture_output=True,
        text=True,
        env={**os.environ, "TRACEKIT_NO_CACHE": "1"},
    )
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("bad", [("rank0.json.gz",), ("rank2.json.gz",), ("rank1.json.gz", "rank2.json.gz")])
def test_a_bad_rank_file_is_one_sentence_whoever_reads_it(nccl_ranks, tmp_path, bad):
    # With --jobs 2, rank0 is read by the pool and rank2 (the last) by the command's own process;
    # with two bad files the first in order is named, as a one-by-one read names it.
    folder = tmp_path / "run"
    folder.mkdir()
    for n in os.listdir(nccl_ranks):
        (folder / n).write_bytes((nccl_ranks / n).read_bytes())
    _spoil(folder, *bad)
    code1, err1 = _errors(folder, "1")
    code2, err2 = _errors(folder, "2")
    assert code1 == code2 == 2
    assert err2 == err1 and err1.count("\n") == 1 and "Traceback" not in err2
    assert bad[0] in err2 and "not JSON" in err2


_PARENT = os.getpid()


def _die(path, progress):
    if os.getpid() == _PARENT:
        time.sleep(0.2)  # (so that the pool, not this process, takes the first files)
    elif path.endswith("b"):
        os._exit(9)  # a killed process: no result, no exception
    return path


def _fail(path, progress):
    raise TracekitError(f"{path} is bad")


def _pid(path, progress):
    time.sleep(0.05)
    return path, os.getpid()


def test_a_process_that_dies_is_one_sentence(tmp_path, monkeypatch):
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("the test's functions reach the pool by fork")
    monkeypatch.setattr(parallel, "_context", lambda: multiprocessing.get_context("fork"))
    files = [str(tmp_path / n) for n in ("a", "b", "c", "d", "e", "f")]
    with pytest.raises(TracekitError, match="ended without a result .*--jobs 1"):
        parallel.read_files(_die, files, 3)
    with pytest.raises(TracekitError, match=r"/a is bad"):
        parallel.read_files(_fail, files, 3)
    assert parallel.read_files(_die, files[:1] + files[2:], 3) == files[:1] + files[2:]
    # Every process reads: the pool's take the first files, this one the last.
    got = parallel.read_files(_pid, files, 3)
    assert [p for p, _ in got] == files
    pids = [pid for _, pid in got]
    assert pids[0] != os.getpid() == pids[-1] and len(set(pids)) >= 2


def _big(path, progress):
    return path, bytes(300_000)  # more than a pipe holds at once


def test_reads_come_back_through_a_spool_that_is_then_gone(tmp_path, monkeypatch):
    """Bugs caught: a spooled read lost or swapped between files; the spool folder or its files
    left behind in the temporary folder; a spool that cannot be written (a full disk) failing the
    read instead of falling back on the pipe."""
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("the test's functions reach the pool by fork")
    monkeypatch.setattr(parallel, "_context", lambda: multiprocessing.get_context("fork"))
    spools = tmp_path / "tmp"
    spools.mkdir()
    monkeypatch.setenv("TMPDIR", str(spools))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR is read afresh
    files = [str(tmp_path / n) for n in ("a", "b", "c", "d", "e", "f")]
    got = parallel.read_files(_big, files, 3)
    assert [p for p, _ in got] == files and all(len(b) == 300_000 for _, b in got)
    assert list(spools.iterdir()) == []

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(parallel, "open", full, raising=False)  # the pool's processes inherit it by fork
    got = parallel.read_files(_big, files, 3)
    assert [p for p, _ in got] == files and all(len(b) == 300_000 for _, b in got)
    assert list(spools.iterdir()) == []


def test_how_many_processes(tmp_path, monkeypatch):
    small = [str(tmp_path / f"r{i}.json") for i in range(4)]
    for f in small:
        open(f, "w").write("{}")
    monkeypatch.setattr(parallel, "usable_cpus", lambda: 16)
    # A small folder reads here alone unless the user asks; asked, never more than its files.
    assert parallel.jobs_for(small) == 1
    assert parallel.jobs_for(small, 3) == 3 and parallel.jobs_for(small, 64) == 4 and parallel.jobs_for(small, 0) == 4
    assert parallel.jobs_for(small[:1], 8) == 1
    monkeypatch.setenv(parallel.JOBS_ENV, "2")
    assert parallel.jobs_for(small) == 2 and parallel.jobs_for(small, 1) == 1
    parallel.choose_jobs(3)
    try:
        assert parallel.jobs_for(small) == 3
    finally:
        parallel.choose_jobs(None)
    monkeypatch.setenv(parallel.JOBS_ENV, "many")
    with pytest.raises(TracekitError, match="TRACEKIT_JOBS must be a whole number"):
        parallel.jobs_for(small)
    monkeypatch.delenv(parallel.JOBS_ENV)
    # A large folder: one process per CPU, up to one per file, as memory allows.
    monkeypatch.setattr(parallel, "_json_bytes", lambda f: 1e9)
    assert parallel.jobs_for(small) == 4
    monkeypatch.setattr(parallel, "_memory_bytes", lambda: 8e9)  # a quarter: 2 GB, 0.6 GB a read
    assert parallel.jobs_for(small) == 4 and parallel.jobs_for(small * 4) == 4


def test_a_bad_jobs_value_is_a_usage_error(nccl_ranks, monkeypatch):
    result = CliRunner().invoke(main, ["report", str(nccl_ranks), "--jobs", "0", "-o", "-"])
    assert result.exit_code == 2 and "--jobs" in result.output
    monkeypatch.setenv(parallel.JOBS_ENV, "-1")
    result = CliRunner().invoke(main, ["report", str(nccl_ranks), "-f", "json", "-o", "-"])
    assert result.exit_code == 2 and "TRACEKIT_JOBS must be a whole number" in result.output


def test_a_daemonic_process_reads_alone(tmp_path, monkeypatch):
    import multiprocessing

    files = [str(tmp_path / f"r{i}.json") for i in range(4)]
    monkeypatch.setattr(multiprocessing.current_process(), "_config", {"daemon": True})
    assert parallel.jobs_for(files, 4) == 1
