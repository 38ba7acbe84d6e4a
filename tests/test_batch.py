"""``tracekit batch``: many traces into one table, on local processes and on a real Dask cluster.

One ``distributed.LocalCluster`` serves the whole module (starting one takes seconds); the
CLI reaches it as an existing cluster (``--dask tcp://...``), and ``--dask local`` starts its
own in one test. Traces are the small shared ones (skipped with the reason when absent).
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from conftest import ROOT, SHARED_TRACES, real_trace_path

from tracekit import read_trace
from tracekit.analysis import analyze
from tracekit.batch import COLUMNS, Fleet, analyse_path, expand, mark_outliers
from tracekit.batch.rows import error_row
from tracekit.cli import main
from tracekit.errors import TracekitError

SMALL = ("b300_moe", "a100_triton", "mi250_toy", "b300_qwen3_moe", "rtx4080_nanovllm")


def _invoke(*args):
    return CliRunner().invoke(main, ["batch", *map(str, args)], catch_exceptions=False)


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip(
        "distributed", reason="dask[distributed] is not installed (the test extra has it)"
    )
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
    ) as c:
        yield c.scheduler_address


@pytest.fixture()
def fleet_dir(tmp_path):
    """The small shared traces plus a file that is not a trace, in one folder."""
    for key in SMALL:
        shutil.copy(real_trace_path(key), tmp_path / real_trace_path(key).name)
    (tmp_path / "broken.json").write_text('{"traceEvents": [', encoding="utf-8")
    return tmp_path


def _rows(path):
    return json.loads(path.read_text(encoding="utf-8"))["rows"]


def test_dask_cluster_gives_one_row_per_trace_and_an_error_row(cluster, fleet_dir, tmp_path):
    out = tmp_path / "fleet.json"
    r = _invoke(fleet_dir, "--dask", cluster, "-o", out)
    assert r.exit_code == 1, r.output  # some rows are errors: the table is written, the status says so
    assert "the Dask cluster at tcp://" in r.output and "1 error(s)" in r.output
    rows = _rows(out)
    assert sorted(x["name"] for x in rows) == sorted([real_trace_path(k).name for k in SMALL] + ["broken.json"])
    bad = next(x for x in rows if x["name"] == "broken.json")
    assert bad["status"] == "error" and "broken.json" in bad["error"] and not bad["error"].startswith("internal")
    for x in rows:
        if x["name"] != "broken.json":
            assert x["status"] == "ok" and x["error"] is None and x["device"], x
            # One folder of unrelated traces: analysed file by file, and each row says why.
            assert "not as one run" in x["note"]
    # The row holds the analysis's own figures (not recomputed): compare with analyze().
    moe = next(x for x in rows if x["name"] == real_trace_path("b300_qwen3_moe").name)
    a = analyze(read_trace(real_trace_path("b300_qwen3_moe"))).to_dict()
    assert moe["decode_step_p50_ms"] == a["metrics"]["decode_step_ms"]["p50"]
    assert moe["decode_steps"] == a["phases"]["decode"]["steps"] and moe["run_kind"] == "inference"
    assert moe["top_finding"] == a["findings"][0]["text"]
    toy = next(x for x in rows if x["name"] == real_trace_path("mi250_toy").name)
    assert toy["run_kind"] == "training" and toy["kernel_ms"] == a_kernel_ms("mi250_toy")


def a_kernel_ms(key):
    return analyze(read_trace(real_trace_path(key))).to_dict()["overall"]["kernel_ms"]


def test_local_processes_write_csv_parquet_json_that_read_back(fleet_dir, tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (the test extra has it)")
    outs = [tmp_path / f"f.{e}" for e in ("csv", "parquet", "json")]
    r = _invoke(fleet_dir / "*.json.gz", fleet_dir / "broken.json", "-j", "2", *sum((["-o", o] for o in outs), []))
    assert r.exit_code == 1 and "2 local processes" in r.output, r.output
    csv, pq, js = pd.read_csv(outs[0]), pd.read_parquet(outs[1]), _rows(outs[2])
    assert list(csv.columns) == list(COLUMNS) == list(pq.columns)
    assert len(csv) == len(pq) == len(js) == len(SMALL) + 1
    assert list(csv["name"]) == list(pq["name"]) == [x["name"] for x in js]
    assert (csv["status"] == "error").sum() == 1 and (pq["status"] == "error").sum() == 1
    assert str(pq["decode_steps"].dtype) == "Int64"  # counts stay integers beside error rows' blanks
    ok = pq[pq["status"] == "ok"].set_index("name")
    for x in js:
        if x["status"] == "ok" and x["decode_step_p50_ms"] is not None:
            assert ok.loc[x["name"], "decode_step_p50_ms"] == pytest.approx(x["decode_step_p50_ms"])


def test_the_fleet_page_escapes_names_and_marks_an_outlier(tmp_path):
    src = real_trace_path("b300_moe")
    hostile = tmp_path / "<img src=x onerror=alert(1)>&.json.gz"
    shutil.copy(src, hostile)
    row, _ = analyse_path(str(hostile))
    assert row["status"] == "ok"
    # Five traces of one configuration; the fourth decodes 10x slower: an outlier by any rule.
    rows = [
        dict(
            row,
            name=f"night-{i}.json.gz",
            file=f"/n/night-{i}.json.gz",
            decode_step_p50_ms=v,
            recorded_at=f"2026-01-0{i + 1}T00:00:00Z",
        )
        for i, v in enumerate([10.0, 11.0, 10.5, 100.0, 9.8])
    ]
    rows.append(row)
    rows.append(error_row("/n/<script>bad</script>.json", "it is <b>not</b> a trace"))
    fleet = Fleet(rows)
    assert [r["outliers"] for r in rows[:5]] == ["", "", "", "decode_step_p50_ms", ""]
    from tracekit.report.fleet import FleetHtml

    html = FleetHtml(include_js=False).render(fleet)
    assert "<img src=x" not in html and "<script>bad" not in html and "<b>not</b>" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;&amp;.json.gz" in html and "it is &lt;b&gt;not&lt;/b&gt; a trace" in html
    for r in rows[:5]:
        assert r["name"] in html
    assert html.count(' outlier"') == 1 and 'data-outlier="1"' in html
    # The figure circles it too: the step-time chart holds an "outlier" glyph at 100 ms.
    charts = json.dumps(FleetHtml(include_js=False).view_model(fleet.to_dict())["chart_items"])
    assert '"outlier"' in charts and "100.0" in charts


def test_outliers_need_enough_values_and_skip_error_rows():
    rows = [dict(error_row("a", "x"), status="ok", decode_tokens_per_s=v) for v in (100.0, 101.0, 5.0)]
    mark_outliers(rows)
    assert all(r["outliers"] == "" for r in rows)  # three values: too few to call one an outlier
    rows.append(error_row("b", "broken"))
    rows.append(dict(error_row("c", "x"), status="ok", decode_tokens_per_s=99.0))
    mark_outliers(rows)
    assert rows[2]["outliers"] == "decode_tokens_per_s" and rows[3]["outliers"] is None


def test_globs_and_folders_expand(tmp_path):
    src = real_trace_path("a100_triton")
    (tmp_path / "a" / "b").mkdir(parents=True)
    shutil.copy(src, tmp_path / "one.json.gz")
    shutil.copy(src, tmp_path / "a" / "b" / "deep.json.gz")
    (tmp_path / "a" / "notes.txt").write_text("not a trace")
    items = expand([str(tmp_path / "*.json.gz"), str(tmp_path / "a"), str(tmp_path / "one.json.gz")])
    assert [i.path for i in items] == [str(tmp_path / "one.json.gz"), str(tmp_path / "a" / "b" / "deep.json.gz")]
    items = expand([str(tmp_path / "**" / "*.json.gz")])
    assert len(items) == 2


def test_no_match_and_unwritable_output_are_usage_errors(tmp_path):
    r = _invoke(tmp_path / "nothing-*.json.gz")
    assert r.exit_code == 2 and "matches no file or folder" in r.output and "Traceback" not in r.output
    r = _invoke(tmp_path / "missing.json.gz")
    assert r.exit_code == 2 and "no such file or folder" in r.output
    (tmp_path / "empty").mkdir()
    r = _invoke(tmp_path / "empty")
    assert r.exit_code == 2 and "no trace files" in r.output
    src = real_trace_path("a100_triton")
    r = _invoke(src, "-o", tmp_path / "no" / "such" / "fleet.csv")
    assert r.exit_code == 2 and "does not exist" in r.output
    r = _invoke(src, "-o", tmp_path / "fleet.xlsx")
    assert r.exit_code == 2 and "cannot tell" in r.output


def test_a_folder_of_one_runs_ranks_is_one_row(tmp_path):
    from test_runs import _as_rank

    run = tmp_path / "run"
    run.mkdir()
    src = real_trace_path("b300_moe")
    _as_rank(src, run / "rank0.json.gz", 0, 2)
    _as_rank(src, run / "rank1.json.gz", 1, 2, drop_last=1)
    shutil.copy(real_trace_path("a100_triton"), tmp_path / "single.json.gz")
    out = tmp_path / "f.json"
    r = _invoke(tmp_path, "-j", "2", "-o", out)
    assert r.exit_code == 0, r.output
    rows = _rows(out)
    assert [x["name"] for x in rows] == ["single.json.gz", "run"]
    assert rows[1]["files"] == 2 and rows[1]["status"] == "ok" and "ranks of one run" in rows[1]["note"]


def test_an_unexpected_exception_is_an_internal_error_row(monkeypatch):
    import tracekit.analysis

    def boom(*a, **k):
        raise KeyError("deviceProperties")

    monkeypatch.setattr(tracekit.analysis, "analyze", boom)
    row, key = analyse_path(str(real_trace_path("a100_triton")))
    assert row["status"] == "error" and row["error"] == "internal error: KeyError: 'deviceProperties'"
    assert key is not None  # it was read: only the analysis failed


def test_missing_extras_say_how_to_install(monkeypatch, tmp_path):
    src = real_trace_path("a100_triton")
    monkeypatch.setitem(sys.modules, "distributed", None)
    r = _invoke(src, "--dask", "local", "-o", tmp_path / "f.csv")
    assert r.exit_code == 2 and "pip install 'tracekit[batch]'" in r.output
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    r = _invoke(src, "-o", tmp_path / "f.parquet")
    assert r.exit_code == 2 and "Parquet needs pyarrow" in r.output
    assert not (tmp_path / "f.parquet").exists()


def test_unreachable_scheduler_is_one_sentence(tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    import tracekit.batch.executors as ex

    monkeypatch.setattr(ex, "CONNECT_TIMEOUT", "1s")
    r = _invoke(real_trace_path("a100_triton"), "--dask", "tcp://127.0.0.1:9", "-o", tmp_path / "f.csv")
    assert r.exit_code == 2 and "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in r.output


@pytest.mark.slow
def test_every_shared_trace_on_dask_local(tmp_path):
    """The issue's check: every trace in ../shared/traces, --dask local, one row each."""
    pytest.importorskip("distributed")
    if not SHARED_TRACES.exists():
        pytest.skip(f"{SHARED_TRACES} is absent")
    traces = sorted(p.name for p in SHARED_TRACES.glob("*.json.gz"))
    out = tmp_path / "all.csv"
    r = _invoke(SHARED_TRACES, "--dask", "local", "-j", "2", "-o", out)
    assert r.exit_code == 0, r.output
    import pandas as pd

    table = pd.read_csv(out)
    assert sorted(table["name"]) == traces and (table["status"] == "ok").all()
    assert (table["run_kind"] == "training").sum() >= 5


