"""Graph-capture folders and piecewise graphs (issue 46, items 2 and 3), on hand-built traces
written the way vLLM writes them (``graph_material``): FLOPs are worked out by arithmetic.

A capture folder (vLLM's ``capture_torch_profiler_dir``, ATOM's and SGLang's capture traces)
holds one trace per graph size: each replay must be priced from the graph captured at its own
size. A piecewise step replays one graph per piece, the same compiled piece once per layer:
each replayed kernel does the whole work of the captured op it replays.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from graph_material import ATTENTION_OP, GEMM_KERNEL, H100, GraphDoc, capture_trace, execute_name, linear, replay_step

from tracekit import read_trace
from tracekit.analysis import analyze
from tracekit.cli import main
from tracekit.models import costs, load_model

HIDDEN, QKV_OUT, ATTN_OUT = 2880, 5120, 4096  # gpt-oss-20b: hidden 2880, 64 + 2 x 8 heads of 64, 64 heads x 64


def _per_layer(tokens: int) -> int:
    """FLOPs of one layer's QKV and O GEMMs at ``tokens`` rows: 2 * M * N * K each."""
    return 2 * tokens * QKV_OUT * HIDDEN + 2 * tokens * HIDDEN * ATTN_OUT


# --- a folder of captures, one per decode batch size -------------------------------------------

LAYERS = 2
SIZES = (16, 32)


def _decode_capture(size: int, mode: str | None = "FULL") -> GraphDoc:
    """vLLM's FULL graph of a 2-layer decode step at ``size`` tokens: QKV and O GEMMs per layer."""
    ops = [op for _ in range(LAYERS) for op in (linear(size, QKV_OUT, HIDDEN), linear(size, HIDDEN, ATTN_OUT))]
    return capture_trace(size, mode, [ops])


def _capture_folder(tmp_path, names=None, sizes=SIZES):
    """The capture folder vLLM writes: one file per size, every name ``graph_capture_rank_0``."""
    folder = tmp_path / "capture_traces"
    folder.mkdir()
    for i, size in enumerate(sizes):
        name = (names or {}).get(size, f"graph_capture_rank_0.{1000 + i}.pt.trace.json.gz")
        _decode_capture(size, None if names else "FULL").write(folder / name)
    return folder


def _decode_replay(tmp_path, batches=(16, 32, 64)):
    """Decode steps of ``batches`` tokens, each one graph launch of the 4 GEMM kernels."""
    doc = GraphDoc(H100)
    t = 1000.0
    for b in batches:
        t = replay_step(doc, execute_name(b, prefill=False), [[(GEMM_KERNEL, 10.0)] * (2 * LAYERS)], t)
    return doc.write(tmp_path / "decode.json.gz")


def _step_flops(a) -> dict[int, float]:
    w = a.work
    return {int(s): float(w.loc[w["step"] == s, "flops"].sum(min_count=1)) for s in sorted(set(w["step"]))}


def test_a_capture_folder_prices_each_replay_from_the_graph_of_its_own_size(tmp_path):
    """Bug: the analysis took one capture trace only, so a capture folder (one trace per graph
    size) could price at most one size; here each decode step must take the shapes of the graph
    captured at its own batch: 2 layers x (2*16*5120*2880 + 2*16*2880*4096) FLOPs at batch 16,
    twice that at batch 32; the batch-64 step, which no file captured, none, and the note says
    which file priced which step and why the batch-64 replay found no graph."""
    folder = _capture_folder(tmp_path)
    captures = [read_trace(p) for p in sorted(folder.iterdir())]
    a = analyze(read_trace(_decode_replay(tmp_path)), capture=captures)
    flops = _step_flops(a)
    assert flops[0] == pytest.approx(LAYERS * _per_layer(16), rel=1e-12)
    assert flops[1] == pytest.approx(LAYERS * _per_layer(32), rel=1e-12)
    assert np.isnan(flops[2])
    w = a.work
    assert (w.loc[w["step"] < 2, "cost_source"] == "capture").all()
    assert w.loc[w["step"] == 2, "cost_reason"].str.contains("captured at batch 16, 32, this step ran batch 64").all()
    note = a.provenance["graph_capture"]
    assert f"2 capture traces in {folder}" in note
    assert "graph_capture_rank_0.1000.pt.trace.json.gz (batch 16) priced 1 replay in step 0" in note
    assert "graph_capture_rank_0.1001.pt.trace.json.gz (batch 32) priced 1 replay in step 1" in note
    assert "4 kernels of replays at batch 64 (in step 2) got no capture shapes" in note


