"""What the format does not promise must not change the report: the order of ``traceEvents``
(Kineto writes them grouped by kind, other tools and merges reorder them) and the clock's
origin (every trace has its own). Each real trace is rewritten with its events shuffled and every
timestamp moved by 1,000 s, and its JSON report must be the original's, key by key, but for the
source (the file's name, size). The expectation is the report of the untouched file: the
transformation is one the trace format says carries no meaning, so no figure may move.

Fails on any rule that reads meaning into file order or into absolute times: seen failing when
the reader keeps a table in file order instead of sorting it by start (``columns.py``: steps
then hold other kernels in the shuffled file); other such rules would be a step's first kernel
taken as the first in the file, or a gap measured from time 0."""

from __future__ import annotations

import gzip
import json
import random

import pytest
from conftest import real_trace_path
from json_paths import leaves, same

from tracekit import read_trace
from tracekit.analysis import analyze

SHIFT_US = 1_000_000_000  # 1,000 s: far from 0, still exact in a float64 of microseconds
# A microsecond timestamp near 1e12 shifted by 1e9 keeps its float64 digits to ~1e-4 us: figures
# agree to 1e-9 relative, or 1e-6 (ms) absolute.


@pytest.mark.parametrize("key", ["gb10_vllm", "h100_hf", "mi300x_extend", "a100_nccl", "rtx4080_nanovllm"])
def test_shuffled_and_shifted_events_give_the_same_report(key, tmp_path):
    src = real_trace_path(key)  # skips where ../shared/traces is absent
    doc = json.loads(gzip.decompress(src.read_bytes()))
    random.Random(27).shuffle(doc["traceEvents"])
    for e in doc["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] += SHIFT_US
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(doc))
    want, got = dict(leaves(analyze(read_trace(src)).to_dict())), dict(leaves(analyze(read_trace(moved)).to_dict()))
    differ = [
        k
        for k in sorted(set(want) | set(got))
        if not k.startswith(".source.") and not same(want.get(k, "<absent>"), got.get(k, "<absent>"), 1e-9, 1e-6)
    ]
    assert not differ, [(k, want.get(k, "<absent>"), got.get(k, "<absent>")) for k in differ[:10]]
