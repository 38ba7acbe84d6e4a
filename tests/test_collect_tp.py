"""``tracekit collect --tp N``: a real tensor-parallel run of the tiny preset over 2 gloo ranks on the CPU.

One successful run (the session fixture ``tp2_run`` in conftest.py) serves every test here and
any other test that wants genuine multi-rank traces; one failing run (a rank made to fail)
checks the clean-up. The bad-input tests never start a rank.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from click.testing import CliRunner  # noqa: E402
from conftest import TP2_ARGS  # noqa: E402

import tracekit  # noqa: E402
from tracekit import markers  # noqa: E402
from tracekit.analysis.steps.segment import DECODE, PREFILL, SOURCE_MARKERS, segment  # noqa: E402
from tracekit.cli import main  # noqa: E402
from tracekit.collect.parallel_rank import FAIL_RANK_ENV  # noqa: E402
from tracekit.collect.workloads import PRESETS  # noqa: E402

TINY = PRESETS["tiny"].config
HIDDEN, HEADS, KV, INTER = (
    TINY["hidden_size"],
    TINY["num_attention_heads"],
    TINY["num_key_value_heads"],
    TINY["intermediate_size"],
)
HEAD_DIM = HIDDEN // HEADS
LAYERS, VOCAB = TINY["num_hidden_layers"], TINY["vocab_size"]
NEW_TOKENS = int(TP2_ARGS[TP2_ARGS.index("-n") + 1])
PROMPT = int(TP2_ARGS[TP2_ARGS.index("-p") + 1])
FORWARDS = 1 + NEW_TOKENS  # one prefill, then one forward per decode step


@pytest.fixture(scope="module")
def rank_traces(tp2_run):
    return [tracekit.read_trace(tp2_run / f"rank{r}{markers.TRACE_SUFFIX}") for r in range(2)]


def _raw(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _weight_shapes(trace) -> set[tuple[int, int]]:
    """(out, in) of every aten::linear weight the rank ran."""
    ops = trace.cpu_ops
    shapes = set()
    for dims in ops.loc[ops["name"] == "aten::linear", "input_dims"]:
        d = json.loads(dims)
        shapes.add(tuple(d[1]))
    return shapes


# -- what the run writes -----------------------------------------------------------------------


def test_one_trace_and_one_sidecar_per_rank_and_nothing_else(tp2_run):
    assert sorted(os.listdir(tp2_run)) == [
        "rank0.pt.trace.json.gz",
        "rank0.tracekit.json",
        "rank1.pt.trace.json.gz",
        "rank1.tracekit.json",
    ]


def test_summary_says_where_and_what_next(tp2_collect):
    folder, result = tp2_collect
    out = result.stdout
    assert f"wrote 2 rank traces to {os.path.relpath(folder)}" in out or f"wrote 2 rank traces to {folder}" in out
    assert out.strip().splitlines()[-1].startswith("next:    tracekit report ")
    assert out.strip().splitlines()[-1].endswith(str(folder.name))
    assert "2 ranks over gloo" in out


def test_each_trace_records_its_rank_in_distributed_info(tp2_run):
    for r in range(2):
        info = _raw(tp2_run / f"rank{r}.pt.trace.json.gz")["distributedInfo"]
        assert info["rank"] == r and info["world_size"] == 2 and info["backend"] == "gloo"


def test_reader_merges_the_folder_as_one_run(tp2_run, rank_traces):
    merged = tracekit.read_trace(tp2_run)  # runs.check_one_run refuses folders that are not one run
    assert set(merged.cpu_ops["rank"]) == {0, 1}
    assert len(merged.cpu_ops) == sum(len(t.cpu_ops) for t in rank_traces)
    # The ranks were profiled together: their spans overlap.
    assert max(t.start_ns for t in rank_traces) < min(t.end_ns for t in rank_traces)


def test_every_layer_all_reduces_twice_per_forward_with_time_in_gloo(rank_traces):
    for t in rank_traces:
        ops = t.cpu_ops
        calls = ops[ops["name"] == "c10d::allreduce_"]
        assert len(calls) == 2 * LAYERS * FORWARDS  # after o_proj and after down_proj, every layer
        # On the CPU the collective's work is the gloo:all_reduce range (c10d::allreduce_ only enqueues it).
        ann = t.annotations
        gloo = ann[ann["name"] == "gloo:all_reduce"]
        assert len(gloo) == len(calls)
        assert gloo["dur_ns"].sum() > 0 and calls["dur_ns"].sum() > 0
        # Each all-reduce sums a full-width activation: batch x tokens x hidden.
        dims = {json.loads(d)[0][0][-1] for d in calls["input_dims"]}
        assert dims == {HIDDEN}


def test_each_rank_has_one_prefill_and_every_decode_step(rank_traces):
    for t in rank_traces:
        seg = segment(t)
        assert seg.source == SOURCE_MARKERS
        phases = list(seg.steps["phase"])
        assert phases.count(PREFILL) == 1 and phases.count(DECODE) == NEW_TOKENS


def test_projections_have_the_sharded_shapes(rank_traces):
    per_rank = {
        (HEADS // 2 * HEAD_DIM, HIDDEN),  # q_proj: column-parallel, hidden/2 outputs
        (KV // 2 * HEAD_DIM, HIDDEN),  # k_proj, v_proj
        (HIDDEN, HEADS // 2 * HEAD_DIM),  # o_proj: row-parallel
        (INTER // 2, HIDDEN),  # gate_proj, up_proj
        (HIDDEN, INTER // 2),  # down_proj
        (VOCAB, HIDDEN),  # lm_head, replicated
    }
    for t in rank_traces:
        assert _weight_shapes(t) == per_rank
        assert (HIDDEN, HIDDEN) not in _weight_shapes(t)  # no unsharded q_proj
    assert (HEADS // 2 * HEAD_DIM) == HIDDEN // 2


def test_sidecars_describe_the_whole_model_and_the_rank(rank_traces):
    cal0 = rank_traces[0].sidecar["calibration"]
    for r, t in enumerate(rank_traces):
        w = t.sidecar["workload"]
        assert w["model_config"]["num_attention_heads"] == HEADS  # the whole model: analysis divides by TP
        assert w["tensor_parallel"]["rank"] == r and w["tensor_parallel"]["world_size"] == 2
        assert w["tensor_parallel"]["shard"]["num_attention_heads"] == HEADS // 2
        assert w["tensor_parallel"]["parameters_per_rank"] < w["parameters"]
        assert w["prompt_len"] == PROMPT and w["new_tokens"] == NEW_TOKENS
        assert len(t.sidecar["timing"]["tpot_ms"]) == NEW_TOKENS
        cal = t.sidecar["calibration"]
        assert cal["matmul_flops"] == cal0["matmul_flops"] and cal["copy_bandwidth"] > 0  # measured once, shared
    assert rank_traces[1].sidecar["calibration"]["shared_from_rank"] == 0
    # The trace's own metadata names its sidecar.
    meta = rank_traces[1].metadata["tracekit"]
    assert (json.loads(meta) if isinstance(meta, str) else meta)["sidecar"] == "rank1.tracekit.json"


def test_analysis_takes_tp_from_the_trace(rank_traces):
    from tracekit.analysis.workload import choose_tp

    assert choose_tp(rank_traces[0], None)[0] == 2


# -- refusals: one sentence, exit 2, nothing started -------------------------------------------


def _refused(args, tmp_path: Path) -> str:
    res = CliRunner().invoke(main, ["collect", *args, "-o", str(tmp_path / "out"), "--no-progress"])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    msg = res.stderr.strip()
    assert msg.startswith("tracekit: error: ") and len(msg.splitlines()) == 1
    assert not (tmp_path / "out").exists()
    return msg


def test_tp_that_does_not_divide_the_heads_is_refused(tmp_path):
    msg = _refused(["--tp", "3"], tmp_path)
    assert "--tp 3 does not divide" in msg and f"attention heads ({HEADS})" in msg
    # KV heads are checked on their own: --tp 4 divides the heads and the MLP, not the 2 KV heads.
    msg = _refused(["--tp", "4"], tmp_path)
    assert msg.endswith(f"choose a --tp that divides {HEADS} heads, {KV} KV heads and intermediate size {INTER}")
    assert f"KV heads ({KV})" in msg and "attention heads" not in msg.split(": choose")[0]


def test_tp_below_one_is_refused(tmp_path):
    assert "--tp must be at least 1, not 0" in _refused(["--tp", "0"], tmp_path)
    assert "at least 1" in _refused(["--tp", "-2"], tmp_path)


def test_tp_with_a_script_or_checkpoint_is_refused(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("print(1)\n")
    assert "built-in presets" in _refused(["--tp", "2", "--script", str(script)], tmp_path)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    assert "--model is not supported" in _refused(["--tp", "2", "--model", str(ckpt)], tmp_path)
    assert "--compile" in _refused(["--tp", "2", "--compile"], tmp_path)


def test_an_output_trace_file_name_is_refused(tmp_path):
    res = CliRunner().invoke(main, ["collect", "--tp", "2", "-o", str(tmp_path / "x.pt.trace.json.gz")])
    assert res.exit_code == 2 and "names a folder" in res.stderr


def test_a_folder_holding_other_traces_is_refused(tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "nightly.pt.trace.json").write_text("{}")
    res = CliRunner().invoke(main, ["collect", "--tp", "2", "-o", str(out), "--force"])
    assert res.exit_code == 2 and "already holds other traces (nightly.pt.trace.json)" in res.stderr
    assert sorted(os.listdir(out)) == ["nightly.pt.trace.json"]


def test_existing_rank_traces_need_force(tmp_path):
    out = tmp_path / "prev"
    out.mkdir()
    (out / "rank0.tracekit.json").write_text("{}")
    res = CliRunner().invoke(main, ["collect", "--tp", "2", "-o", str(out)])
    assert res.exit_code == 2 and "rank0.tracekit.json" in res.stderr and "--force" in res.stderr


# -- a rank that fails --------------------------------------------------------------------------


def _rank_processes(marker: str) -> list[int]:
    """Live processes whose command line mentions ``marker`` (this run's scratch folder)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
        except OSError:
            continue
        if "tracekit.collect.parallel_rank" in cmd and marker in cmd:
            found.append(int(pid))
    return found


@pytest.mark.slow  # a second collect run: the ranks start (import torch) before one fails
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="looks for leftover processes in /proc")
def test_a_failing_rank_is_named_and_leaves_nothing_behind(tmp_path, monkeypatch):
    out = tmp_path / "prev"
    out.mkdir()
    before = {"rank0.pt.trace.json.gz": b"old trace", "rank0.tracekit.json": b'{"old": true}'}
    for name, data in before.items():
        (out / name).write_bytes(data)
    monkeypatch.setenv(FAIL_RANK_ENV, "1")  # rank 1 raises in its first all-reduce; rank 0 waits in it
    res = CliRunner().invoke(main, ["collect", *TP2_ARGS, "-o", str(out), "--force"])
    assert res.exit_code == 2, res.output
    msg = res.stderr.strip().splitlines()[-1]
    assert msg == f"tracekit: error: rank 1 of 2 failed: RuntimeError: injected failure ({FAIL_RANK_ENV})"
    assert "Traceback" not in res.output
    # Nothing already there was overwritten, no scratch folder is left, no rank is still running.
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert _rank_processes(str(out)) == []


def test_default_folder_is_new_and_unique(tmp_path, monkeypatch):
    from tracekit.collect import parallel

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("tracekit.collect.collector.run_timestamp", lambda: "20260101-000000")
    first, created = parallel.resolve_folder(None, "tiny-tp2-bs1-p16-n4", False, 2)
    second, _ = parallel.resolve_folder(None, "tiny-tp2-bs1-p16-n4", False, 2)
    assert created and first == os.path.join("tracekit-traces", "tiny-tp2-bs1-p16-n4-20260101-000000")
    assert second == first + "-2"