def test_a_step_between_captured_sizes_replays_the_next_size_up(tmp_path):
    """Engines pad a batch up to the next captured graph (vLLM's CudagraphDispatcher, SGLang's
    CudaGraphRunner): a decode step of 20 tokens between captures at 16 and 32 replayed the
    32 graph and did its work: 2 layers x (2*32*5120*2880 + 2*32*2880*4096) FLOPs, with a note
    saying so. A step below every captured size (8) spans no captures: refused, as before.
    Bug: a padded step priced from no graph (or from the 16 graph, which did less work)."""
    folder = _capture_folder(tmp_path)
    captures = [read_trace(p) for p in sorted(folder.iterdir())]
    a = analyze(read_trace(_decode_replay(tmp_path, batches=(20, 8))), capture=captures)
    flops = _step_flops(a)
    assert flops[0] == pytest.approx(LAYERS * _per_layer(32), rel=1e-12)
    assert np.isnan(flops[1])
    note = a.provenance["graph_capture"]
    assert "replays at batch 20 (in step 0) were priced from the graph captured at 32" in note
    assert "kernels of replays at batch 8 (in step 1) got no capture shapes" in note


def test_a_folder_of_many_sizes_names_the_files_that_priced_and_counts_the_rest(tmp_path):
    """vLLM captures dozens of sizes, one file each: the note names the files that priced a
    replay and counts the others (with the span of their batches) rather than listing them all.
    Bug: a note (and the report's graph-replay finding quoting it) one line per unused file."""
    folder = _capture_folder(tmp_path, sizes=(16, 32, 48, 64, 80, 96))
    captures = [read_trace(p) for p in sorted(folder.iterdir())]
    note = analyze(read_trace(_decode_replay(tmp_path, batches=(16, 32))), capture=captures).provenance["graph_capture"]
    assert note.endswith(
        "graph_capture_rank_0.1000.pt.trace.json.gz (batch 16) priced 1 replay in step 0, "
        "graph_capture_rank_0.1001.pt.trace.json.gz (batch 32) priced 1 replay in step 1, "
        "4 other files (batch 48 to 96) priced none"
    )


def test_a_capture_file_without_ranges_takes_its_batch_from_its_name(tmp_path):
    """SGLang's and ATOM's capture folders name each file ``bs_<bs>_rank<r>.json.gz``. With no
    ``capture_<n>_<mode>`` range in the files, the names give each graph its batch. Bug: both
    graphs of unknown batch, so which one a replay took was left to their order (the batch-32
    step priced from the batch-16 graph), or refused as unknown."""
    folder = _capture_folder(tmp_path, names={16: "bs_16_rank0.json.gz", 32: "bs_32_rank0.json.gz"})
    captures = [read_trace(p) for p in sorted(folder.iterdir())]
    a = analyze(read_trace(_decode_replay(tmp_path, batches=(32, 16))), capture=captures)
    flops = _step_flops(a)
    assert flops[0] == pytest.approx(LAYERS * _per_layer(32), rel=1e-12)
    assert flops[1] == pytest.approx(LAYERS * _per_layer(16), rel=1e-12)
    assert "names no batch size" not in a.provenance["graph_capture"]


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_report_takes_a_capture_folder(tmp_path):
    """Bug: ``tracekit report TRACE --graph-capture FOLDER`` read the folder as one run's ranks and
    refused it ("... are both rank 0: they are different runs"). The folder, and the same files
    named one by one (the option repeated), price each step from its own size."""
    folder = _capture_folder(tmp_path)
    replay = _decode_replay(tmp_path)
    files = sorted(folder.iterdir())
    for i, given in enumerate(([folder], files)):
        out = tmp_path / f"r{i}.json"
        res = _run("report", replay, *[x for f in given for x in ("--graph-capture", f)], "-o", out)
        assert res.exit_code == 0, res.output
        data = json.loads(out.read_text())
        steps = {s["index"]: s for s in data["steps"]}
        assert steps[0]["flops"] == pytest.approx(LAYERS * _per_layer(16), rel=1e-12)
        assert steps[1]["flops"] == pytest.approx(LAYERS * _per_layer(32), rel=1e-12)
        note = data["provenance"]["graph_capture"]
        assert "(batch 16) priced 1 replay in step 0" in note and "(batch 32) priced 1 replay in step 1" in note


@pytest.mark.parametrize(
    "command, extra",
    [
        ("summary", []),
        ("annotate", ["-o", "{tmp}/annotated.json"]),
        ("project", ["--to", "b200", "-o", "{tmp}/p.json"]),
    ],
)
def test_every_analysing_command_takes_a_capture_folder(tmp_path, command, extra):
    """Bug: summary, annotate and project refused a capture folder as report did."""
    folder = _capture_folder(tmp_path)
    res = _run(command, _decode_replay(tmp_path), "--graph-capture", folder, *[e.format(tmp=tmp_path) for e in extra])
    assert res.exit_code == 0, res.output


