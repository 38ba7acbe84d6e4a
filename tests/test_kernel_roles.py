"""Each kernel's own work (issue 47, "What to build" item 2): an op's kernels priced by their
roles, not by their durations. Auxiliary kernels (memset, fill, split-K reduce, KV-cache write)
carry no FLOPs and the bytes they touch; a MoE layer's gate-up, down, gating and combine kernels
their own parts; attention kernels their own layer's window.

Every expected figure is hand arithmetic from the shapes or the model's config, written in the
test. Each test names the bug it catches: the code before the change shared an op's (or a
step's pooled component's) cost among its kernels in proportion to their durations.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import SHARED_TRACES, read_real
from kineto import STREAM, TID, Doc

from tracekit import read_trace
from tracekit.analysis.analyze import measure
from tracekit.analysis.pricing import model_costs, taxonomy
from tracekit.frameworks import DECODE
from tracekit.models import costs as mc
from tracekit.models import load_model


def _work(trace, **kw) -> pd.DataFrame:
    parts, _ = measure(trace, **kw)
    return parts.work


def _memset(doc: Doc, ts: float, gpu_ts: float, dur: float, ext: int, nbytes: int) -> None:
    """A cudaMemsetAsync inside op ``ext`` and the copy-engine memset it queued, as Kineto
    writes them (the H100 Hugging Face trace's ``Memset (Device)``: ``bytes`` in its args)."""
    doc._corr += 1
    c = doc._corr
    doc.events.append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaMemsetAsync",
            "pid": 100,
            "tid": TID,
            "ts": ts,
            "dur": 1.0,
            "args": {"cbid": 51, "correlation": c, "External id": ext},
        }
    )
    doc.events.append(
        {
            "ph": "X",
            "cat": "gpu_memset",
            "name": "Memset (Device)",
            "pid": 0,
            "tid": STREAM,
            "ts": gpu_ts,
            "dur": dur,
            "args": {"device": 0, "stream": STREAM, "correlation": c, "External id": ext, "bytes": nbytes},
        }
    )


GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
SPLITK = "void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, false>"


def test_a_gemms_memset_and_split_k_reduce_carry_no_flops(tmp_path):
    """Bug: cuBLAS's workspace memset and split-K reduce shared their GEMM's FLOPs by duration
    (the H100 Hugging Face trace's memsets took 86 GFLOP). Here an ``aten::mm`` of
    [64, 128] x [128, 256] bf16 runs a memset of 4 bytes (10 us), the GEMM (10 us) and a split-K
    reduce (5 us). By hand: FLOPs 2*64*128*256 = 4,194,304, all the GEMM's (before: 40% of them
    went to the memset, 20% to the reduce); the op's bytes (64*128 + 128*256 + 64*256) * 2 =
    114,688; the memset sets 4 bytes (its record), beside them; the reduce's own traffic is not
    in the trace, so it takes a duration share of the op's bytes, 5/25 * 114,688 = 22,937.6,
    and says so; the GEMM keeps the other 91,750.4."""
    doc = Doc(device="NVIDIA H100 80GB HBM3")
    ext = doc.op("aten::mm", 10.0, 30.0, dims=[[64, 128], [128, 256]], types=["c10::BFloat16", "c10::BFloat16"])
    _memset(doc, 11.0, 100.0, 10.0, ext, 4)
    doc.kernel(GEMM, 13.0, 110.0, 10.0, ext=ext, grid=(2, 1, 1))
    doc.kernel(SPLITK, 15.0, 120.0, 5.0, ext=ext)
    w = _work(read_trace(doc.write(tmp_path / "mm.json")))
    by = {
        ("memset" if k == "memset" else str(n)[:12]): r for (n, k), r in zip(zip(w["name"], w["kind"]), w.itertuples())
    }
    memset, gemm, reduce = by["memset"], by[GEMM[:12]], by[SPLITK[:12]]
    assert (memset.flops, memset.bytes) == (0.0, 4.0)
    assert (gemm.flops, reduce.flops) == (4_194_304.0, 0.0)
    assert reduce.bytes == pytest.approx(22_937.6)
    assert gemm.bytes == pytest.approx(91_750.4)
    assert "memset" in memset.cost_note and "split-K" in reduce.cost_note and "duration share" in reduce.cost_note


