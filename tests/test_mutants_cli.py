"""Tests written for the survivors of the mutation campaign's sample of tracekit/cli (seed 53,
``--lists-only``): each docstring names the bug its mutant stands for; the expected values come
from the sample traces and their sidecars, the CLI's --help and docs/, and hand arithmetic.

The conftest gives every test an empty cache folder of its own (TRACEKIT_CACHE_DIR), so nothing
here reads or fills the user's cache; every output is written under ``tmp_path``."""

from __future__ import annotations

import csv
import errno
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from conftest import ROOT, SAMPLE_TRACES

from tracekit.cli import main

BS1 = SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"
BS8 = SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz"
SIDECAR = SAMPLE_TRACES / "tiny-bs1.tracekit.json"


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _sidecar() -> dict:
    return json.loads(SIDECAR.read_text(encoding="utf-8"))


# --- tracekit batch ------------------------------------------------------------------------


def test_batch_counts_the_traces_it_analysed(tmp_path):
    """catches: `tracekit batch` miscounting the traces it analysed in its closing line (cli/batch.py
    ``len(rows) - errors - timeouts`` -> ``len(rows) & errors - timeouts``). Two sample traces and a
    file that is not a trace: 3 rows, the CSV's statuses say 2 ok and 1 error, so "2 analysed,
    1 error(s)", and exit status 1 (docs/batch.md: some rows are errors)."""
    broken = tmp_path / "broken.json"
    broken.write_text('{"traceEvents": [', encoding="utf-8")
    out = tmp_path / "fleet.csv"
    result = _invoke("batch", BS1, BS8, broken, "-j", "1", "-o", out)
    assert result.exit_code == 1, result.output
    with open(out, encoding="utf-8", newline="") as f:
        statuses = [row["status"] for row in csv.DictReader(f)]
    assert sorted(statuses) == ["error", "ok", "ok"]
    assert "3 trace(s) on " in result.output
    assert ": 2 analysed, 1 error(s)" in result.output