def _gz(path, doc):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(doc, f)


def test_the_tracekit_error_row_is_the_readers_sentence(tmp_path):
    _gz(tmp_path / "no-events.json.gz", {"traceEvents": []})
    row, key = analyse_path(str(tmp_path / "no-events.json.gz"))
    with pytest.raises(TracekitError) as e:
        read_trace(tmp_path / "no-events.json.gz")
    assert row["status"] == "error" and row["error"] == e.value.message and key is None


def test_the_fleet_page_renders_and_sorts_in_chromium(tmp_path):
    from test_report_browser import CHROMIUM, Chromium, _check_page, _shots, needs_browser  # noqa: F401

    if not CHROMIUM:
        pytest.skip("no Chromium installed (test_report_browser.py says where it looks)")
    row, _ = analyse_path(str(real_trace_path("b300_qwen3_moe")))
    rows = [
        dict(
            row,
            name=f"night-{i}.json.gz",
            decode_step_p50_ms=v,
            decode_tokens_per_s=1600.0 / v * 10,
            recorded_at=f"2026-01-0{i + 1}T00:00:00Z",
        )
        for i, v in enumerate([10.0, 11.0, 10.5, 100.0, 9.8])
    ]
    rows.append(error_row("/n/broken.json", "not a trace"))
    from tracekit.report.fleet import FleetHtml

    page = tmp_path / "fleet.html"
    page.write_text(FleetHtml().render(Fleet(rows)), encoding="utf-8")
    shot = _shots(tmp_path) / "fleet.png"
    order = (
        "document.querySelector('#tk-fleet th[data-key=decode_step_p50_ms] button').click(), "
        "Array.from(document.querySelectorAll('#tk-fleet tbody tr')).map(r => r.cells[0].textContent).join(',')"
    )
    with Chromium(CHROMIUM) as b:
        run = b.open(page, screenshot=shot, evaluate={"order": order})
    _check_page(run, 2, shot)
    # Ascending by decode step time; the error row (no value) sorts last.
    assert (
        run.evaluated["order"]
        == "night-4.json.gz,night-0.json.gz,night-2.json.gz,night-1.json.gz,night-3.json.gz,broken.json"
    )