def test_h100_cublas_memsets_carry_their_bytes_and_each_gemm_its_2mnk():
    """Bug: on the H100 Hugging Face Qwen1.5-0.5B forward (16 x 559 tokens) every aten::linear
    ran a 4-byte ``Memset (Device)`` before its GEMM and the memset took a duration share of
    the GEMM's FLOPs (86 GFLOP in all: per-kernel TFLOP/s 1-4% low). By hand, M = 16*559 =
    8,944: the q/k/v/o GEMM kernels (K = N = 1,024) carry 2*8,944*1,024*1,024 =
    18,756,927,488 FLOPs each, the MLP's (1,024 x 2,816 either way)
    2*8,944*1,024*2,816 = 51,581,550,592; every memset inside an op 0 FLOPs and 4 bytes."""
    w = _work(read_real("h100_hf"))
    memsets = w[(w["kind"] == "memset") & (w["pricing_op"] >= 0)]
    assert len(memsets) == 168
    assert (memsets["flops"] == 0).all() and (memsets["bytes"] == 4).all()
    gemm = w[(w["category"] == "gemm") & (w["op_name"].isin(["aten::addmm", "aten::mm"]))]
    assert sorted(set(gemm["flops"].tolist())) == [18_756_927_488.0, 51_581_550_592.0]
    assert memsets["flops"].sum() + gemm["flops"].sum() == 96 * 18_756_927_488 + 72 * 51_581_550_592


def test_mi300x_fill_inside_flash_attention_carries_no_flops():
    """Bug: on the MI300X twin of that forward, ``aten::_flash_attention_forward`` zeroes a
    one-element int counter (``aten::fill_`` -> ``FillFunctor<int>``) before ``attn_fwd``, and
    the fill took a duration share of the attention's FLOPs (6.5 GFLOP in all). By hand, causal
    attention of 16 heads over 16 x 559 tokens, head dim 64: pairs 559*560/2 = 156,520 per
    sequence and head, FLOPs 2*16*16*156,520*(64 + 64) = 10,257,694,720 per layer, all the
    attention kernel's; the fill sets one int: 4 bytes (its own op's shapes), no FLOPs."""
    path = SHARED_TRACES / "mi300x_hf-qwen1.5-0.5b_forward_bs16.json.gz"
    if not path.exists():
        pytest.skip(f"real trace {path} is absent")
    w = _work(read_trace(path))
    names = w["name"].astype(str)
    fills = w[names.str.contains("FillFunctor") & (w["pricing_op"] >= 0)]
    attn = w[(names == "attn_fwd") & (w["pricing_op"] >= 0)]  # 11 more ran outside any op (no shapes)
    assert len(fills) == len(attn) == 24
    assert (fills["flops"] == 0).all() and (fills["bytes"] == 4).all()
    assert (attn["flops"] == 10_257_694_720).all()


# gpt-oss-20b (tracekit's registry, from its config.json): hidden H 2,880, 32 experts of
# intermediate I 2,880, top-k 4, gated (SwiGLU) experts, 24 layers alternating 128-token sliding
# and full attention, 64 query heads and 8 KV heads of 64.
H, I_, K, E, LAYERS = 2880, 2880, 4, 32, 24
TRITON_LAYER = (
    "_topk_forward",
    "_combined_routing_compute",
    "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x256x128x1_swiglu",
    "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x256x128x1",
    "_finalize_matmul_scatter_bf16",
)


