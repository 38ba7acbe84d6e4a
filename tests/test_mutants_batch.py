"""Tests written for the survivors of the mutation campaign's samples of tracekit/batch (issue 51,
part 5): each names the mutant it kills; the expected values are worked out by hand."""

from __future__ import annotations

from tracekit.batch.executors import _short
from tracekit.batch.fleet import Fleet, _one_run, _so_far
from tracekit.batch.rows import ERROR, OK


def test_a_workers_error_is_cut_to_200_characters_with_its_spaces_collapsed():
    """Mutant: batch/executors.py _short ``text[:200]`` -> another length: a worker's error, put in
    the batch's row and message, is its words joined by single spaces and cut at 200 characters."""
    assert _short(ValueError("x" * 300)) == "x" * 200
    assert _short(ValueError("a\n  b\tc")) == "a b c"
    assert _short(KeyError()) == "KeyError"


def test_a_value_exactly_on_tukeys_lower_fence_is_not_an_outlier():
    """Mutant: batch/fleet.py mark_outliers ``v < lo`` -> ``v <= lo``: a value on the fence was
    flagged. log10 of the five values: -3, 0, 1, 2, 2; quartiles (linear, n=5) 0 and 2, IQR 2,
    fences 0 - 3 = -3 and 2 + 3 = 5: 0.001 sits on the lower fence, inside it; 1e-4 would be out."""
    rows = [{"status": OK, "decode_tokens_per_s": v} for v in (0.001, 1.0, 10.0, 100.0, 100.0)]
    Fleet(rows)
    assert [r["outliers"] for r in rows] == [""] * 5
    rows = [{"status": OK, "decode_tokens_per_s": v} for v in (0.0001, 1.0, 10.0, 100.0, 100.0)]
    Fleet(rows)
    assert [r["outliers"] for r in rows] == ["decode_tokens_per_s", "", "", "", ""]


def test_a_stopped_batch_keeps_a_runs_row_and_not_its_files_rows():
    """Mutant: batch/fleet.py _so_far ``(gi, 0) in final`` -> ``(gi, 1)``: when a batch stops after a
    folder was analysed again as one run (its row is slot (group, 0)), the rows of the folder's
    files were listed beside the run's. By hand: the run's row alone; and while the run is not yet
    analysed, the files' rows, each with its note."""
    run, a, b = {"name": "run"}, {"name": "a"}, {"name": "b"}
    groups = {0: {"whole": True, "rows": {(0, 0): a, (0, 1): b}}}
    assert _so_far({(0, 0): run}, groups) == [run]
    assert _so_far({}, groups) == [a, b] and all(r["note"].startswith("analysed on its own") for r in (a, b))


def test_a_clock_counting_from_its_own_zero_gives_no_recording_date():
    """Mutant: batch/rows.py ``_EPOCH_MIN_NS = 946_684_800 * 10**9`` -> ``// 10**9`` (0): every
    trace's first timestamp was taken for wall-clock time. The sample trace's clock starts at
    5,255,915,551,876 us (about 61 days after 1970-01-01: a clock from boot, not a date), so no
    recording date; a first event at 2026-01-01T00:00:00Z (1,767,225,600 s) is one."""
    from tracekit.batch.rows import _iso, _recorded_ns

    assert _recorded_ns({}, 5_255_915_551_876_000) is None
    assert _recorded_ns({}, 946_684_800 * 10**9 - 1) is None
    ns = 1_767_225_600 * 10**9
    assert _recorded_ns({}, ns) == ns and _iso(ns) == "2026-01-01T00:00:00Z"


def test_an_error_of_over_300_characters_is_cut_to_299_and_an_ellipsis():
    """Mutant: batch/rows.py _one_line ``text[:299] + "…"`` -> ``<<`` (a TypeError on any long
    message): a row's error is one line of at most 300 characters, the last an ellipsis."""
    from tracekit.batch.rows import _one_line

    assert _one_line(ValueError("y" * 400)) == "y" * 299 + "…"
    assert _one_line(ValueError("z" * 300)) == "z" * 300
    assert _one_line(ValueError("a\n b")) == "a b"