def test_a_worker_that_dies_is_an_error_row_and_the_batch_goes_on(tmp_path):
    import os

    from tracekit.batch import Item, run_batch
    from tracekit.batch.executors import LocalProcesses

    class Dying(LocalProcesses):
        """Local processes where the worker given "kill.json" dies as an OOM-killed one would."""

        def submit(self, fn, *args, **kw):
            return (
                super().submit(os._exit, 9, **kw) if args[0].endswith("kill.json") else super().submit(fn, *args, **kw)
            )

    small = [str(real_trace_path(k)) for k in ("a100_triton", "mi250_toy")]
    (tmp_path / "kill.json").write_bytes(b" " * 100_000)  # the largest: it goes first, the others after the death
    ex = Dying(1)
    try:
        rows = run_batch([Item(small[0]), Item(str(tmp_path / "kill.json")), Item(small[1])], ex)
    finally:
        ex.close()
    assert [r["status"] for r in rows] == ["ok", "error", "ok"]
    assert "worker process analysing this trace died" in rows[1]["error"]


# --- time limits and rows that survive an interrupted batch (issue 23, item 3) ----------------


def _grown(src, dest, copies=20):
    """``src``'s complete events ``copies`` times, each copy shifted by the trace's span: a trace
    grown the way real runs grow (issue 23). Today its analysis never ends (the timeline's
    segment merging loops); once that is fixed it is simply a larger trace."""
    with gzip.open(src, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    lo, hi = min(e["ts"] for e in xs), max(e["ts"] + e.get("dur", 0) for e in xs)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") != "X"]
    doc["traceEvents"] += [{**e, "ts": e["ts"] + k * (hi - lo)} for k in range(copies) for e in xs]
    _gz(dest, doc)


GOOD = ("a100_triton", "mi250_toy", "b300_moe")


def _hung_dir(tmp_path, grown=False):
    """Three small good traces, a file that is not a trace, and ``stuck.json``: a FIFO that no one
    writes, so reading it blocks forever in the kernel, as a trace on a hung network mount does;
    nothing inside the worker can interrupt that, only ending its process can."""
    d = tmp_path / "in"
    d.mkdir()
    for key in GOOD:
        shutil.copy(real_trace_path(key), d / real_trace_path(key).name)
    (d / "broken.json").write_text('{"traceEvents": [', encoding="utf-8")
    os.mkfifo(d / "stuck.json")
    if grown:
        _grown(real_trace_path("mi300x_decode"), d / "grown.json.gz")
    return d


def _has_reader(fifo) -> bool:
    """Whether some process still has ``fifo`` open for reading (a worker stuck in it)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ENXIO:
            return False
        raise
    os.close(fd)  # the reader, if any, now reads end-of-file and its analysis fails: it goes
    return True


def _by_name(rows):
    return {r["name"]: r for r in rows}


def test_a_hung_trace_is_a_timeout_row_and_the_batch_goes_on(tmp_path):
    """Bug: a trace whose analysis never ends (a FIFO no one writes; the issue's grown trace, on
    which the timeline's merging loops) held its worker, and so the batch, forever, writing no
    row at all. Now each is a ``timeout`` row at its --timeout, its worker process is killed, and
    the good traces and the bad file have their rows."""
    d = _hung_dir(tmp_path, grown=True)
    out = tmp_path / "f.json"
    start = time.monotonic()
    r = _invoke(d, "--timeout", "3", "-j", "2", "-o", out)
    took = time.monotonic() - start
    assert r.exit_code == 1, r.output
    rows = _by_name(_rows(out))
    assert sorted(rows) == sorted(
        [real_trace_path(k).name for k in GOOD] + ["broken.json", "stuck.json", "grown.json.gz"]
    )
    for k in GOOD:
        assert rows[real_trace_path(k).name]["status"] == "ok"
    assert rows["broken.json"]["status"] == "error" and not rows["broken.json"]["error"].startswith("internal")
    stuck = rows["stuck.json"]
    assert stuck["status"] == "timeout" and stuck["seconds"] == 3
    assert stuck["error"] == "timed out: not analysed within 3 s (--timeout), so its worker process was killed"
    # Today the grown trace loops forever; once the timeline is fixed it is analysed in time.
    assert rows["grown.json.gz"]["status"] in ("timeout", "ok")
    assert not _has_reader(d / "stuck.json")  # the stuck worker is gone, not left behind
    # 6 traces on 2 workers, two of them stopped at 3 s: well within a minute even on a busy machine.
    assert took < 60, took
    assert "1 error(s), " in r.output and "timed out" in r.output


def test_dask_stops_a_hung_trace_and_its_worker_goes_on(cluster, tmp_path):
    """Bug: on Dask a hung trace kept its future pending forever (a running task cannot be
    interrupted); now its row is ``timeout``, the process stuck in it is killed (the stuck read
    goes with it) and the cluster analyses the rest."""
    d = _hung_dir(tmp_path)
    out = tmp_path / "f.csv"
    r = _invoke(d, "--dask", cluster, "--timeout", "3", "-o", out)
    assert r.exit_code == 1, r.output
    import pandas as pd

    rows = pd.read_csv(out).set_index("name")
    assert rows.loc["stuck.json", "status"] == "timeout"
    assert rows.loc["stuck.json", "error"] == (
        "timed out: not analysed within 3 s (--timeout), so its analysis process on the Dask worker was killed"
    )
    assert rows.loc["broken.json", "status"] == "error"
    assert (rows.loc[[real_trace_path(k).name for k in GOOD], "status"] == "ok").all()
    assert not _has_reader(d / "stuck.json")
    # The restarted cluster still works.
    r = _invoke(real_trace_path("a100_triton"), "--dask", cluster, "-o", tmp_path / "again.csv")
    assert r.exit_code == 0, r.output


def _spin(seconds):
    """Work that never yields: a pure-Python loop (as the timeline's merging one was)."""
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return n


def test_local_processes_kill_a_worker_stuck_in_python_and_go_on():
    """Bug: a future's timeout cannot stop a pool worker looping in Python; the worker stayed
    busy and its slot lost. Now the process is killed at the deadline and the next task runs."""
    from tracekit.batch.executors import LocalProcesses, TimedOut

    ex = LocalProcesses(1)
    try:
        start = time.monotonic()
        fut = ex.submit(_spin, 3600, timeout=1.0)
        done, rest = ex.wait_first({fut})
        assert done == {fut} and not rest and time.monotonic() - start < 30
        with pytest.raises(TimedOut) as e:
            ex.result(fut)
        assert e.value.limit_s == 1.0 and e.value.what == "its worker process was killed"
        fut = ex.submit(_spin, 0.01, timeout=30)
        ex.wait_first({fut})
        assert ex.result(fut) > 0
    finally:
        ex.close()


def test_the_default_time_limit_grows_with_the_file(tmp_path):
    """The default --timeout: 600 s plus 10 s per MB compressed (a JSON file's MB counts 1/20)."""
    from tracekit.batch import default_timeout

    (tmp_path / "a.json.gz").write_bytes(b"x" * 2_000_000)
    (tmp_path / "b.json").write_bytes(b"x" * 40_000_000)
    assert default_timeout([str(tmp_path / "a.json.gz")]) == 620.0
    assert default_timeout([str(tmp_path / "b.json")]) == 620.0
    assert default_timeout([str(tmp_path / "a.json.gz"), str(tmp_path / "b.json")]) == 640.0


def _rows(path) -> list:
    """The rows of a batch's JSON journal so far ([] while it cannot be read whole)."""
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("rows") or []
    except (OSError, ValueError):
        return []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_an_interrupted_batch_leaves_the_rows_it_finished(tmp_path, sig):
    """Bug: rows were written only when the whole batch ended, so a batch stopped (Ctrl-C, a CI
    job's SIGTERM, a kill) left nothing. Now each row reaches the CSV and JSON as it finishes:
    stopped while a trace hangs, the finished rows are there (and the page, which would look
    whole, is not written)."""
    d = _hung_dir(tmp_path)
    csv, js, page = tmp_path / "f.csv", tmp_path / "f.json", tmp_path / "f.html"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # The batch starts with Ctrl-C's default action, as from a terminal: a shell starts a
    # background job (a CI step run with &) with SIGINT ignored, and a process that inherits an
    # ignored SIGINT rightly keeps ignoring it, which would leave nothing to test here.
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit", "batch", str(d), "-j", "2", "-o", str(csv), "-o", str(js), "-o", str(page)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        want = len(GOOD) + 1  # the good traces and the bad file; stuck.json never finishes
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            # Both journals: each writes its row in turn, so the JSON may trail the CSV by a row.
            if (
                csv.exists()
                and len(csv.read_text(encoding="utf-8").splitlines()) == 1 + want
                and js.exists()
                and len(_rows(js)) == want
            ):
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[0]
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if sig == signal.SIGKILL:
            _has_reader(d / "stuck.json")  # its orphaned worker reads end-of-file and goes
    output = proc.communicate(timeout=60)[0]  # the workers shared its stdout: now closed
    import pandas as pd

    table = pd.read_csv(csv)
    doc = json.loads(js.read_text(encoding="utf-8"))  # whole JSON, even after a kill
    expected = sorted([real_trace_path(k).name for k in GOOD] + ["broken.json"])
    assert sorted(table["name"]) == sorted(r["name"] for r in doc["rows"]) == expected
    assert doc["complete"] is False and list(table.columns) == list(COLUMNS)
    assert not page.exists()
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        return
    assert proc.returncode == 128 + sig, output
    assert "interrupted after 4 of 5 trace(s): their rows are in " in output and "Traceback" not in output
    assert "not written: " + str(page) in output
    assert list(table["name"]) == expected  # rewritten in input order once stopped
    assert not _has_reader(d / "stuck.json")  # the stopped batch took its workers with it
