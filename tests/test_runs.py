"""Folders are runs: only the ranks of one run are merged into one timeline."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest
from click.testing import CliRunner
from conftest import real_trace_path

from tracekit import read_trace
from tracekit.cli import main
from tracekit.errors import TracekitError


def _as_rank(src, dst, rank: int, world: int, drop_last: int = 0):
    """A copy of a real trace that says it is ``rank`` of ``world`` (and, to be a different
    file, lacks its last ``drop_last`` events)."""
    with gzip.open(src, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    if drop_last:
        doc["traceEvents"] = doc["traceEvents"][:-drop_last]
    with gzip.open(dst, "wt", encoding="utf-8") as f:
        json.dump(doc, f)


def test_ranks_of_one_run_are_merged(tmp_path):
    src = real_trace_path("b300_moe")
    _as_rank(src, tmp_path / "rank0.json.gz", 0, 2)
    _as_rank(src, tmp_path / "rank1.json.gz", 1, 2, drop_last=1)
    t = read_trace(tmp_path)
    assert sorted(set(t.kernels["rank"])) == [0, 1] and len(t.metadata["files"]) == 2


def test_ranks_alike_in_every_other_way_are_merged_by_the_ranks_they_state(tmp_path):
    """Two files that state different ranks are never copies, even when they match in size,
    event count and first and last timestamps (the copy check's other facts: hand-built and
    synthetic ranks do). Fails if they are refused as "the same trace". Here rank 0 and rank 1
    are the same events, differing only in the rank their distributedInfo states."""
    src = real_trace_path("b300_moe")
    _as_rank(src, tmp_path / "rank0.json.gz", 0, 2)
    _as_rank(src, tmp_path / "rank1.json.gz", 1, 2)
    t = read_trace(tmp_path)
    assert sorted(set(t.kernels["rank"])) == [0, 1]


def test_unrelated_traces_are_not_merged(tmp_path):
    shutil.copy(real_trace_path("h100_hf"), tmp_path / "a.json.gz")
    shutil.copy(real_trace_path("mi300x_decode"), tmp_path / "b.json.gz")
    with pytest.raises(TracekitError, match="say no rank.*one by one.*tracekit batch"):
        read_trace(tmp_path)
    r = CliRunner().invoke(main, ["summary", str(tmp_path)])
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_a_copy_is_refused(tmp_path):
    src = real_trace_path("b300_moe")
    _as_rank(src, tmp_path / "rank0.json.gz", 0, 2)
    shutil.copy(tmp_path / "rank0.json.gz", tmp_path / "rank0-copy.json.gz")
    with pytest.raises(TracekitError, match="are the same trace"):
        read_trace(tmp_path)


def test_two_files_claiming_one_rank_are_refused(tmp_path):
    src = real_trace_path("b300_moe")
    _as_rank(src, tmp_path / "a.json.gz", 0, 2)
    _as_rank(src, tmp_path / "b.json.gz", 0, 2, drop_last=1)
    with pytest.raises(TracekitError, match="both rank 0"):
        read_trace(tmp_path)


def test_different_world_sizes_and_gpus_are_refused(tmp_path):
    src = real_trace_path("b300_moe")
    _as_rank(src, tmp_path / "a.json.gz", 0, 2)
    _as_rank(src, tmp_path / "b.json.gz", 1, 4, drop_last=1)
    with pytest.raises(TracekitError, match="world size"):
        read_trace(tmp_path)
    other = tmp_path / "gpus"
    other.mkdir()
    _as_rank(src, other / "a.json.gz", 0, 2)
    _as_rank(real_trace_path("mi300x_decode"), other / "b.json.gz", 1, 2)
    with pytest.raises(TracekitError, match="different GPUs|do not overlap"):
        read_trace(other)


@pytest.mark.parametrize(("first", "second"), [(2, "2x"), (2, [2]), (8, {"n": 8})])
def test_world_sizes_of_any_json_type_are_compared_without_a_traceback(tmp_path, first, second):
    """catches: distributedInfo is the file's own, untrusted: a world size of another JSON type
    beside a number (a string, a list, an object) raised TypeError (sorting str with int) or
    'unhashable type' instead of the folder's one sentence."""
    src = real_trace_path("b300_moe")
    _as_rank(src, tmp_path / "a.json.gz", 0, first)
    _as_rank(src, tmp_path / "b.json.gz", 1, second, drop_last=1)
    with pytest.raises(TracekitError, match="disagree on the world size"):
        read_trace(tmp_path, jobs=1)