def test_compare_takes_a_capture_folder_per_side(tmp_path):
    """Bug: compare's --graph-capture-before/--graph-capture-after refused a capture folder. With
    the folder on one side only, that side's replays are priced and the other's not."""
    folder = _capture_folder(tmp_path)
    replay = _decode_replay(tmp_path)
    out = tmp_path / "c.json"
    res = _run("compare", replay, replay, "--graph-capture-before", folder, "-f", "json", "-o", out)
    assert res.exit_code == 0, res.output
    # The priced side runs bf16 GEMMs (the capture's shapes say so); the other side's dtype is unknown.
    dtype = next(c for c in json.loads(out.read_text())["context"] if c["field"] == "dtype")
    assert (dtype["before"], dtype["after"]) == ("bf16", None)


def test_a_bad_file_in_the_capture_folder_fails_in_one_sentence(tmp_path):
    """A capture folder holding a file that is no trace: one sentence naming the option and the
    file, exit status 2, no traceback, no report written."""
    folder = _capture_folder(tmp_path)
    (folder / "broken.json").write_text("not a trace")
    out = tmp_path / "r.json"
    res = _run("report", _decode_replay(tmp_path), "--graph-capture", folder, "-o", out)
    assert res.exit_code == 2
    assert "Traceback" not in res.output
    assert f"--graph-capture: {folder / 'broken.json'} is not JSON" in res.output
    assert not out.exists()


# --- a piecewise capture: one graph per piece, the same piece once per layer ------------------

TOKENS, PW_LAYERS = 8192, 24
# Kernel times at 60% of an H100's dense BF16 peak (989 TFLOP/s, NVIDIA's datasheet): well above
# the roof fraction below which a kernel is called latency-limited.
QKV_US = 2 * TOKENS * QKV_OUT * HIDDEN / (0.6 * 989e12) * 1e6
O_US = 2 * TOKENS * HIDDEN * ATTN_OUT / (0.6 * 989e12) * 1e6


def _pieces(kinds):
    """vLLM's pieces of a 24-layer model split at attention: the QKV GEMM of layer 0; then per
    layer the O GEMM of the one before and its own QKV GEMM (one compiled piece, called once per
    layer); then the last layer's O GEMM. The first and last pieces hold one launch each."""
    qkv, o = kinds
    return [[qkv]] + [[o, qkv] for _ in range(PW_LAYERS - 1)] + [[o]]


@pytest.mark.parametrize("beside", [False, True], ids=["alone", "beside-4096"])
@pytest.mark.parametrize("named", [False, True], ids=["cuda-by-position", "rocm-by-name"])
def test_each_piecewise_replay_gets_the_whole_work_of_the_op_it_replays(tmp_path, named, beside):
    """Bug (the gpt-oss-20b piecewise prefill): the kernels of layers 1-23 all pointed at one
    captured op and shared its FLOPs by duration (10.5 of 241.6 GFLOP each, called 2% of the
    roof), and the last piece, one launch long like the first, took the first piece's QKV op.
    Each of the 24 QKV GEMM kernels must get 2 x 8192 x 5120 x 2880 FLOPs and each O GEMM kernel
    2 x 8192 x 2880 x 4096, each from its own layer's captured op; the step's GEMMs total 24
    layers of both, at their roof fraction (compute-bound, not latency-limited). A capture of
    another size beside it (4096 tokens, the same pieces, another file) must not price the step."""
    kernel = GEMM_KERNEL if named else None
    caps = []
    for i, size in enumerate((TOKENS, 4096) if beside else (TOKENS,)):
        path = tmp_path / f"graph_capture_rank_0.{1000 + i}.pt.trace.json.gz"
        pieces = _pieces((linear(size, QKV_OUT, HIDDEN), linear(size, HIDDEN, ATTN_OUT)))
        capture_trace(size, "PIECEWISE", pieces, eager=(ATTENTION_OP, None, None), kernel=kernel).write(path)
        caps.append(read_trace(path))
    doc = GraphDoc(H100)
    replay_step(
        doc,
        execute_name(TOKENS, prefill=True),
        _pieces(((GEMM_KERNEL, QKV_US), (GEMM_KERNEL, O_US))),
        1000.0,
        eager=(ATTENTION_OP, None, None),
    )
    a = analyze(read_trace(doc.write(tmp_path / "prefill.json.gz")), capture=caps if beside else caps[0])
    w = a.work
    gemm = w[w["graph"]].sort_values("start_ns")
    assert len(gemm) == 2 * PW_LAYERS and (gemm["cost_source"] == "capture").all()
    qkv_flops, o_flops = 2 * TOKENS * QKV_OUT * HIDDEN, 2 * TOKENS * HIDDEN * ATTN_OUT
    assert qkv_flops == 241_591_910_400  # the 241.6 GFLOP
    # Replay order: QKV of layer 0, then (O, QKV) per later layer, then the last O.
    is_qkv = np.array([True] + [False, True] * (PW_LAYERS - 1) + [False])
    assert np.allclose(gemm["flops"].to_numpy()[is_qkv], qkv_flops, rtol=1e-12)
    assert np.allclose(gemm["flops"].to_numpy()[~is_qkv], o_flops, rtol=1e-12)
    assert gemm["flops"].sum() == pytest.approx(PW_LAYERS * (qkv_flops + o_flops), rel=1e-12)
    # The registry's gpt-oss-20b prices the same step's linear layers (QKV and O; its MLP is the
    # experts) from the architecture alone: the captured shapes agree within 5%.
    side = costs.Side(requests=1, tokens=TOKENS, kv_tokens=TOKENS, pairs=TOKENS * (TOKENS + 1) / 2, logit_tokens=1)
    assert gemm["flops"].sum() == pytest.approx(
        costs.step_costs(load_model("gpt-oss-20b"), side)["linear"].flops, rel=0.05
    )
    assert gemm["pricing_op"].nunique() == 2 * PW_LAYERS  # each kernel its own layer's captured op
    assert set(gemm["limiter"]) == {"compute"}
    assert gemm["roof_fraction"].between(0.5, 0.7).all()
    if beside:
        note = a.provenance["graph_capture"]
        assert "(batch 8192) priced 25 replays in step 0" in note and "(batch 4096) priced none" in note