def test_a_rows_top_idle_cause_sums_the_phases(tmp_path):
    """Mutant: batch/rows.py row_from_analysis ``if top[1] > 0`` -> ``< 0``: the top idle cause and
    its ms were never set. By hand: launch 1 + 0.5 ms, wait 2 ms over two phases: wait, 2 ms;
    with no idle at all, no cause."""
    from tracekit.batch.rows import row_from_analysis

    data = {
        "phases": {
            "prefill": {"idle_by_cause": {"launch": 1.0, "wait": 2.0}},
            "decode": {"idle_by_cause": {"launch": 0.5, "wait": 0.0}},
        }
    }
    row = row_from_analysis(str(tmp_path / "t.json"), data)
    assert (row["idle_top_cause"], row["idle_top_cause_ms"]) == ("wait", 2.0)
    data = {"phases": {"decode": {"idle_by_cause": {"launch": 0.0}}}}
    assert row_from_analysis(str(tmp_path / "t.json"), data).get("idle_top_cause") is None


def test_a_rows_top_finding_is_the_analysis_first():
    """Mutant: batch/rows.py row_from_analysis ``findings[0].get("id")`` -> ``findings[-1]``: the row
    named the last finding's id beside the first one's text. The analysis lists its findings
    largest first: the row's top finding is the first, id and text alike."""
    from tracekit.batch.rows import row_from_analysis

    data = {"findings": [{"id": "idle-launch", "text": "launch-bound"}, {"id": "small-gemm", "text": "small GEMMs"}]}
    row = row_from_analysis("t.json", data)
    assert (row["findings"], row["top_finding_id"], row["top_finding"]) == (2, "idle-launch", "launch-bound")


# --- seed 54: --packages tracekit/batch --sample 30 --seed 54 --lists-only ----------------------


class _Done:
    """A finished task: its (row, key)."""

    def __init__(self, value):
        self.value = value


class _InLine:
    """An executor of one slot that runs nothing: each task's row is made here, at once."""

    slots = 1

    def submit(self, fn, path, note, timeout=None):
        return _Done(({"name": path, "status": OK, "note": note}, ("key", path)))

    def wait_first(self, pending):
        first = next(iter(pending))
        return {first}, set(pending) - {first}

    def result(self, fut):
        return fut.value

    @staticmethod
    def died(e):
        return None


def test_a_folder_found_to_be_one_run_counts_as_one_trace_in_the_progress(monkeypatch):
    """Mutant: batch/fleet.py run_batch ``total -= len(files) - 1`` -> ``// 1``: when a folder of three
    files turned out to be the ranks of one run, the progress total lost all three instead of the
    two the run replaces (its docstring: ``total`` shrinks when a folder turns out to be one run),
    so the bar ended at 2 of 1. By hand: one file and a folder of three, 4 tasks; the three files'
    rows, then the run analysed again as one trace: 2 traces, 2 rows."""
    import tracekit.trace.runs
    from tracekit.batch.fleet import run_batch
    from tracekit.batch.inputs import Item

    monkeypatch.setattr(tracekit.trace.runs, "check_one_run", lambda folder, keys: None)
    items = [Item("one.json", ["one.json"]), Item("run", ["run/r0.json", "run/r1.json", "run/r2.json"])]
    seen: list = []
    rows = run_batch(items, _InLine(), progress=lambda done, total: seen.append((done, total)))
    assert [r["name"] for r in rows] == ["one.json", "run"]
    assert seen == [(1, 4), (1, 4), (1, 4), (1, 2), (2, 2)]