def _decode_step(names_per_layer, requests: int, keys: int, durations):
    """One decode step of gpt-oss-20b (``requests`` tokens over ``keys`` keys each), its kernels
    per layer ``names_per_layer`` (with their ``durations``), priced by the model alone."""
    names, dur = [], []
    for _ in range(LAYERS):
        names += list(names_per_layer)
        dur += list(durations)
    n = len(names)
    work = pd.DataFrame(
        {
            "name": pd.Categorical(names),
            "step": np.zeros(n, dtype=np.int64),
            "dur_ns": np.array(dur, dtype=np.int64),
            "start_ns": np.arange(n, dtype=np.int64) * 1000,
        }
    )
    steps = pd.DataFrame({"phase": [DECODE], "tokens": [float(requests)], "batch": [float(requests)]})
    side = mc.Side(requests, requests, requests * keys, requests * keys, requests)
    category = np.array([taxonomy.categorize(x) for x in names], dtype=object)
    got = model_costs.price(load_model("gpt-oss-20b"), 1, steps, work, category, "vllm", sides=[{DECODE: side}])
    return names, got


def test_gpt_oss_moe_kernels_carry_their_own_roles_work():
    """Bug: the step's routed-expert work was shared among its expert GEMMs by duration (the
    issue's decode step: 65.4 and 74.8 GFLOP to gate-up and down where their shapes give 101.9
    and 51.0), and triton_kernels' ``_finalize_matmul_scatter`` was a dense GEMM, ``_topk_forward``
    a sampler. A decode step of T = 32 tokens, every kernel 10 us. By hand, per MoE layer:
    gate-up 2*T*k*H*2I = 2*32*4*2,880*5,760 = 4,246,732,800 FLOPs; down 2*T*k*I*H =
    2,123,366,400 (half); over 24 layers 101,921,587,200 and 50,960,793,600. Routing: the top-k
    combine 2*T*k*H = 737,280 per layer (the finalize kernel's), the router's softmax/top-k 5*T*E
    = 5,120 per layer, shared by the top-k and routing-sort kernels (equal durations: 2,560 each)."""
    names, got = _decode_step(TRITON_LAYER, 32, 1024, [10_000] * 5)
    names = np.array(names, dtype=object)
    gate_up, down = got.flops[names == TRITON_LAYER[2]], got.flops[names == TRITON_LAYER[3]]
    assert gate_up == pytest.approx(np.full(24, 4_246_732_800.0)) and gate_up.sum() == pytest.approx(101_921_587_200)
    assert down == pytest.approx(np.full(24, 2_123_366_400.0)) and down.sum() == pytest.approx(50_960_793_600)
    assert got.flops[names == TRITON_LAYER[4]] == pytest.approx(np.full(24, 737_280.0))
    assert got.flops[names == TRITON_LAYER[0]] == pytest.approx(np.full(24, 2_560.0))
    assert got.flops[names == TRITON_LAYER[1]] == pytest.approx(np.full(24, 2_560.0))
    assert set(got.component[names == TRITON_LAYER[4]]) == {"routing"}
    assert "gate-up GEMM of MoE layer 0" in got.note[np.flatnonzero(names == TRITON_LAYER[2])[0]]


def test_gpt_oss_sliding_window_layers_carry_their_windows_work():
    """Bug: every attention kernel of a step got the step's attention shared by duration (the
    issue's decode step: a sliding layer's kernel 0.485 GFLOP where it does 0.067). A decode
    step of 32 requests over 1,024 keys each, every attention kernel 10 us. By hand, layer 0
    (sliding, window 128) reads 128 keys a request: pairs 32*128 = 4,096, FLOPs
    2*64*4,096*(64 + 64) = 67,108,864, bytes 4,096*8*128*2 (KV) + 32*64*128*2 (q, out) =
    8,912,896; layer 1 (full) 32*1,024 = 32,768 pairs: 536,870,912 FLOPs, bytes
    67,108,864 + 524,288 = 67,633,152. The step's total is unchanged: 12 of each,
    7,247,757,312 FLOPs."""
    names, got = _decode_step(["kernel_unified_attention_3d"], 32, 1024, [10_000])
    assert got.flops[0::2] == pytest.approx(np.full(12, 67_108_864.0))
    assert got.flops[1::2] == pytest.approx(np.full(12, 536_870_912.0))
    assert got.bytes[0] == pytest.approx(8_912_896.0) and got.bytes[1] == pytest.approx(67_633_152.0)
    assert got.flops.sum() == pytest.approx(12 * (67_108_864 + 536_870_912))
    assert got.note[0] == "attention layer 0 (sliding, window 128): 4096 query-key pairs over 4096 keys read"


