"""``tracekit batch``: many traces into one table, on local processes and on a real Dask cluster.

One ``distributed.LocalCluster`` serves the whole module (starting one takes seconds); the
CLI reaches it as an existing cluster (``--dask tcp://...``), and ``--dask local`` starts its
own in one test. Traces are the small shared ones (skipped with the reason when absent).
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys

import pytest
from click.testing import CliRunner
from conftest import SHARED_TRACES, real_trace_path

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
    distributed = pytest.importorskip("distributed", reason="dask[distributed] is not installed (the test extra has it)")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as c:
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
    rows = [dict(row, name=f"night-{i}.json.gz", file=f"/n/night-{i}.json.gz", decode_step_p50_ms=v,
                 recorded_at=f"2026-01-0{i + 1}T00:00:00Z") for i, v in enumerate([10.0, 11.0, 10.5, 100.0, 9.8])]
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
    rows = [dict(row, name=f"night-{i}.json.gz", decode_step_p50_ms=v, decode_tokens_per_s=1600.0 / v * 10,
                 recorded_at=f"2026-01-0{i + 1}T00:00:00Z") for i, v in enumerate([10.0, 11.0, 10.5, 100.0, 9.8])]
    rows.append(error_row("/n/broken.json", "not a trace"))
    from tracekit.report.fleet import FleetHtml

    page = tmp_path / "fleet.html"
    page.write_text(FleetHtml().render(Fleet(rows)), encoding="utf-8")
    shot = _shots(tmp_path) / "fleet.png"
    order = ("document.querySelector('#tk-fleet th[data-key=decode_step_p50_ms] button').click(), "
             "Array.from(document.querySelectorAll('#tk-fleet tbody tr')).map(r => r.cells[0].textContent).join(',')")
    with Chromium(CHROMIUM) as b:
        run = b.open(page, screenshot=shot, evaluate={"order": order})
    _check_page(run, 2, shot)
    # Ascending by decode step time; the error row (no value) sorts last.
    assert run.evaluated["order"] == "night-4.json.gz,night-0.json.gz,night-2.json.gz,night-1.json.gz,night-3.json.gz,broken.json"


def test_a_worker_that_dies_is_an_error_row_and_the_batch_goes_on(tmp_path):
    import os

    from tracekit.batch import Item, run_batch
    from tracekit.batch.executors import LocalProcesses

    class Dying(LocalProcesses):
        """Local processes where the worker given "kill.json" dies as an OOM-killed one would."""

        def submit(self, fn, *args):
            return super().submit(os._exit, 9) if args[0].endswith("kill.json") else super().submit(fn, *args)

    small = [str(real_trace_path(k)) for k in ("a100_triton", "mi250_toy")]
    (tmp_path / "kill.json").write_bytes(b" " * 100_000)  # the largest: it goes first, the others after the death
    ex = Dying(1)
    try:
        rows = run_batch([Item(small[0]), Item(str(tmp_path / "kill.json")), Item(small[1])], ex)
    finally:
        ex.close()
    assert [r["status"] for r in rows] == ["ok", "error", "ok"]
    assert "worker process analysing this trace died" in rows[1]["error"]