def test_a_trace_from_a_clock_some_hours_ahead_still_has_its_recording_date():
    """Mutant: batch/rows.py _recorded_ns ``366 * 86400 * 10**9`` -> ``366 / 86400 * 10**9``: the
    slack for a trace's clock running ahead of this machine's shrank from a year to 4 ms, so a
    trace recorded on a machine whose clock is some hours ahead (another time zone's time set as
    UTC: up to 14 h) got no recording date. 14 hours ahead of now is a date; 10**6 times now
    (nanoseconds read as microseconds) is not."""
    import time

    from tracekit.batch.rows import _recorded_ns

    ahead = time.time_ns() + 14 * 3600 * 10**9
    assert _recorded_ns({}, ahead) == ahead
    assert _recorded_ns({}, time.time_ns() * 10**3) is None


def test_a_frame_read_in_pieces_leaves_the_next_frame_whole(monkeypatch):
    """Mutant: batch/worker.py _frame ``os.read(fd, need - len(buf))`` -> ``need | len(buf)``: when a
    frame arrived in pieces (a pipe read returns what is there, not all that was asked), the
    reader asked for more than the frame's rest and took the next frame's first bytes, which were
    then lost. Two frames written back to back (8-byte big-endian length, then the bytes), read
    2 bytes at a time at most: b"hello", then b"world!", then end-of-file."""
    import os
    import struct
    import time
    import types

    from tracekit.batch import worker

    monkeypatch.setattr(worker, "os", types.SimpleNamespace(read=lambda fd, n: os.read(fd, min(n, 2))))
    r, w = os.pipe()
    try:
        os.write(w, struct.pack("!Q", 5) + b"hello" + struct.pack("!Q", 6) + b"world!")
        os.close(w)
        deadline = time.monotonic() + 10
        assert worker._frame(r, deadline) == b"hello"
        assert worker._frame(r, deadline) == b"world!"
        assert worker._frame(r, deadline) is None
    finally:
        os.close(r)


# --- seed 55 (the sample's survivors in tracekit/batch, coverage-map mode) ------------------------


def test_local_workers_start_from_the_forkserver_not_from_a_fork_of_the_batch():
    """Mutant: batch/executors.py LocalProcesses.__init__ ``"forkserver" if "forkserver" in methods``
    -> ``if not "forkserver" in methods``: where the forkserver exists, the workers took the
    platform's default start method instead (fork on Linux), each a fork of the batch's own,
    threaded process. The class's rule: workers start from a clean forkserver process that has
    tracekit imported, not from a fork of this one. So a worker's parent process is the server,
    never this process: ``os.getppid()`` run in the worker is not our pid."""
    import multiprocessing
    import os

    import pytest

    from tracekit.batch.executors import LocalProcesses

    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("this platform has no forkserver start method")
    ex = LocalProcesses(1)
    try:
        fut = ex.submit(os.getppid, timeout=60)
        done, rest = ex.wait_first({fut})
        assert done == {fut} and not rest
        parent = ex.result(fut)
    finally:
        ex.close()
    assert parent != os.getpid()


def _run_one(fn, *args):
    """``fn(*args)`` in one local worker process: its future, settled."""
    from tracekit.batch.executors import LocalProcesses

    ex = LocalProcesses(1)
    try:
        fut = ex.submit(fn, *args, timeout=60)
        done, rest = ex.wait_first({fut})
        assert done == {fut} and not rest
        return fut
    finally:
        ex.close()


def test_a_task_that_raises_gives_back_its_own_exception():
    """Mutant: batch/executors.py _work ``except BaseException`` -> an exception nothing raises: a
    task's exception escaped the worker, which died with exit status 1 and sent nothing, so the
    batch saw "the worker process died" (WorkerDied) instead of the error. The module's docstring:
    ``result`` gives the value or the task's exception. ``int("x")`` raises ValueError."""
    import pytest

    from tracekit.batch.executors import LocalProcesses

    fut = _run_one(int, "x")
    with pytest.raises(ValueError, match="invalid literal for int"):
        LocalProcesses.result(fut)


