"""Tests written for the survivors of the mutation campaign's samples of tracekit/batch (issue 51,
part 5): each names the mutant it kills; the expected values are worked out by hand."""

from __future__ import annotations

from tracekit.batch.executors import _short
from tracekit.batch.fleet import Fleet, _so_far
from tracekit.batch.rows import OK


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