def test_a_moe_ops_kernels_share_its_cost_by_role(tmp_path):
    """Bug: a ``vllm::moe_forward`` priced from its shapes (hidden [32, 2,880], router logits
    [32, 32]) shared its cost among its kernels by duration: with every kernel 10 us, the top-k
    and routing-sort kernels took 1/5 each of the expert GEMMs' work. By hand, per layer of
    gpt-oss-20b at T = 32: gate-up 4,246,732,800, down 2,123,366,400, gating 5*T*E = 5,120
    (two kernels, equal durations: 2,560 each), combine 2*T*k*H = 737,280; in all 6,370,841,600,
    of which each kernel's part is its own (the op's total is the op model's, split so). The
    activation quantisation between the GEMMs is none of the op's work: no FLOPs."""
    doc = Doc(device="NVIDIA H100 80GB HBM3")
    ext = doc.op(
        "vllm::moe_forward", 10.0, 100.0, dims=[[32, H], [32, E], []], types=["c10::BFloat16", "c10::BFloat16", "str"]
    )
    names = TRITON_LAYER[:3] + ("void per_token_group_quant_fp8<c10::BFloat16>",) + TRITON_LAYER[3:]
    for j, name in enumerate(names):
        doc.kernel(name, 11.0 + 2 * j, 200.0 + 20 * j, 10.0, ext=ext)
    w = _work(read_trace(doc.write(tmp_path / "moe.json")), model=load_model("gpt-oss-20b"))
    f = dict(zip(w["name"].astype(str), w["flops"]))
    total = sum(f.values())
    layer = 4_246_732_800 + 2_123_366_400 + 5_120 + 737_280
    assert layer == 6_370_841_600
    assert f[TRITON_LAYER[2]] == pytest.approx(total * 4_246_732_800 / layer)
    assert f[TRITON_LAYER[3]] == pytest.approx(total * 2_123_366_400 / layer)
    assert f[TRITON_LAYER[0]] == pytest.approx(total * 2_560 / layer) == pytest.approx(f[TRITON_LAYER[1]])
    assert f[TRITON_LAYER[4]] == pytest.approx(total * 737_280 / layer)
    assert f[names[3]] == 0.0


def test_rtx3090_marlin_moe_gate_up_is_twice_down():
    """Bug: on the RTX 3090 vLLM gpt-oss-20b run (Marlin MXFP4 experts, graph-replayed decode
    steps of 4 tokens) a step's routed-expert work went to its 48 Marlin launches by duration.
    By hand, in a decode step of T = 4 tokens: gate-up 2*4*4*2,880*5,760 = 530,841,600 FLOPs,
    down 265,420,800, in launch order within each of the 24 MoE layers; the step's total stays
    24 * 796,262,400 = 19,110,297,600."""
    w = _work(read_real("rtx3090_vllm"), model=load_model("gpt-oss-20b"))
    steps = w.groupby("step")["flops"].sum()
    for step in (5, 10):
        experts = w[(w["step"] == step) & (w["component"] == "experts")].sort_values("start_ns")
        assert len(experts) == 48
        assert experts["flops"].iloc[0::2].tolist() == pytest.approx([530_841_600.0] * 24)
        assert experts["flops"].iloc[1::2].tolist() == pytest.approx([265_420_800.0] * 24)
        assert experts["flops"].sum() == pytest.approx(19_110_297_600)
    assert steps.notna().all()