def test_a_worker_killed_by_a_signal_python_has_no_name_for_gives_its_number():
    """Mutant: batch/executors.py _exit_text ``except ValueError`` -> an exception nothing raises: a
    worker ended by a signal that ``signal.Signals`` does not name (the real-time ones between
    SIGRTMIN and SIGRTMAX, here SIGRTMIN + 1, whose default action ends the process) made
    ``signal.Signals(n)`` raise ValueError out of the batch's wait, instead of a WorkerDied
    saying "signal N"."""
    import signal

    import pytest

    from tracekit.batch.executors import LocalProcesses, WorkerDied

    if not hasattr(signal, "SIGRTMIN"):
        pytest.skip("this platform has no real-time signals")
    n = int(signal.SIGRTMIN) + 1
    with pytest.raises(ValueError):
        signal.Signals(n)  # the premise: Python has no name for it
    fut = _run_one(signal.raise_signal, n)
    with pytest.raises(WorkerDied) as e:
        LocalProcesses.result(fut)
    assert str(e.value) == f"signal {n}"


def test_a_result_that_does_not_pickle_comes_back_as_an_error_naming_its_type():
    """Mutant: batch/executors.py _work ``type(out[1])`` -> ``type(out[2])`` in the message for a
    result that does not pickle: out is (ok, value), so out[2] raised IndexError in the worker,
    which died without a word (WorkerDied) instead of sending a RuntimeError that names the
    value's type. A memoryview does not pickle; the message starts with its type's name."""
    import pytest

    from tracekit.batch.executors import LocalProcesses

    fut = _run_one(memoryview, b"ab")
    with pytest.raises(RuntimeError, match=r"^memoryview: <memory at .*\(unpicklable: .*memoryview"):
        LocalProcesses.result(fut)


def test_a_json_output_keeps_one_schema_version_while_the_batch_runs_and_after(tmp_path):
    """Mutant: batch/fleet.py Fleet.to_dict ``"schema_version": 1`` -> ``2``: a `-o fleet.json`
    output read while the batch runs (a fleet document, valid JSON after every row) gave one
    schema version, and the full table that replaces it at the end (docs/batch.md: "Rows are
    written as they finish") another, so a reader that checks the version took the same file
    for two formats. The document written while the batch runs is the CLI's (its journal); the
    one written at the end is ``Fleet.to_dict()``: both are the same kind, "tracekit.fleet", at
    the same version."""
    import json
    import types

    from tracekit.cli.batch import _journals

    path = tmp_path / "fleet.json"
    (journal,), scratch = _journals([(types.SimpleNamespace(name="json"), str(path), None)], make_parent=False)
    journal.close()
    running = json.loads(path.read_text(encoding="utf-8"))
    final = Fleet([]).to_dict()
    assert scratch is None and running["complete"] is False
    assert (final["kind"], final["schema_version"]) == (running["kind"], running["schema_version"])
    assert final["kind"] == "tracekit.fleet"


# --- seed 56 (the sample's survivors in tracekit/batch, coverage-map mode) ------------------------


def test_a_zero_value_takes_no_part_in_the_outlier_fences():
    """Mutant: batch/fleet.py mark_outliers ``v > 0`` -> ``v >= 0``: a value of 0 (a rate of 0 tokens/s)
    was taken onto the log scale, and math.log10(0) raised ValueError, so a fleet holding one such
    row could not be built at all. docs/batch.md: outliers are judged on a log scale over the
    column's values; 0 has no place on it, so it is left out (and its row not flagged). By hand:
    log10 of 1, 10, 100, 100 (the zero left out): quartiles (linear, n=4) 0.75 and 2, IQR 1.25,
    fences -1.125 and 3.875: none is out."""
    rows = [{"status": OK, "decode_tokens_per_s": v} for v in (0.0, 1.0, 10.0, 100.0, 100.0)]
    Fleet(rows)
    assert [r["outliers"] for r in rows] == [""] * 5


