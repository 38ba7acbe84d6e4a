"""Behaviours of tracekit.analysis that surviving mutants (seed-30 sample) showed no test pinned: the
KV-cache write's note, the HTA adapter's note on files read as fewer ranks, running_end's
one-group-at-a-time path, where a launch-pattern step ends, and which pooled components' bytes are a
lower bound in a prefill step. Expected figures are hand arithmetic on hand-built inputs or the module
docstrings' stated conventions."""

from __future__ import annotations

from importlib import metadata

import numpy as np
import pytest
from kineto import Doc

from tracekit import read_trace
from tracekit.analysis.pricing.op_costs import price
from tracekit.analysis.steps import segment as seg
from tracekit.analysis.waiting.intervals import running_end

BF16, FP8, I64, F32 = "c10::BFloat16", "c10::Float8_e4m3fn", "long int", "float"


def _has_dist(name: str) -> bool:
    try:
        metadata.distribution(name)
        return True
    except metadata.PackageNotFoundError:
        return False


HTA_DIST = next((d for d in ("traceinsight", "holistictraceanalysis") if _has_dist(d)), None)
needs_hta = pytest.mark.skipif(HTA_DIST is None, reason="HTA is not installed: pip install 'tracekit[hta]'")


# --- costs: reshape_and_cache's note ------------------------------------------------------------


def test_reshape_and_cache_note_counts_keys_plus_values():
    """catches: the note of the KV-cache write counting the new elements as anything but keys +
    values (e.g. ``key.numel & value.numel``: 96 & 96 = 96, half the 192 really written)."""
    kv = [6, 2, 8]  # 96 elements each
    cost = price(
        "_C_cache_ops::reshape_and_cache_flash",
        [kv, kv, [50, 16, 2, 8], [50, 16, 2, 8], [6], [], [], []],
        [BF16, BF16, FP8, FP8, I64, "", F32, F32],
    )
    assert cost.note.startswith("192 new key/value elements written at 1 byte(s) each")


# --- hta: files read as fewer ranks -----------------------------------------------------------


def _one_kernel_trace(path):
    d = Doc()  # no distributedInfo: HTA takes the file as rank 0
    d.kernel("a_kernel", 1000.0, 1005.0, 10.0)
    return str(d.write(path))


@needs_hta
def test_hta_notes_two_files_read_as_one_rank_and_only_then(tmp_path):
    """catches: the note "HTA read N files as M rank(s)" given when every file became its own rank
    (the test ``len(traces) < len(readable)`` flipped), or not given when two rank-less files
    collapse into rank 0."""
    from tracekit.analysis.hta import run_hta

    one = run_hta(_one_kernel_trace(tmp_path / "a.json"))
    assert one["ranks"] == [0]
    assert not any(n.startswith("HTA read") for n in one["notes"]), one["notes"]
    two = run_hta([_one_kernel_trace(tmp_path / "a.json"), _one_kernel_trace(tmp_path / "b.json")])
    assert two["ranks"] == [0]
    assert any(n.startswith("HTA read 2 files as 1 rank(s)") for n in two["notes"]), two["notes"]


# --- intervals: the wide path -----------------------------------------------------------------


def test_running_end_per_group_when_ends_are_too_wide_to_key():
    """catches: running_end's one-group-at-a-time path (ends spanning more than 2^62 / groups, so
    they cannot be keyed apart in int64) skipped, leaving its output uninitialised."""
    big = 1 << 61
    group = np.array([0, 0, 0, 1, 1, 2], dtype=np.int64)
    ends = np.array([5, big, 7, 3, 2, -big], dtype=np.int64)  # span 2^62 + 1 > 2^62 / 3 groups
    assert running_end(group, ends).tolist() == [5, big, big, 3, 3, -big]


# --- launches: where a step ends --------------------------------------------------------------


def test_launch_pattern_step_ends_one_ns_before_the_next_begins(tmp_path):
    """catches: a launch-pattern step's end computed as anything but the next step's first launch
    minus 1 ns (e.g. ``start ^ 1``, which on an even start lands 1 ns after it, overlapping the
    next step)."""
    d = Doc()
    ts = 1000.0
    for _ in range(6):  # six steps: one head kernel, two of a repeated layer kernel, then a pause
        for name in ("a_step_head_kernel", "b_layer_kernel", "b_layer_kernel"):
            d.kernel(name, ts, ts + 5.0, 10.0)
            ts += 20.0
        ts += 500.0
    s = seg.segment(read_trace(d.write(tmp_path / "steps.json")))
    assert s.source == seg.SOURCE_LAUNCHES
    starts = [int(x) for x in s.steps["cpu_start_ns"]]
    ends = [int(x) for x in s.steps["cpu_end_ns"]]
    # Steps start 560 us apart from 1000 us (even ns): each ends 1 ns before the next starts.
    assert starts == [1_000_000 + 560_000 * j for j in range(6)]
    assert ends[:-1] == [s_next - 1 for s_next in starts[1:]]
    # The last ends with its last launch: the last layer kernel's launch at 3800 + 40 us, 2 us long.
    assert ends[-1] == starts[-1] + 42_000


# --- model_costs: which bytes are a lower bound ------------------------------------------------


def test_only_attention_bytes_of_an_unstated_prefix_prefill_are_a_lower_bound():
    """catches: the lower-bound mark of a prefill whose cached keys are not stated given to other
    components than attention (e.g. the test ``component == "attention"`` turned into ``>=``, which
    marks linear, norm, etc. too), although their bytes do not depend on the cached prefix."""
    from tracekit.analysis.pricing.model_costs import LOWER, _bytes_estimate
    from tracekit.frameworks import PREFILL
    from tracekit.models import costs as mc

    sides = {PREFILL: mc.Side(requests=2, tokens=512, kv_tokens=None, pairs=None, logit_tokens=2)}
    assert _bytes_estimate("attention", sides, None) == LOWER
    for component in ("linear", "lm_head", "routing", "linear_attention", "communication"):
        assert _bytes_estimate(component, sides, None) is None, component