def test_b200_gpt_oss_120b_attention_layers_moe_roles_and_kv_writes():
    """Bugs, on the B200 vLLM gpt-oss-120b prefill (tensor parallel 8, one request of 888
    tokens, shapes on its ops): (1) each ``vllm::unified_attention_with_output`` was priced at the
    average of the model's sliding and full layers; (2) the KV-cache write kernel it launches took
    a duration share of its FLOPs; (3) ``vllm::moe_forward``'s seven kernels shared its cost by
    duration. By hand, per rank 64/8 = 8 query heads of 64: a full layer scores 888*889/2 =
    394,716 pairs, 2*8*394,716*128 = 808,378,368 FLOPs; a 128-token sliding layer
    (1 + ... + 128) + (888 - 128)*128 = 8,256 + 97,280 = 105,536 pairs: 216,137,728 FLOPs (the
    kernel names say which is which: ``...SlidingOrChunkedCausal...``). The KV write: no FLOPs,
    bytes of its own op (888 keys and values of 1 head x 64 read at 2 bytes, written at 1, and
    888 int64 slots: 227,328 + 113,664 + 7,104 = 348,096). The MoE's gate-up GEMM
    2*888*4*2,880*(2*2,880/8) = 14,730,854,400 FLOPs, twice its down GEMM's 7,365,427,200."""
    w = _work(read_real("b200_vllm"), model=load_model("gpt-oss-120b"))
    names = w["name"].astype(str)
    sliding = w[names.str.startswith("fmhaSm100a") & names.str.contains("Sliding")]
    full = w[names.str.startswith("fmhaSm100a") & ~names.str.contains("Sliding")]
    assert len(sliding) == len(full) == 18
    assert sliding["flops"].tolist() == pytest.approx([216_137_728.0] * 18)
    assert full["flops"].tolist() == pytest.approx([808_378_368.0] * 18)
    writes = w[names.str.contains("reshape_and_cache_flash")]
    assert len(writes) == 36 and (writes["flops"] == 0).all() and (writes["bytes"] == 348_096).all()
    gate_up = w[names.str.startswith("bmm_MxE4m3_MxE2m1")]
    down = w[names.str.startswith("bmm_Bfloat16_MxE2m1")]
    assert gate_up["flops"].tolist() == pytest.approx([14_730_854_400.0] * 36)
    assert down["flops"].tolist() == pytest.approx([7_365_427_200.0] * 36)


def test_triton_kernels_moe_names_are_moe():
    """Bug: triton_kernels' ``_finalize_matmul_scatter`` (the combine of each token's top-k
    outputs, matmul_ogs_details/_finalize_matmul.py) was filed under GEMM for the "matmul" in
    its name, and its ``_topk_forward`` under sampling; the routing sort kernels were "other"."""
    for name in TRITON_LAYER + ("_expt_data_compute", "_sum_bitmatrix_rows", "_combined_routing_memset"):
        assert taxonomy.categorize(name) == taxonomy.MOE, name
    from tracekit.analysis.pricing import kernel_roles

    assert kernel_roles.moe_role("_finalize_matmul_scatter_bf16", taxonomy.MOE) == mc.COMBINE
    assert kernel_roles.moe_role("_combined_routing_compute", taxonomy.MOE) == mc.GATING


def test_moe_roles_add_up_to_the_step_costs_experts_and_routing():
    """Catches a role split that changes the model's MoE work instead of redistributing it (the
    code before had no roles: one ``experts`` figure for both GEMMs): gate-up + down is
    ``step_costs``' experts and gating + combine its routing, FLOPs and bytes, at any tokens (the
    expected distinct experts, E*(1-(1-k/E)^T), make the bytes non-linear in T); gate-up is
    2*T*k*I*H*2 FLOPs a layer, twice down."""
    m = load_model("gpt-oss-20b")
    for t in (1, 32, 4096):
        side = mc.Side(t, t, None, None, t)
        roles, whole = mc.moe_roles(m, side), mc.step_costs(m, side)
        for j, field in ((0, "flops"), (1, "bytes")):
            assert roles[mc.GATE_UP][j] + roles[mc.DOWN][j] == pytest.approx(getattr(whole["experts"], field))
            assert roles[mc.GATING][j] + roles[mc.COMBINE][j] == pytest.approx(getattr(whole["routing"], field))
        assert roles[mc.GATE_UP][0] == 2 * roles[mc.DOWN][0] == 2 * 2 * t * K * I_ * H * LAYERS