def test_a_folder_with_three_unread_files_names_all_three():
    """Mutant: batch/fleet.py _one_run ``unread[:3]`` -> ``unread[:2]``: the note on a folder whose
    files could not all be analysed named only two of them, yet said "and others" only past three,
    so with three unread files one was never named. Rule of the sentence: it names the files it
    can (up to three) and says "and others" for the rest, so a sentence without "and others"
    names every unread file. By hand: r0, r1, r2 failed, r3 read: all three named; with r3 failed
    too, the first three and "and others"."""
    from tracekit.batch.inputs import Item

    def note(failed):
        names = ["r0.json", "r1.json", "r2.json", "r3.json"]
        rows = {(0, i): {"name": n, "status": ERROR if n in failed else OK} for i, n in enumerate(names)}
        group = {"item": Item("run", [f"run/{n}" for n in names]), "rows": rows, "keys": {}}
        return _one_run(group, check=None)

    assert note({"r0.json", "r1.json", "r2.json"}) == (
        "analysed file by file, not as one run: r0.json, r1.json, r2.json in run could not be analysed"
    )
    assert note({"r0.json", "r1.json", "r2.json", "r3.json"}) == (
        "analysed file by file, not as one run: r0.json, r1.json, r2.json and others in run could not be analysed"
    )


def test_a_trace_from_a_clock_a_day_and_more_ahead_still_has_its_recording_date():
    """Mutant: batch/rows.py _recorded_ns ``366 * 86400 * 10**9`` -> ``366 + 86400 * 10**9``: the slack
    for a trace's clock running ahead of this machine's shrank from a year to one day (and 366 ns).
    Two machines that each keep their local time as UTC (a dual-boot habit) differ by up to 26 hours:
    the one at UTC+14 is 14 h ahead of UTC, the one at UTC-12 12 h behind. A trace recorded on the
    first and batched on the second starts 26 h "in the future" and is still wall-clock time; 10**3
    times now (nanoseconds read as microseconds) is not."""
    import time

    from tracekit.batch.rows import _recorded_ns

    ahead = time.time_ns() + 26 * 3600 * 10**9
    assert _recorded_ns({}, ahead) == ahead
    assert _recorded_ns({}, time.time_ns() * 10**3) is None


# --- seed 57 (the sample's survivors in tracekit/batch, coverage-map mode) ------------------------


def test_a_worker_killed_by_a_named_signal_gives_the_signals_name():
    """Mutant: batch/executors.py _exit_text ``signal.Signals(-code)`` -> ``Signals(+code)``: a
    worker ended by a signal (a negative exit code, -N) was looked up as signal -N, which has no
    name, so the batch said "signal 9" where the original names it. By hand: a task that sends
    its own process SIGKILL (9, which cannot be caught) ends the worker with exit code -9; the
    batch's WorkerDied says "signal SIGKILL"."""
    import signal

    import pytest

    from tracekit.batch.executors import LocalProcesses, WorkerDied

    fut = _run_one(signal.raise_signal, signal.SIGKILL)
    with pytest.raises(WorkerDied) as e:
        LocalProcesses.result(fut)
    assert str(e.value) == "signal SIGKILL"


def test_the_upper_quartile_of_four_values_interpolates_between_the_top_two():
    """Mutant: batch/fleet.py _quartiles ``s[min(lo + 1, len(s) - 1)]`` -> ``len(s) - 2``: with four
    values (the fewest that are judged) the third quartile, at position 0.75 x 3 = 2.25 (a quarter
    of the way from the 3rd value to the 4th), lost its interpolation and became the 3rd value,
    so the upper fence shrank and a value inside it was flagged. Linear interpolation (numpy's
    default, as the module says). By hand: log10 of 1, 10, 100, 10000 is 0, 1, 2, 4; quartiles
    0 + 0.75 x 1 = 0.75 and 2 + 0.25 x 2 = 2.5, IQR 1.75, fences 0.75 - 2.625 = -1.875 and
    2.5 + 2.625 = 5.125: 4 is inside, nothing is flagged (the mutant's fence was 3.875)."""
    from tracekit.batch.fleet import _quartiles

    assert _quartiles([0.0, 1.0, 2.0, 4.0]) == (0.75, 2.5)
    rows = [{"status": OK, "decode_tokens_per_s": v} for v in (1.0, 10.0, 100.0, 10000.0)]
    Fleet(rows)
    assert [r["outliers"] for r in rows] == [""] * 4