def test_kernels_of_one_replay_still_share_their_captured_op(tmp_path):
    """A captured op that launched two kernels (a split-K GEMM and its reduction) is priced
    within one replay, and each of two steps' replays does the op's whole work: the GEMM all its
    FLOPs, the reduce none (issue 47: an auxiliary kernel) and a duration share of its bytes
    (3:1 here; its own traffic is not in the trace). By hand, [16, 2880] x [5120, 2880] bf16:
    2*16*5120*2880 FLOPs, 2*(16*2880 + 5120*2880 + 16*5120) = 29,747,200 bytes. Bug: sharing
    per replay broken into a whole op per kernel (the work counted twice), or the two steps
    sharing one op (half each)."""
    size = 16
    doc_cap = GraphDoc(H100)
    doc_cap.call("cudaStreamBeginCapture", 100.0)
    name, dims, types = linear(size, QKV_OUT, HIDDEN)
    ext = doc_cap.op(name, 102.0, 10.0, dims=dims, types=types)
    doc_cap.call("cudaLaunchKernel", 103.0, 2.0, ext=ext)
    doc_cap.call("cudaLaunchKernel", 106.0, 2.0, ext=ext)
    doc_cap.call("cudaStreamEndCapture", 113.0)
    doc_cap.annotation(f"capture_{size}_FULL", 99.0, 20.0)
    cap = read_trace(doc_cap.write(tmp_path / "cap.json.gz"))
    doc = GraphDoc(H100)
    t = 1000.0
    for _ in range(2):
        t = replay_step(
            doc, execute_name(size, prefill=False), [[(GEMM_KERNEL, 30.0), ("splitKreduce_kernel", 10.0)]], t
        )
    a = analyze(read_trace(doc.write(tmp_path / "decode.json.gz")), capture=cap)
    w = a.work[a.work["graph"]].sort_values("start_ns")
    whole = 2 * size * QKV_OUT * HIDDEN
    assert np.allclose(w["flops"].to_numpy(), [whole, 0.0] * 2, rtol=1e-12)
    assert np.allclose(w["bytes"].to_numpy(), [0.75 * 29_747_200, 0.25 * 29_747_200] * 2, rtol=1e-12)


def test_atom_capture_ranges_name_the_graphs_batch():
    """ATOM wraps each captured graph in ``capture_graph_bs_<n>`` (ModelRunner.capture_cudagraph):
    Bug: the range is not read, so an ATOM capture's graphs have no batch and cannot be checked
    against the replaying step's (or told apart in a folder of one file per rank)."""
    from tracekit import frameworks

    assert frameworks.capture("capture_graph_bs_128") == (128, "ATOM")
    assert frameworks.capture("capture_graph_bs_") is None
    assert frameworks.capture("capture_32_DECODE") == (32, "DECODE")