def _release(fifo) -> None:
    """Open ``fifo`` for writing and close it, so that a worker still stuck reading it reads
    end-of-file and goes (no-op when no one reads it)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ENXIO:
            return
        raise
    os.close(fd)


@pytest.fixture(scope="module")
def stopped_batch(tmp_path_factory):
    """A batch of one sample trace and a FIFO no one writes (its read blocks, as on a hung mount),
    written only to two HTML pages in two folders, stopped by SIGTERM once the trace's row is kept.
    Returns (exit status, output, first page, second page)."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("os.mkfifo is not available here (needed for a trace that never finishes)")
    base = tmp_path_factory.mktemp("stopped")
    folder = base / "in"
    folder.mkdir()
    shutil.copy(BS1, folder / BS1.name)
    fifo = folder / "stuck.json"
    os.mkfifo(fifo)
    first, second = base / "one" / "fleet.html", base / "two" / "other.html"
    first.parent.mkdir()
    second.parent.mkdir()
    # docs/batch.md: with only HTML or Parquet asked for, rows go to NAME.partial.csv beside the first.
    partial = first.parent / "fleet.partial.csv"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "TRACEKIT_CACHE_DIR": str(base / "cache"),
    }
    cmd = [sys.executable, "-m", "tracekit", "batch", str(folder), "-j", "2", "-o", str(first), "-o", str(second)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        kept = (partial, second.parent / "other.partial.csv")
        while time.monotonic() < deadline and proc.poll() is None:
            if any(p.exists() and len(p.read_text(encoding="utf-8").splitlines()) >= 2 for p in kept):
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()[0]
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _release(fifo)
    return proc.returncode, output, first, second


def test_a_stopped_batch_says_its_one_row_is_kept(stopped_batch):
    """catches: a batch stopped after one trace saying "their rows are in" (cli/batch.py
    ``rows != 1`` -> ``rows != 2`` in the interrupted message): one finished row is "its row is"."""
    code, output, first, _ = stopped_batch
    assert code == 128 + signal.SIGTERM, output  # docs/batch.md: 143 when stopped by SIGTERM
    assert "interrupted after 1 of 2 trace(s): its row is in " in output
    assert "their rows are" not in output


def test_a_stopped_batch_keeps_its_rows_beside_the_first_output(stopped_batch):
    """catches: the rows of an HTML-only batch kept beside the last output instead of the first
    (cli/batch.py ``journal_path(files[0][1])`` -> ``files[-1][1]``). docs/batch.md: they go to
    NAME.partial.csv beside the first of the outputs; the pages, which would look whole, are not written."""
    _, output, first, second = stopped_batch
    partial = first.parent / "fleet.partial.csv"
    assert f"its row is in {partial};" in output
    with open(partial, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["name"] for r in rows] == [BS1.name] and rows[0]["status"] == "ok"
    assert sorted(os.listdir(second.parent)) == [] and not first.exists()


# --- --no-cache rides along on every command that reads traces -----------------------------


def test_plan_takes_no_cache(tmp_path):
    """catches: `--no-cache` passed on to a command as an argument it does not take (cli/cached.py
    ``expose_value=False`` -> ``True``): `tracekit plan` (whose --help lists --no-cache) failed with a
    TypeError before doing anything. It sizes the sample run and writes its report."""
    out = tmp_path / "plan.md"
    args = ["plan", BS1, "--isl", "64", "--osl", "16", "--rate", "1", "--ttft-slo", "500ms", "--tpot-slo", "50ms"]
    result = _invoke(*args, "-o", out, "--no-cache")
    assert result.exit_code == 0, result.output
    assert out.exists() and out.stat().st_size > 0
    # A Markdown plan is read where it is; only an HTML page is sent to a browser.
    assert f"next: read it ({out})" in result.output and "browser" not in result.output
    page = tmp_path / "plan.html"
    result = _invoke(*args, "-o", page, "--no-cache")
    assert result.exit_code == 0 and f"next: open it in a browser ({page})" in result.output


# --- tracekit collect's closing lines (summary_lines of the sidecar it wrote) ---------------


def test_collects_summary_abbreviates_the_sidecars_parameter_count():
    """catches: the parameter count printed in full (cli/collect.py _count ``n >= div`` ->
    ``n is div``, never true for an int against a float). The sample sidecar's model has
    4,999,424 parameters: 4.999424 M, to three significant digits "5M"."""
    from tracekit.cli.collect import summary_lines

    sc = _sidecar()
    assert sc["workload"]["parameters"] == 4_999_424
    assert summary_lines(sc)[0].startswith("tiny (5M parameters, fp32) on AMD EPYC (cpu): batch 1, prompt 64")


@pytest.mark.parametrize("count, shown", [(1_000, "1K"), (1_000_000, "1M"), (1_000_000_000, "1B")])
def test_collects_summary_shows_a_round_parameter_count_in_the_larger_unit(count, shown):
    """catches: a parameter count exactly on a unit shown in the smaller one (cli/collect.py _count
    ``n >= div`` -> ``n > div``): 1,000,000 parameters is "1M", not "1e+03K" (1e6 / 1e3 = 1000 at
    three significant digits); 1,000 is "1K", not "1000"; 1e9 is "1B"."""
    from tracekit.cli.collect import summary_lines

    sc = _sidecar()
    sc["workload"]["parameters"] = count
    assert summary_lines(sc)[0].startswith(f"tiny ({shown} parameters, fp32)")


def test_collects_summary_gives_the_unprofiled_ttft_and_tpot():
    """catches: the wall-clock TTFT/TPOT line left out when the sidecar has both figures (cli/collect.py
    ``if figs.get("ttft_ms") is not None and ...`` negated). The sample sidecar's timing: ttft_ms
    11.927 -> "11.9 ms"; the median of its 16 tpot_ms (the 8th and 9th, 4.2532 and 4.3284 ms, averaged)
    is 4.2906 -> "4.29 ms"."""
    from tracekit.cli.collect import summary_lines

    t = _sidecar()["timing"]
    ttft, p50 = t["ttft_ms"], statistics.median(t["tpot_ms"])
    assert f"{ttft:.3g}" == "11.9" and f"{p50:.3g}" == "4.29"
    lines = summary_lines(_sidecar())
    assert "TTFT 11.9 ms, TPOT p50 4.29 ms, without the profiler" in lines
    assert lines.index("TTFT 11.9 ms, TPOT p50 4.29 ms, without the profiler") == 1


# --- tracekit compare ----------------------------------------------------------------------


def test_compare_names_the_before_gpu_option_as_typed(tmp_path):
    """catches: a bad `--gpu-before` let through the early check (cli/common.py ``gpu is None`` ->
    ``gpu is not None``), so the error came later and named `--gpu` instead of the option typed.
    compare's --help lists --gpu-before; the error names it, the exit status is 2 (usage), and
    no report is written."""
    out = tmp_path / "c.md"
    result = CliRunner().invoke(main, ["compare", str(BS1), str(BS8), "--gpu-before", "no-such-gpu", "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert "--gpu-before 'no-such-gpu' is not in tracekit's GPU database" in result.output
    assert not out.exists()


def test_compare_to_a_text_file_suggests_the_html_report(tmp_path):
    """catches: `tracekit compare A B -o x.txt` choosing the wrong next step (cli/compare.py
    ``name == "json"`` -> ``name >= "json"``, which "text" also is): a text file is not JSON, so
    the next step is not the JSON document's keys but the HTML report."""
    out = tmp_path / "c.txt"
    result = _invoke("compare", BS1, BS8, "-o", out)
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    with pytest.raises(ValueError):
        json.loads(text)
    nxt = [line for line in result.output.splitlines() if line.startswith("next:")]
    assert nxt == [f"next: tracekit compare {BS1} {BS8} for the HTML report with charts"]


# --- tracekit gpus -------------------------------------------------------------------------


def test_gpus_rounds_the_rtx_4080_laptops_fp32_peak_up():
    """catches: the fp32 vector column divided by slightly more than 1e12 (cli/gpus.py ``1e12`` ->
    ``1000000000001.0``), which moves a peak on a rounding edge down. The RTX 4080 Laptop's FP32 peak
    is 7424 cores x 2 x 2.28 GHz = 33,853 GFLOP/s, 33.85 TFLOP/s in `tracekit gpus --json`: one
    decimal shows 33.9, not 33.8."""
    rows = json.loads(_invoke("gpus", "--json").output)
    (row,) = [r for r in rows if r["key"] == "rtx-4080-laptop"]
    assert row["peak_flops"]["vector"]["fp32"] == pytest.approx(33.85e12)
    table = _invoke("gpus").output.splitlines()
    header = table[0]
    end = header.index("fp32 vector TFLOP/s") + len("fp32 vector TFLOP/s")  # numbers are right-aligned
    (line,) = [t for t in table if " rtx-4080-laptop " in t]
    assert line[:end].split()[-1] == "33.9"


# --- seed 54 (the sample's survivors in tracekit/cli, `--seed 54 --lists-only`) --------------------


@pytest.fixture(scope="module")
def timed_out_batch(tmp_path_factory):
    """A batch of one sample trace and a FIFO no one writes (its read blocks until --timeout 5 s
    ends its worker), written to a CSV and an HTML page. Returns (result, csv path, page path)."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("os.mkfifo is not available here (needed for a trace that never finishes)")
    base = tmp_path_factory.mktemp("timed_out")
    folder = base / "in"
    folder.mkdir()
    shutil.copy(BS1, folder / BS1.name)
    fifo = folder / "stuck.json"
    os.mkfifo(fifo)
    table, page = base / "fleet.csv", base / "fleet.html"
    try:
        result = CliRunner().invoke(
            main, ["batch", str(folder), "--timeout", "5", "-j", "2", "-o", str(table), "-o", str(page)]
        )
    finally:
        _release(fifo)
    return result, table, page


def test_a_batch_counts_a_timed_out_trace_as_not_analysed(timed_out_batch):
    """catches: the closing line's count of analysed traces taking the timeouts off by XOR
    (cli/batch.py ``len(rows) - errors - timeouts`` -> ``len(rows) - errors ^ timeouts``). Two rows,
    the CSV's statuses one ok and one timeout: 2 - 0 - 1 = 1 analysed (the mutant: 2 ^ 1 = 3), and
    exit status 1 (docs/batch.md: some rows are errors or timeouts)."""
    result, table, _ = timed_out_batch
    assert result.exit_code == 1, result.output
    with open(table, encoding="utf-8", newline="") as f:
        statuses = sorted(row["status"] for row in csv.DictReader(f))
    assert statuses == ["ok", "timeout"]
    assert ": 1 analysed, 0 error(s), 1 timed out (see the status and error columns)" in result.output


def test_a_batch_sends_only_its_html_page_to_the_browser(timed_out_batch):
    """catches: the next step choosing its page by ``r.name is not "html"`` instead of ``==`` (cli/
    batch.py): a batch written to a CSV and an HTML page told the user to open the CSV in a
    browser, and an HTML-only batch got no next step at all. The next step names the page."""
    result, table, page = timed_out_batch
    nxt = [line for line in result.output.splitlines() if line.startswith("next:")]
    assert nxt == [f"next: open {page} in a browser (it works offline); every column: tracekit batch ... -o fleet.csv"]
    assert str(table) not in nxt[0]


def test_a_dash_built_at_run_time_still_means_standard_output(tmp_path, monkeypatch):
    """catches: `-o -` recognised by identity (cli/batch.py _targets ``o == "-"`` -> ``o is "-"``).
    A "-" that a program calling tracekit's CLI built at run time (``"".join(["", "-"])``, equal to
    the literal but another object) was taken for a file named "-" in the current folder.
    docs/batch.md: '-o -' writes the CSV to standard output."""
    dash = "".join(["", "-"])
    assert dash == "-"
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["batch", str(BS1), "-o", dash], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(result.stdout.splitlines()))
    assert [(r["name"], r["status"]) for r in rows] == [(BS1.name, "ok")]
    assert os.listdir(tmp_path) == []


def test_models_lists_every_entry_with_its_source():
    """catches: `tracekit models` failing on its table (cli/models.py ``str(row[4])`` -> ``row[5]``,
    an IndexError: a row has five cells, key, model, architecture, parameters, source). Every
    entry of `tracekit models --json` has a line that starts with its key and ends with its source,
    under a heading of the five columns."""
    entries = json.loads(_invoke("models", "--json").output)
    result = _invoke("models")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["key", "model", "architecture", "parameters", "source"]
    for e in entries:
        assert any(line.startswith(e["key"] + " ") and line.endswith(e["source"]) for line in lines[1:]), e["key"]


# --- seed 55 (the sample's survivors in tracekit/cli, coverage-map mode) --------------------------


def test_a_batch_says_wrote_for_a_new_default_page_and_replaced_on_a_rerun(tmp_path, monkeypatch):
    """Mutant: cli/batch.py command ``'replaced' if replacing and not outputs`` -> ``replacing or not
    outputs``: without -o, the batch said "replaced reports/fleet.html" on its first run too, when
    there was nothing to replace. docs/exit-codes.md: files tracekit names itself in reports/ are
    replaced on a rerun, and it says "replaced". In an empty folder: "wrote", then "replaced"."""
    monkeypatch.chdir(tmp_path)
    said = []
    for _ in range(2):
        result = _invoke("batch", BS1, "-j", "1")
        assert result.exit_code == 0, result.output
        said += [line.split(" (")[0] for line in result.output.splitlines() if line.startswith(("wrote ", "replaced "))]
    assert said == ["wrote reports/fleet.html", "replaced reports/fleet.html"]


def test_collects_summary_gives_the_measured_copy_bandwidth_in_gb_per_s():
    """Mutant: cli/collect.py summary_lines ``bw / 1e9`` -> ``bw + 1e9``: the closing line gave the
    measured copy bandwidth as "2.37e+10 GB/s", the sidecar's bytes/s plus a billion. The sidecar
    (collect/sidecar.py: copy_bandwidth in B/s, matmul_flops in FLOP/s) of the sample run holds
    100,015,781,330 FLOP/s and 22,733,844,037 B/s: by hand 100 GFLOP/s (three digits, SI prefix)
    and 22.7 GB/s."""
    from tracekit.cli.collect import summary_lines

    cal = _sidecar()["calibration"]
    assert round(cal["matmul_flops"]["fp32"]) == 100_015_781_330 and round(cal["copy_bandwidth"]) == 22_733_844_038
    assert "measured ceilings: 100 GFLOP/s matmul (fp32), 22.7 GB/s copy" in summary_lines(_sidecar())


def test_collects_summary_of_a_script_gives_its_profiled_wall_time_only_when_recorded():
    """Mutant: cli/collect.py summary_lines ``t.get("profiled_wall_ms") is not None`` -> ``is None``:
    for a `tracekit collect --script` run the wall time under the profiler was left out when the
    sidecar has it, and a sidecar without it crashed the summary (None formatted as a float). By
    hand: 1234.56 ms to one decimal is "1234.6 ms"; without the figure, only the first line."""
    from tracekit.cli.collect import summary_lines

    sc = {
        "workload": {"kind": "script", "script": "train.py"},
        "device": {"name": "NVIDIA H100 80GB HBM3", "type": "cuda"},
        "timing": {"profiled_wall_ms": 1234.56},
    }
    assert summary_lines(sc) == [
        "ran train.py on NVIDIA H100 80GB HBM3 (cuda)",
        "wall time under the profiler: 1234.6 ms",
    ]
    sc["timing"] = {}
    assert summary_lines(sc) == ["ran train.py on NVIDIA H100 80GB HBM3 (cuda)"]


def test_a_one_rank_collect_names_its_one_trace_once(tmp_path, monkeypatch):
    """Mutant: cli/collect.py _collect_tp ``" .. LAST" if tp > 1`` -> ``tp > 0``: `tracekit collect
    --tp 1` (allowed: docs/ranks.md, the tiny preset allows `--tp 1` or `2`) named its one trace as
    a range from itself to itself, "(rank0.pt.trace.json.gz .. rank0.pt.trace.json.gz, ...)". The
    folder holds rank0.pt.trace.json.gz and its sidecar (docs/ranks.md), so the closing line names
    that one file. collect_tp is stubbed: no rank starts; its result is the one rank's paths and
    the sample run's sidecar."""
    from tracekit.collect import parallel
    from tracekit.collect.collector import CollectResult

    folder = tmp_path / "tp1"
    sidecar = _sidecar()
    sidecar["workload"]["tensor_parallel"] = {
        "shard": {"num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512},
        "all_reduces_per_step": 4,
    }
    rank0 = CollectResult(str(folder / "rank0.pt.trace.json.gz"), str(folder / "rank0.tracekit.json"), sidecar)

    def fake_collect_tp(opts, tp, announce=None):
        assert tp == 1
        return parallel.ParallelResult(folder=str(folder), ranks=[rank0], backend="gloo")

    monkeypatch.setattr(parallel, "collect_tp", fake_collect_tp)
    monkeypatch.chdir(tmp_path)
    result = _invoke("collect", "--tp", "1", "-o", "tp1")
    assert result.exit_code == 0, result.output
    wrote = [line for line in result.stdout.splitlines() if line.startswith("wrote ")]
    assert wrote == ["wrote 1 rank trace to tp1 (rank0.pt.trace.json.gz, each with its sidecar)"]


def _reads(monkeypatch) -> list[str]:
    """The names of the trace files read from now on (every read goes through read_trace)."""
    import tracekit.trace

    reads, real = [], tracekit.trace.read_trace

    def recording(path, *args, **kwargs):
        reads.append(os.path.basename(str(path)))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(tracekit.trace, "read_trace", recording)
    return reads


def test_a_missing_after_capture_is_refused_before_the_before_capture_is_read(tmp_path, monkeypatch):
    """Mutant: cli/common.py device_options ``--graph-capture`` ``click.Path(exists=True)`` ->
    ``exists=False``: a --graph-capture-after path that does not exist was refused only once
    compare had read the --graph-capture-before trace (device_settings reads each side's capture
    in turn), a slow read for a typo. The option names a trace recorded during capture, so a
    missing path is bad input, refused at once (exit 2, docs/exit-codes.md), naming the option
    and the path, with no trace read."""
    reads = _reads(monkeypatch)
    missing = tmp_path / "no-such-capture.json"
    result = CliRunner().invoke(
        main,
        ["compare", str(BS1), str(BS8), "--graph-capture-before", str(BS1), "--graph-capture-after", str(missing)]
        + ["-o", str(tmp_path / "c.json")],
    )
    assert result.exit_code == 2, result.output
    assert "--graph-capture-after" in result.output and str(missing) in result.output
    assert reads == []
    assert not (tmp_path / "c.json").exists()


def test_a_bad_after_gpu_is_refused_before_the_before_capture_is_read(tmp_path, monkeypatch):
    """Not a mutant; found beside cli/common.py's ``exists=True`` above: compare checked each side's
    --gpu-* and read its capture in turn, so `--graph-capture-before CAP --gpu-after NAME` with a
    NAME not in the database read CAP before refusing NAME, though the code's comment (and
    check_device_options' docstring) says a bad --gpu-* fails before the slow read. Fixed in
    cli/compare.py: both sides' device options are checked before either capture is read."""
    reads = _reads(monkeypatch)
    result = CliRunner().invoke(
        main,
        ["compare", str(BS1), str(BS8), "--graph-capture-before", str(BS1), "--gpu-after", "no-such-gpu"]
        + ["-o", str(tmp_path / "c.json")],
    )
    assert result.exit_code == 2, result.output
    assert "--gpu-after 'no-such-gpu' is not in tracekit's GPU database" in result.output
    assert reads == []


@pytest.mark.parametrize(
    "size, shown",
    [(1, "1 kB"), (6_400, "6 kB"), (999_499, "999 kB"), (1_000_000, "1.0 MB"), (2_345_678, "2.3 MB")],
)
def test_a_written_files_size_is_in_kb_below_a_megabyte_and_in_mb_from_one(size, shown):
    """Mutant: cli/common.py human_size ``n >= 1e6`` -> ``n != 1e6``: every file but one of exactly
    1,000,000 bytes was given in MB, so a 6 kB Markdown report was "wrote r.md (0.0 MB)". By hand
    (SI units, kB = 1,000 bytes, MB = 1,000,000): under a megabyte, whole kB (at least 1); from a
    megabyte on, MB to one decimal."""
    from tracekit.cli.common import human_size

    assert human_size(size) == shown


def test_a_cpu_matmul_peak_of_zero_is_refused_as_bad_input():
    """Mutant: cli/common.py device_options ``--cpu-flops`` ``FloatRange(min=0, min_open=True)`` ->
    ``min=-1``: a peak of 0 FLOP/s (or -0.5) was taken as the CPU's matmul roof to price against.
    A peak is a rate above zero (--help: FLOP/S); anything else is bad input, refused at once with
    exit 2 (docs/exit-codes.md), naming the option."""
    for value in ("0", "-0.5"):
        result = CliRunner().invoke(main, ["summary", str(BS1), "--cpu-flops", value])
        assert result.exit_code == 2, result.output
        assert "--cpu-flops" in result.output and "Traceback" not in result.output


def test_tp_1_is_a_tensor_parallel_degree_the_commands_take():
    """Mutant: cli/common.py model_options ``--tp`` ``IntRange(min=1)`` -> ``min=2``: `--tp 1` was
    refused as a usage error, though docs/costs.md gives `tracekit report ... --tp 1` and the
    analysis takes any degree of at least 1 (analysis/workload.py choose_tp: "--tp must be at least
    1"). The sample run stated as TP 1 says so, and names --tp as where the degree came from."""
    result = _invoke("summary", BS1, "--tp", "1")
    assert result.exit_code == 0, result.output
    assert "TP 1 (--tp)" in result.output
    assert CliRunner().invoke(main, ["summary", str(BS1), "--tp", "0"]).exit_code == 2


def test_compare_counts_the_summary_sentences_it_leaves_for_the_report(tmp_path):
    """Mutant: cli/compare.py command ``len(lines) - SUMMARY_LINES`` -> ``len(lines) ^ SUMMARY_LINES``:
    after writing a report, compare prints its first summary sentences and then "... N more in the
    report"; N was the sentences' count XOR the number shown. The two agree when the count's bits
    hold those of 6 (the sample pair tiny-bs1 vs tiny-bs8 has 14 sentences: 14 - 6 = 14 ^ 6 = 8),
    so this pair is the RTX 4080 Laptop's nano-vllm decode against tiny-bs1. The sentences are the
    JSON report's context sentence and its ``summary`` (docs/json-schema.md), read back from the
    file written; N is that count less the lines shown, each of which is the report's sentence in
    order. By hand: 1 + 10 = 11 sentences, 6 shown, so "... 5 more" (the mutant: 11 ^ 6 = 13)."""
    from conftest import real_trace_path

    out = tmp_path / "c.json"
    result = _invoke("compare", real_trace_path("rtx4080_nanovllm"), BS1, "-o", out)
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["context"]
    sentences = 1 + len(doc["summary"])
    lines = result.output.splitlines()
    shown = [line for line in lines if line.startswith("  ") and not line.startswith("  ... ")]
    assert shown[0].startswith("  Not like for like: ")
    assert shown[1:] == ["  " + s for s in doc["summary"][: len(shown) - 1]]
    assert (sentences, len(shown)) == (11, 6)
    assert f"  ... {sentences - len(shown)} more in the report" in lines


# --- seed 56 (the sample's survivors in tracekit/cli, coverage-map mode) --------------------------


def test_collects_summary_says_the_overhead_is_not_measurable_on_a_busy_cpu():
    """Mutant: cli/collect.py summary_lines ``dev.get("type") == "cpu"`` -> ``is not "cpu"``: the test
    became an identity check. `tracekit collect` summarises the sidecar it has just built in
    process, whose device type is the string constant "cpu" (collect/sidecar.py device_info), the
    same object as the constant compared with, so a busy CPU run was taken for a GPU one: the
    busy-machine check was skipped and the profiler overhead printed as if measured.
    docs/collecting.md: collect measures how much CPU other processes took and says so in its
    output. By hand: the sample sidecar's ratio 1.1103 is "1.11"; the device block as collect
    builds it, with other processes holding 1.5 of the 2 cores (busy), and a sidecar read back
    from disk the same way."""
    from tracekit.cli.collect import summary_lines

    busy = (
        "profiler overhead: not measurable on a busy machine (profiled / unprofiled 1.11 is the other "
        "processes' noise as much as the profiler's cost)"
    )
    contention = {"other_cores": 1.5, "busy": True}
    sc = _sidecar()
    assert f"{sc['timing']['profiler_overhead_ratio']:.2f}" == "1.11"
    sc["device"] = {"type": "cpu", "name": "AMD EPYC", "count": 1, "threads": 2, "cores": 2, "contention": contention}
    assert busy in summary_lines(sc)
    read_back = json.loads(json.dumps(sc))
    assert busy in summary_lines(read_back)
    sc["device"]["contention"] = {"other_cores": 0.1, "busy": False}
    sc["device"]["load_average_1m"] = 0.2
    assert "profiler overhead: 1.11x the unprofiled time of the recorded run" in summary_lines(sc)


def test_a_two_rank_collect_names_its_first_and_last_traces(tmp_path, monkeypatch):
    """Mutant: cli/collect.py _collect_tp ``trace_paths[-1]`` -> ``trace_paths[~1]`` (the second to
    last): `tracekit collect --tp 2` closed with "(rank0.pt.trace.json.gz .. rank0.pt.trace.json.gz,
    ...)", a range from the first trace to itself, and the last rank's trace was never named.
    docs/ranks.md: `--tp 2 -o tp2/` writes rank0.pt.trace.json.gz and rank1.pt.trace.json.gz, each
    with its sidecar. collect_tp is stubbed: no rank starts; its result is the two ranks' paths and
    the sample run's sidecar."""
    from tracekit.collect import parallel
    from tracekit.collect.collector import CollectResult

    folder = tmp_path / "tp2"
    sidecar = _sidecar()
    sidecar["workload"]["tensor_parallel"] = {
        "shard": {"num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 256},
        "all_reduces_per_step": 4,
    }
    ranks = [
        CollectResult(str(folder / f"rank{r}.pt.trace.json.gz"), str(folder / f"rank{r}.tracekit.json"), sidecar)
        for r in (0, 1)
    ]

    def fake_collect_tp(opts, tp, announce=None):
        assert tp == 2
        return parallel.ParallelResult(folder=str(folder), ranks=ranks, backend="gloo")

    monkeypatch.setattr(parallel, "collect_tp", fake_collect_tp)
    monkeypatch.chdir(tmp_path)
    result = _invoke("collect", "--tp", "2", "-o", "tp2")
    assert result.exit_code == 0, result.output
    wrote = [line for line in result.stdout.splitlines() if line.startswith("wrote ")]
    assert wrote == [
        "wrote 2 rank traces to tp2 (rank0.pt.trace.json.gz .. rank1.pt.trace.json.gz, each with its sidecar)"
    ]


def test_reading_shows_its_stages_in_a_terminal_only_for_a_big_trace(monkeypatch):
    """Mutant: cli/common.py read_with_progress ``size < _PROGRESS_MIN_BYTES`` -> ``size >=``: in a
    terminal, a small trace drew a stage bar on stderr and a big one, which the bar is for, read
    without one. The docstring: stages are shown "when it is big and stderr is a terminal". The
    sample trace (350 kB) is small; the same read with its size taken as 10 GB is big. stderr is a
    terminal (isatty true); read_trace is stubbed to record whether it was given a progress hook."""
    import io

    import tracekit.trace
    from tracekit.cli import common

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    hooks = []

    def fake_read_trace(path, progress=None):
        hooks.append(progress)
        return path

    monkeypatch.setattr(tracekit.trace, "read_trace", fake_read_trace)
    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert os.path.getsize(BS1) < 1_000_000
    assert common.read_with_progress(str(BS1), cached=False) == str(BS1)
    assert hooks == [None] and term.getvalue() == ""
    monkeypatch.setattr(common, "_size", lambda path: 10 * 10**9)
    common.read_with_progress(str(BS1), cached=False)
    assert len(hooks) == 2 and hooks[1] is not None


def test_compare_states_the_projected_range_of_the_first_after_run(tmp_path, monkeypatch):
    """Mutant: cli/compare.py command ``a_all[0][1]`` -> ``a_all[-1][1]``: with --after-run, the
    sentence stating the after side's projected range was the last run's, not AFTER's.
    docs/compare.md: phases, kernels and context are from BEFORE and AFTER (the first run of each
    side). _side is stubbed to analyse each trace as measured and give a range note naming its
    file, as a projection's would. The second after run is a copy of AFTER with its sidecar (one
    workload). The JSON report's summary (docs/json-schema.md) then says
    "after: ..." of AFTER's file, and "before: ..." of BEFORE's."""
    import tracekit.cli.compare as cmp
    from tracekit.analysis import analyze

    def fake_side(trace, target, **options):
        return analyze(trace, **options), f"projected range of {os.path.basename(trace.path)}"

    monkeypatch.setattr(cmp, "_side", fake_side)
    again = tmp_path / "again.pt.trace.json.gz"
    shutil.copyfile(BS8, again)
    shutil.copyfile(SAMPLE_TRACES / "tiny-bs8.tracekit.json", tmp_path / "again.tracekit.json")
    out = tmp_path / "c.json"
    result = _invoke("compare", BS1, BS8, "--after-run", again, "-o", out)
    assert result.exit_code == 0, result.output
    summary = json.loads(out.read_text(encoding="utf-8"))["summary"]
    assert f"after: projected range of {BS8.name}" in summary
    assert f"before: projected range of {BS1.name}" in summary
    assert not any("again" in s for s in summary)


def test_split_says_1_window_in_the_singular(tmp_path):
    """Mutant: cli/split.py command ``len(written) != 1`` -> ``!= 0``: a trace that fits in one
    window was reported as "wrote 1 windows of ...". Grammar: one window, two windows. A window
    of a billion events holds the whole sample trace; one of 4,000 events cuts tiny-bs8 (about
    11,000 CPU-side events, test_windows' split of it) into several, in the plural."""
    one = tmp_path / "one"
    result = _invoke("split", BS1, "-o", one, "--events", 10**9)
    assert result.exit_code == 0, result.output
    assert len([p for p in one.iterdir() if p.name.endswith(".json.gz")]) == 1
    assert f"wrote 1 window of {BS1} to {one} (" in result.output
    many = tmp_path / "many"
    result = _invoke("split", BS8, "-o", many, "--events", 4000)
    assert result.exit_code == 0, result.output
    n = len([p for p in many.iterdir() if p.name.endswith(".json.gz")])
    assert n >= 2 and f"wrote {n} windows of {BS8} to {many} (" in result.output


# --- seed 57 (the sample's survivors in tracekit/cli, coverage-map mode) --------------------------


def test_a_batchs_progress_bar_starts_at_0_of_its_traces(tmp_path, monkeypatch):
    """Mutant: cli/batch.py command ``len(i.files) or 1`` -> ``or 0``: the progress bar of a batch
    (in a terminal) started at 0 of 0 traces, since a single trace file is an Item with no
    ``files`` (batch/inputs.py: only a folder's group lists them). The _Bar docstring: it moves to
    ``done`` of ``total`` as rows complete; two sample trace files are 2 traces from the start,
    and the bar ends at 2 of 2. _bar is stubbed to record what a terminal's bar would be given."""
    import tracekit.cli.batch as batch_cli

    seen = []

    class Recorder:
        def __init__(self, total):
            seen.append(("start", total))

        def update(self, done, total):
            seen.append((done, total))

        def close(self):
            pass

    monkeypatch.setattr(batch_cli, "_bar", Recorder)
    result = _invoke("batch", BS1, BS8, "-j", "1", "-o", tmp_path / "fleet.csv")
    assert result.exit_code == 0, result.output
    assert seen[0] == ("start", 2)
    assert seen[-1] == (2, 2)


def test_collects_summary_of_a_script_is_the_same_read_back_from_its_file(tmp_path):
    """Mutant: cli/collect.py summary_lines ``w.get("kind") == "script"`` -> ``is "script"``: the
    test held only for the interned literal collect puts in its own dict, so a script's sidecar read
    back from its file (tracekit.collect.sidecar.read: JSON, a fresh string) was summarised as a
    preset run ("None (? parameters, ...)"). A sidecar says the same after a write and a read:
    "ran train.py on NVIDIA H100 80GB HBM3 (cuda)"."""
    from tracekit.cli.collect import summary_lines
    from tracekit.collect import sidecar

    path = tmp_path / "train.tracekit.json"
    sidecar.write(
        str(path),
        {
            "workload": {"kind": "script", "script": "train.py"},
            "device": {"name": "NVIDIA H100 80GB HBM3", "type": "cuda"},
            "timing": {},
        },
    )
    assert summary_lines(sidecar.read(str(path))) == ["ran train.py on NVIDIA H100 80GB HBM3 (cuda)"]


@pytest.mark.parametrize("given", ["0", "decode=0", "prefill=x", "decode=-1"])
def test_stated_tokens_below_1_or_not_a_number_are_bad_usage(given):
    """Mutant: cli/common.py _stated_callback ``... or int(number) < 1`` -> ``... and int(number) <
    1``: `--tokens 0` (and `decode=0`) was taken, a phase of steps of no tokens, and `prefill=x`
    crashed with a ValueError from int('x') instead of the usage error. The option's error names
    the rule: "[PHASE=]N with ... N a whole number above 0"; click's bad usage is exit status 2
    (docs/exit-codes.md)."""
    result = CliRunner().invoke(main, ["summary", str(BS1), "--tokens", given])
    assert result.exit_code == 2, (result.output, result.exception)
    assert "N a whole number above 0" in result.output
    assert "--tokens" in result.output


def _help_of(command: str, option: str) -> str:
    import click

    with click.Context(main) as ctx:
        cmd = main.get_command(ctx, command)
    (param,) = [p for p in cmd.params if option in p.opts]
    return param.help


def test_the_cpu_peak_options_name_their_side_only_on_compare():
    """Mutant: cli/common.py device_options ``if side`` -> ``if not side`` for the CPU options'
    help: `tracekit report --help` said "CPU traces (None run): ..." and compare's
    --cpu-flops-before lost its side. device_options' docstring: with ``side`` (compare's before and
    after) each option is for that side's runs; without, it is the command's own."""
    assert _help_of("report", "--cpu-bandwidth").startswith("CPU traces: the memory bandwidth")
    assert _help_of("report", "--cpu-flops").startswith("CPU traces: the matmul peak")
    assert _help_of("compare", "--cpu-flops-before").startswith("CPU traces (before run): the matmul peak")
    assert _help_of("compare", "--cpu-bandwidth-after").startswith("CPU traces (after run): the memory bandwidth")


def test_gpus_shows_the_a100_40gbs_1555_gb_per_s_as_1_56_tb_per_s():
    """Mutant: cli/gpus.py table_row the bandwidth column's ``1e12`` -> ``999999999999.0``
    (dividing by slightly less moves a figure just under a rounding edge up). Two decimals of
    TB/s, a half rounded up, by hand: the A100 40GB's 1,555 GB/s (`tracekit gpus --json`, NVIDIA's
    datasheet) is 1.56 TB/s (binary floating point holds 1.555 as 1.55499..., which printed 1.55:
    fixed in _number); 1,554,999,999,999 B/s, one byte/s under 1.555 TB/s, is 1.55."""
    from tracekit.cli.gpus import COLUMNS, table_row
    from tracekit.specs import GpuSpec

    rows = json.loads(_invoke("gpus", "--json").output)
    (row,) = [r for r in rows if r["key"] == "a100-sxm4-40gb"]
    assert row["peak_bandwidth"] == 1555e9
    table = _invoke("gpus").output.splitlines()
    end = table[0].index("bandwidth TB/s") + len("bandwidth TB/s")  # numbers are right-aligned
    (line,) = [t for t in table if " a100-sxm4-40gb " in t]
    assert line[:end].split()[-1] == "1.56"
    column = COLUMNS.index("bandwidth TB/s")
    under = GpuSpec(key="x", name="X", vendor="NVIDIA", peak_bandwidth=1_554_999_999_999.0)
    assert table_row(under)[column] == "1.55"


def test_models_gives_llama_3_1_8b_as_8_0_billion_parameters():
    """Mutant: cli/models.py command ``r['parameters'] / 1e9`` -> ``% 1e9``: the parameters column
    showed the remainder under a billion ("29995008.0B"). By hand, Llama-3.1-8B's matrices (32
    layers, hidden 4096, 32/8 heads x 128, MLP 14336, vocabulary 128256, untied embeddings):
    2 x 128256 x 4096 + 32 x (2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x 14336) = 8,029,995,008
    (its 65 norms add 266,240), 8.0B to one decimal; Llama-3.1-70B's 70.6 billion is 70.6B."""
    entries = {e["key"]: e for e in json.loads(_invoke("models", "--json").output)}
    assert entries["llama-3.1-8b-instruct"]["parameters"] == pytest.approx(8.03e9, rel=1e-4)
    lines = _invoke("models").output.splitlines()
    columns = lines[0].split()
    (small,) = [t for t in lines if t.startswith("llama-3.1-8b-instruct ")]
    (big,) = [t for t in lines if t.startswith("llama-3.1-70b-instruct ")]
    assert columns[3] == "parameters"
    start = lines[0].index("parameters")
    assert small[start:].split()[0] == "8.0B"
    assert big[start:].split()[0] == "70.6B"


def test_plan_allows_64_gpus_unless_told(tmp_path):
    """Mutant: cli/plan.py ``--max-gpus`` ``default=64`` -> ``65``: without --max-gpus the command
    planned for up to 65 GPUs, not the 64 that `plan()` (tracekit.whatif.plan.MAX_GPUS) and the
    command's --help state. The JSON plan's ``inputs.max_gpus`` (docs/json-schema.md) records it."""
    import inspect

    from tracekit.whatif import plan as whatif_plan

    assert inspect.signature(whatif_plan.plan).parameters["max_gpus"].default == 64
    out = tmp_path / "plan.json"
    args = ["plan", BS1, "--isl", "64", "--osl", "16", "--rate", "1", "--ttft-slo", "500ms", "--tpot-slo", "50ms"]
    result = _invoke(*args, "-o", out)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text(encoding="utf-8"))["inputs"]["max_gpus"] == 64


# --- seed 58 (the sample's survivors in tracekit/cli, coverage-map mode) --------------------------


def test_plan_records_the_kv_link_in_gb_per_s_as_given(tmp_path):
    """Mutant: cli/plan.py command ``kv_link * 1e9`` -> ``kv_link + 1e9``: `--kv-link 50` (GB/s, its
    --help) was handed to plan() as 1,000,000,050 B/s, about 1 GB/s, so the disaggregated option's
    KV transfer was priced 50x slower. The JSON plan's ``inputs.kv_link_gbps`` (docs/json-schema.md)
    records the link plan() was given, in GB/s: 50 as typed."""
    out = tmp_path / "plan.json"
    args = ["plan", BS1, BS8, "--isl", "64", "--osl", "16", "--rate", "1", "--ttft-slo", "500ms"]
    result = _invoke(*args, "--tpot-slo", "50ms", "--kv-link", "50", "-o", out)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text(encoding="utf-8"))["inputs"]["kv_link_gbps"] == pytest.approx(50)


@pytest.mark.parametrize("rate", ["0", "-0.5"])
def test_plan_refuses_a_rate_of_no_requests_before_reading_a_trace(rate, tmp_path, monkeypatch):
    """Mutant: cli/plan.py --rate ``FloatRange(min=0, min_open=True)`` -> ``min=-1``: a rate of 0
    requests/s (or -0.5) passed the option, so plan read and analysed every trace (minutes for a
    big one) before plan() refused it ("--rate, --isl and --osl must be positive"). --help:
    requests per second to serve, so above 0; bad usage is refused at once, exit status 2
    naming the option (docs/exit-codes.md), with no trace read. 0.5 requests/s is planned."""
    reads = _reads(monkeypatch)
    args = ["plan", BS1, "--isl", "64", "--osl", "16", "--ttft-slo", "500ms", "--tpot-slo", "50ms"]
    result = _invoke(*args, "--rate", rate, "-o", tmp_path / "plan.json")
    assert result.exit_code == 2, (result.output, result.exception)
    assert "--rate" in result.output
    assert reads == []
    assert not (tmp_path / "plan.json").exists()
    result = _invoke(*args, "--rate", "0.5", "-o", tmp_path / "plan.json")
    assert result.exit_code == 0, result.output
    assert reads == [BS1.name]


def test_a_split_in_a_terminal_draws_the_bytes_read_so_far(tmp_path, monkeypatch):
    """Mutant: cli/split.py _Progress ``self.bar.update(done - self.bar.n)`` -> ``done / self.bar.n``:
    in a terminal the bar's first update divided by its count of 0, so `tracekit split` failed
    with ZeroDivisionError on every trace (and later updates would add done/n, not the bytes
    read since the last). The class docstring: a bar of decompressed bytes per pass, so after each
    call the bar stands at the bytes done (trace/windows.py: ``progress(stage, bytes_done,
    total)``). stderr is a terminal (isatty true); the sample trace is split for real."""
    import io

    from tracekit.cli import split

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    shown = []
    real_call = split._Progress.__call__

    def call(self, stage, done, total):
        real_call(self, stage, done, total)
        shown.append((stage, done, self.bar.n))

    monkeypatch.setattr(split._Progress, "__call__", call)
    monkeypatch.setattr(sys, "stderr", Terminal())
    out = tmp_path / "windows"
    split.command.main([str(BS1), "-o", str(out)], standalone_mode=False)
    assert [p for p in out.iterdir() if p.name.endswith(".json.gz")]
    assert len(shown) >= 2 and any(done > 0 for _, done, _ in shown)
    assert [n for _, _, n in shown] == [done for _, done, _ in shown]


# --- seed 59 (the sample's survivors in tracekit/cli, coverage-map mode) --------------------------


def test_batch_with_no_workers_is_bad_usage(tmp_path):
    """Mutant: cli/batch.py ``-j/--jobs`` ``click.IntRange(min=1)`` -> ``min=0``: `tracekit batch -j 0`
    was accepted and quietly ran on the default number of workers (``jobs or default_jobs()``)
    instead of saying that 0 worker processes cannot analyse anything. The command's docstring:
    exit status 2 for bad usage, and nothing is written. The input is a file that is not a trace,
    so the mutant's run is short."""
    broken = tmp_path / "broken.json"
    broken.write_text('{"traceEvents": [', encoding="utf-8")
    out = tmp_path / "fleet.csv"
    result = CliRunner().invoke(main, ["batch", str(broken), "-j", "0", "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert "--jobs" in result.output and "0" in result.output
    assert not out.exists()


def test_an_interrupted_batch_names_where_its_rows_are_only_when_some_file_holds_some(tmp_path):
    """Mutant: cli/batch.py _interrupted ``if kept and rows`` -> ``kept or rows``: a batch stopped
    after one row with only standard output asked for (which gets the table at the end only, so
    no file holds rows) said "...: its row is in " naming nothing; one stopped before any row
    finished said "their rows are in fleet.csv" of rows there are none of. By hand: "interrupted
    after 1 of 2 trace(s)", then that standard output was not written; and "interrupted after 0
    of 2 trace(s)" alone."""
    from tracekit.batch import Interrupted
    from tracekit.batch.fleet import Fleet
    from tracekit.cli.batch import _interrupted, _journals, _targets

    def stopped(outputs, rows):
        targets = _targets(outputs, None, False, made_default=False)
        journals, scratch = _journals(targets, make_parent=False)
        e = Interrupted(rows, 2)
        e.fleet = Fleet(rows, complete=False)
        said = []
        _interrupted(e, targets, journals, scratch, said.append)
        return said

    row = {"status": "ok", "path": "a.json"}
    assert stopped(("-",), [row]) == [
        "interrupted after 1 of 2 trace(s); not written: standard output (a batch that finishes writes them)"
    ]
    assert stopped((str(tmp_path / "fleet.csv"),), []) == ["interrupted after 0 of 2 trace(s)"]


def test_a_big_reads_stage_bar_is_cleared_from_the_terminal_once_the_trace_is_read(monkeypatch):
    """Mutant: cli/common.py read_with_progress ``tqdm(..., leave=False)`` -> ``leave=True``: the
    stage bar, which shows what a big read is doing while it runs (the docstring: "showing its
    stages on stderr"), stayed on the terminal at 100% above whatever the command printed next.
    As tracekit's other transient bars (collect's forward passes, split's bytes), it is wiped
    once done: the last thing written is a carriage return after a line of blanks, and no
    newline is ever written. stderr is a terminal (isatty true), the trace's size is taken as
    10 GB, and read_trace is stubbed to pass its three stages to the hook."""
    import io

    import tracekit.trace
    from tracekit.cli import common

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    def fake_read_trace(path, progress=None):
        for stage in ("reading", "building tables", "linking kernels to launches and ops"):
            progress(stage)
        return path

    monkeypatch.setattr(tracekit.trace, "read_trace", fake_read_trace)
    monkeypatch.setattr(common, "_size", lambda path: 10 * 10**9)
    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert common.read_with_progress(str(BS1), cached=False) == str(BS1)
    drawn = term.getvalue()
    assert "linking kernels" in drawn  # the bar was drawn, stage by stage
    assert "\n" not in drawn
    assert drawn.endswith("\r") and drawn.rsplit("\r", 2)[-2].strip() == "", repr(drawn[-200:])


@pytest.mark.parametrize("size, shown", [(1_049_999, "1.0 MB"), (2_549_999, "2.5 MB")])
def test_a_written_files_size_in_mb_is_its_bytes_over_a_million(size, shown):
    """Mutant: cli/common.py human_size ``n / 1e6`` -> ``n / 999999.0``: the MB shown were the bytes
    over 999,999, a millionth too many, which rounded a size just under a twentieth of a MB up
    by a tenth. By hand (SI units, MB = 1,000,000 bytes, one decimal): 1,049,999 bytes are
    1.049999 MB, "1.0 MB" (the mutant: 1.05000005, "1.1 MB"); 2,549,999 bytes, "2.5 MB"."""
    from tracekit.cli.common import human_size

    assert human_size(size) == shown


def test_the_model_list_names_each_model_by_its_name_not_its_key():
    """Mutant: cli/models.py command ``e.get("name") or e["key"]`` -> ``and``: every registry model
    was listed under its key, so ``tracekit models --json`` gave "qwen3-30b-a3b" as the name of
    Qwen3-30B-A3B (the name ``--model qwen3-30b-a3b`` gives a report's model, test_models.py), and
    the table's "model" column repeated the "key" column. The registry stores both (its
    ``models.json``): key "qwen3-30b-a3b", name "Qwen3-30B-A3B"; key "llama-3.1-8b-instruct",
    name "Llama-3.1-8B-Instruct". Each listed name is the one ``models --show KEY`` gives."""
    runner = CliRunner()
    res = runner.invoke(main, ["models", "--json"])
    assert res.exit_code == 0, res.output
    names = {r["key"]: r["name"] for r in json.loads(res.output)}
    assert names["qwen3-30b-a3b"] == "Qwen3-30B-A3B"
    assert names["llama-3.1-8b-instruct"] == "Llama-3.1-8B-Instruct"
    shown = json.loads(runner.invoke(main, ["models", "--show", "gpt-oss-20b", "--json"]).output)
    assert names["gpt-oss-20b"] == shown["name"]
    table = runner.invoke(main, ["models"]).output
    line = next(ln for ln in table.splitlines() if ln.startswith("qwen3-30b-a3b "))
    assert "Qwen3-30B-A3B" in line


def test_models_show_gives_parameters_in_billions_of_1e9(tmp_path):
    """Mutant: cli/models.py command ``parameters(m) / 1e9`` -> ``/ 1000000001.0`` in ``models
    --show``'s text: the billions were counted in units of one more parameter, so a count one
    parameter past a rounding boundary was shown a hundredth of a billion short. By hand, a
    config.json of a llama whose layer is 1 wide (hidden 1, one head of 1, MLP 1; tied
    embeddings): one layer's matrices are q 1, k and v 2, o 1, gate and up 2, down 1 = 7
    parameters, plus the embedding, 1,234,999,994 x 1; in all 1,235,000,001 = 1.235000001e9,
    "1.24B" to two decimals (the mutant: 1.23499999976..., "1.23B")."""
    cfg = {
        "model_type": "llama",
        "hidden_size": 1,
        "num_hidden_layers": 1,
        "num_attention_heads": 1,
        "num_key_value_heads": 1,
        "head_dim": 1,
        "intermediate_size": 1,
        "vocab_size": 1_234_999_994,
        "tie_word_embeddings": True,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    res = CliRunner().invoke(main, ["models", "--show", str(tmp_path / "config.json")])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[1] == "  1.24B parameters", res.output
    res = CliRunner().invoke(main, ["models", "--show", str(tmp_path / "config.json"), "--json"])
    assert json.loads(res.output)["parameters"] == 1_235_000_001