# --- seed 58 (the sample's survivors in tracekit/batch, coverage-map mode) ------------------------


def test_a_local_dask_cluster_names_its_worker_processes_in_the_singular_only_for_one(monkeypatch):
    """Mutant: batch/executors.py DaskCluster.__init__ ``'es' if jobs != 1`` -> ``jobs <= 1``: the
    executor the batch names (the fleet's ``executor``) read "1 worker processes" and "2 worker
    process". English plural, as the local executor's own "1 local process" / "2 local processes".
    ``distributed`` is a stand-in (its LocalCluster starts nothing; its Client reports one thread
    per worker asked for), so no cluster is started."""
    import sys
    import types

    from tracekit.batch.executors import DaskCluster

    def local_cluster(n_workers, **_):
        return types.SimpleNamespace(n_workers=n_workers, close=lambda: None)

    def client(cluster, **_):
        return types.SimpleNamespace(
            nthreads=lambda: {f"tcp://w{i}": 1 for i in range(cluster.n_workers)}, close=lambda: None
        )

    fake = types.SimpleNamespace(LocalCluster=local_cluster, Client=client)
    monkeypatch.setitem(sys.modules, "distributed", fake)
    for jobs, want in (
        (1, "a local Dask cluster of 1 worker process"),
        (2, "a local Dask cluster of 2 worker processes"),
    ):
        ex = DaskCluster("local", jobs)
        assert (ex.description, ex.slots) == (want, jobs)
        ex.close()


def test_a_journal_on_a_full_disk_is_one_sentence():
    """Mutant: batch/journal.py _put ``except OSError`` -> an exception nothing raises: a journal
    whose write fails (the disk full: /dev/full fails every write with ENOSPC) escaped as a bare
    OSError (a traceback mid-batch) instead of the TracekitError "cannot write PATH: ..." that
    opening it gives (``_open``, the same words). The CSV journal writes its header at once."""
    import os

    import pytest

    from tracekit.batch.journal import CsvJournal, JsonJournal
    from tracekit.errors import TracekitError

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    for journal in (CsvJournal, lambda p: JsonJournal(p, {})):
        with pytest.raises(TracekitError, match="^cannot write /dev/full: No space left on device$"):
            journal("/dev/full")


# --- seed 59 (the sample's survivors in tracekit/batch, coverage-map mode) ------------------------


def test_only_a_killed_dask_worker_is_named_as_the_workers_dying():
    """Mutant: batch/executors.py DaskCluster.died ``type(exc).__name__ == "KilledWorker"`` -> ``>``:
    the names after "KilledWorker" in alphabetical order (ValueError, MemoryError, OSError, ...)
    were all reported as "the Dask workers analysing this trace died", and a real KilledWorker
    was not, so its row read "internal error: KilledWorker: ..." (fleet.py, where died() gives
    None). distributed raises ``distributed.scheduler.KilledWorker`` when a task's workers keep
    dying; died() knows it by its name only, so a class of that name stands in for it."""
    from tracekit.batch.executors import DaskCluster

    killed = type("KilledWorker", (Exception,), {})
    said = DaskCluster.died(killed("task analyse_path-1 marked as failed because 3 workers died"))
    assert said is not None and "Dask workers analysing this trace died" in said
    for exc in (ValueError("bad trace"), MemoryError(), OSError("gone"), TimeoutError(), RuntimeError("x")):
        assert DaskCluster.died(exc) is None, exc


def test_a_value_exactly_on_tukeys_upper_fence_is_not_an_outlier():
    """Mutant: batch/fleet.py mark_outliers ``v > hi`` -> ``v >= hi``: a value on the upper fence was
    flagged (the lower fence's twin, above). log10 of the five values: 0, 0, 1, 2, 5; quartiles
    (linear, n=5) 0 and 2, IQR 2, fences 0 - 3 = -3 and 2 + 3 = 5: 1e5 sits on the upper fence,
    inside it; 1e6 (log 6) would be out."""
    rows = [{"status": OK, "prefill_step_p50_ms": v} for v in (1.0, 1.0, 10.0, 100.0, 1e5)]
    Fleet(rows)
    assert [r["outliers"] for r in rows] == [""] * 5
    rows = [{"status": OK, "prefill_step_p50_ms": v} for v in (1.0, 1.0, 10.0, 100.0, 1e6)]
    Fleet(rows)
    assert [r["outliers"] for r in rows] == ["", "", "", "", "prefill_step_p50_ms"]


def test_a_batch_stopped_after_a_folder_was_analysed_as_one_run_keeps_the_runs_row_alone(monkeypatch):
    """Mutant: batch/fleet.py run_batch ``(group, 0)`` -> ``(group, 1)``: the row of a folder analysed
    again as one run took the slot of its second file instead of its first, where ``_so_far``
    looks for it (its comment: "the run's row stands for its files"), so a batch stopped after
    that row was done listed the first file's own row beside the run's. By hand: a folder of two
    files that are one run, then a file; one slot; the batch is stopped (Ctrl-C) while the file
    is analysed: the run's row alone, and 2 traces in all (the folder counts as one)."""
    import pytest

    import tracekit.trace.runs
    from tracekit.batch.fleet import Interrupted, run_batch
    from tracekit.batch.inputs import Item

    class Stopped(_InLine):
        def wait_first(self, pending):
            if any(fut.value[0]["name"] == "other.json" for fut in pending):
                raise KeyboardInterrupt
            return super().wait_first(pending)

    monkeypatch.setattr(tracekit.trace.runs, "check_one_run", lambda folder, keys: None)
    items = [Item("run", ["run/r0.json", "run/r1.json"]), Item("other.json", ["other.json"])]
    with pytest.raises(Interrupted) as e:
        run_batch(items, Stopped())
    assert [r["name"] for r in e.value.rows] == ["run"]
    assert e.value.rows[0]["note"] == "the ranks of one run: 2 files"
    assert e.value.total == 2


def test_a_batch_reads_a_runs_rank_files_one_by_one_in_its_own_process(tmp_path, monkeypatch):
    """Mutant: batch/rows.py analyse_path ``read_trace(path, jobs=1)`` -> ``jobs=0``: a folder of one
    run's ranks was read by one process per CPU (trace/parallel.py jobs_for: "``jobs`` 0: one per
    CPU"), even a small one (a stated number skips the small-folder rule), from every batch task
    not in a daemonic worker (a Dask worker without a nanny, a caller of analyse_path). The
    comment there: a batch keeps every CPU busy with its traces already, "so a run's ranks are
    read here one by one" (docs/ranks.md: ``--jobs 1`` reads them one by one). Two hand-built
    ranks of a world of 2, one kernel each, overlapping; four CPUs stated, so that one per CPU is
    more than one whatever this machine has. The row is ok, read with jobs 1."""
    from kineto import Doc

    import tracekit.trace.parallel as parallel
    from tracekit.batch.rows import analyse_path

    for rank in (0, 1):
        d = Doc(rank=rank, world=2)
        ext = d.op("aten::mm", 10.0, 30.0)
        d.kernel("ampere_sgemm_64x64_nn", 12.0, 20.0, 5.0, ext=ext)
        d.write(tmp_path / f"rank{rank}.json")
    jobs: list = []
    read_files = parallel.read_files

    def counted(read_one, files, n, progress=None):
        jobs.append(n)
        return read_files(read_one, files, n, progress)

    monkeypatch.setattr(parallel, "read_files", counted)
    monkeypatch.setattr(parallel, "usable_cpus", lambda: 4)
    row, key = analyse_path(str(tmp_path))
    assert row["status"] == OK, row
    assert jobs == [1]
