"""GEMM shapes from launch grids (tracekit.analysis.pricing.grid_shapes), checked against the shapes the
shared traces record (aten::mm/addmm/linear/bmm Input Dims: M and N independently, the oracle)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import read_real

from tracekit import frameworks
from tracekit.analysis.pricing import grid_shapes as gs
from tracekit.analysis.pricing import taxonomy
from tracekit.analysis.steps.segment import segment

# Every shared trace that records both op shapes and GEMM kernel names with their grids.
SHAPED = ["h100_hf", "mi300x_extend", "a100_particle", "a100_torchrec", "a100_dlrm", "b200_vllm", "b300_moe"]


def _recorded(op: str, dims: list) -> tuple[int, int] | None:
    """(M, N) of a GEMM op's output from its Input Dims."""
    try:
        if op == "aten::mm":
            return dims[0][0], dims[1][1]
        if op == "aten::addmm":
            return dims[1][0], dims[2][1]
        if op == "aten::linear":
            return math.prod(dims[0][:-1]), dims[1][0]
        if op == "aten::bmm":
            return dims[0][1], dims[1][2]
        if op == "aten::baddbmm":
            return dims[1][1], dims[2][2]
    except (IndexError, TypeError):
        return None
    return None


def _coverage(key: str) -> dict[str, float]:
    """GEMM time (ns) of kernels with recorded shapes, by verdict: ``within`` (both recorded M and
    N inside the derived ranges, each at most one tile wide; for nvjet one cluster of tiles, the
    grid's own resolution: it rounds the tiles up to the cluster), ``bound`` (inside
    wider ranges), ``unknown`` (the grid was said to tell nothing), ``wrong`` (a range that misses
    the recorded size), ``no_grammar``."""
    trace = read_real(key)
    seg = segment(trace)
    work = seg.work
    ops = trace.cpu_ops
    engine = seg.source in frameworks.ENGINE_SOURCES
    # M hint: only what an engine's step annotation states (never the op shapes under test).
    step_tokens = seg.steps["tokens"].to_numpy() if engine and len(seg.steps) else np.array([])
    step_batch = seg.steps["batch"].to_numpy() if engine and len(seg.steps) else np.array([])
    out = dict.fromkeys(("within", "bound", "unknown", "wrong", "no_grammar"), 0.0)
    names = work["name"].astype(str).to_numpy()
    for i in np.flatnonzero((work["kind"] == "kernel").to_numpy() & (work["op"].to_numpy() >= 0)):
        op = int(work["op"].iat[i])
        if taxonomy.categorize(names[i]) != taxonomy.GEMM:
            continue
        dims, _ = trace.shapes(op)
        rec = _recorded(str(ops["name"].iat[op]), dims) if dims else None
        if rec is None:
            continue
        dur = float(work["dur_ns"].iat[i])
        step = int(work["step"].iat[i])
        m_hint = step_tokens[step] if 0 <= step < len(step_tokens) and not np.isnan(step_tokens[step]) else None
        grid = tuple(int(work[f"grid_{a}"].iat[i]) for a in "xyz")
        block = tuple(int(work[f"block_{a}"].iat[i]) for a in "xyz")
        got = gs.derive(names[i], grid, block, m=int(m_hint) if m_hint else None)
        if got is not None and got.n_how == gs.UNKNOWN and m_hint and not np.isnan(step_batch[step]):
            # The LM head computes one token per request: the step's batch is its M.
            got = gs.derive(names[i], grid, block, m=int(step_batch[step]))
        if got is None:
            out["no_grammar"] += dur
            continue
        if got.n_how == gs.UNKNOWN or got.m_how == gs.UNKNOWN:
            out["unknown"] += dur
            continue
        m, n = rec
        inside = got.m_lo < m <= got.m_hi if got.m_how != gs.GIVEN else got.m_hi == m
        inside &= got.n_lo < n <= got.n_hi
        if not inside:
            out["wrong"] += dur
        elif got.n_hi - got.n_lo <= got.tile.n * got.tile.cluster_n and got.m_how in (gs.EXACT, gs.GIVEN):
            out["within"] += dur
        else:
            out["bound"] += dur
    return out


@pytest.fixture(scope="module")
def coverage() -> dict[str, dict[str, float]]:
    return {k: _coverage(k) for k in SHAPED}


def _table(cov: dict[str, dict[str, float]]) -> str:
    lines = []
    for k, c in cov.items():
        total = sum(c.values()) or 1.0
        lines.append(f"{k}: " + ", ".join(f"{v} {c[v] / total:.1%}" for v in c) + f" of {total / 1e6:.2f} ms")
    return "\n".join(lines)


def test_grid_shapes_never_wrong_and_within_a_tile_where_the_grid_tells(coverage):
    """Derived M/N contain the recorded shapes on every shared trace with shapes, and are within one
    tile for >= 95% of the GEMM time whose grid tells the shape at all.

    The denominator leaves out, and the table prints, GEMM time whose grid cannot tell: persistent
    kernels (Hopper ``sm90_xmma``: grid = SM count), flat or swizzled grids without a stated M
    (no engine step annotation) and names no grammar knows. A wrong grid-dimension mapping (N
    from grid.y), a tile read from the wrong field, hipBLASLt's thread-counted grid not divided
    by its block, or a missing cluster rounding would put recorded shapes outside the ranges."""
    table = _table(coverage)
    for k, c in coverage.items():
        total = sum(c.values())
        assert total > 0, f"{k}: no GEMM kernel with recorded shapes\n{table}"
        assert c["wrong"] <= 0.01 * total, f"{k}: derived ranges miss the recorded shapes\n{table}"
        told = c["within"] + c["bound"] + c["wrong"]
        if told:
            assert c["within"] >= 0.95 * told, f"{k}: under 95% within a tile where the grid tells\n{table}"
    # The serving traces (an engine step states M) are covered whole: nothing left out there.
    for k in ("mi300x_extend", "b200_vllm"):
        c = coverage[k]
        assert c["within"] >= 0.95 * sum(c.values()), f"{k}: under 95% of its GEMM time within a tile\n{table}"


def _priced(key: str, model: str):
    from tracekit.analysis.pricing import model_costs as mc
    from tracekit.models.registry import load_model

    trace = read_real(key)
    seg = segment(trace)
    category, _ = taxonomy.categorize_units(seg.work, trace.cpu_ops, seg.work["op"].to_numpy())
    return trace, seg.work, mc.price(load_model(model), 1, seg.steps, seg.work, category, seg.source)


def test_each_gemm_gets_its_own_layers_flops_qwen3_8b_extend():
    """On the SGLang Qwen3-8B extend step (15 requests, 15,360 tokens), every GEMM kernel's model
    FLOPs are 2*M*N*K of its own layer, the layer told by the recorded shapes of its op (the
    oracle; pricing does not read them): Qwen3-8B (its registry config.json): hidden 4096,
    intermediate 12288, 32 heads, 8 KV heads, head_dim 128, vocab 151936. Layers then run at
    different TFLOP/s. Fails on the duration share (every linear kernel the same TFLOP/s), on
    o_proj and down (both N=4096) confused, and on an LM head priced at the step's tokens."""
    trace, work, out = _priced("mi300x_extend", "qwen3-8b")
    T, h, inter, d, vocab = 15360, 4096, 12288, 128, 151936
    qkv = (32 + 2 * 8) * d
    by_nk = {
        (qkv, h): 2 * T * qkv * h,
        (h, h): 2 * T * h * h,
        (2 * inter, h): 2 * T * 2 * inter * h,
        (h, inter): 2 * T * h * inter,
        (vocab, h): 2 * 15 * vocab * h,
    }
    rate: dict[tuple[int, int], list[float]] = {}
    n_checked = 0
    for i in np.flatnonzero(out.component == "linear").tolist() + np.flatnonzero(out.component == "lm_head").tolist():
        op = int(work["op"].iat[i])
        dims, _ = trace.shapes(op)
        (_, k), (_, n) = dims[0], dims[1]
        assert out.flops[i] == pytest.approx(by_nk[(n, k)]), (work["name"].iat[i], n, k, out.note[i])
        assert "matched from the grid" in str(out.note[i])
        rate.setdefault((n, k), []).append(out.flops[i] / float(work["dur_ns"].iat[i]))
        n_checked += 1
    assert n_checked == 4 * 36 + 1
    means = sorted(float(np.mean(v)) for v in rate.values())
    assert len(means) == 5 and all(b > 1.05 * a for a, b in zip(means, means[1:])), means


def test_router_gemm_gets_its_own_small_work_qwen3_30b_a3b():
    """On the SGLang Qwen3-30B-A3B decode step (batch 16, B300, cuBLASLt nvjet split-K kernels),
    the MoE router GEMM gets 2 * 16 tokens * hidden 2048 * 128 experts, the QKV GEMM 2*16*2048*
    (32+2*4)*128 and o_proj 2*16*4096*2048 (Qwen3-30B-A3B's config: hidden 2048, 32 heads, 4 KV
    heads, head_dim 128, 128 experts). Fails on the duration share (the router got ~50x its work)
    and on a split-K grid read as an unfused q_proj instead of o_proj."""
    _, work, out = _priced("b300_qwen3_moe", "qwen3-30b-a3b")
    names = work["name"].astype(str).to_numpy()
    grid_x = work["grid_x"].to_numpy()
    splitk = np.char.startswith(names.astype(str), "nvjet_sm103_tst_32x64_64x16_4x1_v_bz_splitK")
    router = np.flatnonzero(splitk & (grid_x == 8))
    o_proj = np.flatnonzero(splitk & (grid_x == 128))
    qkv = np.flatnonzero(np.char.startswith(names.astype(str), "nvjet_sm103_tst_64x16_64x16"))
    assert len(router) == len(o_proj) == len(qkv) == 48
    np.testing.assert_allclose(out.flops[router], 2 * 16 * 2048 * 128)
    np.testing.assert_allclose(out.flops[o_proj], 2 * 16 * 4096 * 2048)
    np.testing.assert_allclose(out.flops[qkv], 2 * 16 * 2048 * (32 + 8) * 128)
    assert all("router" in str(x) for x in out.note[router])


def test_tile_grammars_name_by_name():
    """The tile grammar of each library's kernel names, with the grid dimension that maps to N and
    M (hand arithmetic from the shared traces' recorded shapes). Fails on a tile read from the
    wrong part of the name or the wrong grid dimension mapped to N."""
    # cuBLAS legacy: grid x = N tiles, y = M tiles (a100_torchrec: aten::mm [4096,64]x[64,2798]).
    s = gs.derive("ampere_sgemm_128x64_nn", (22, 64, 1))
    assert (s.n_lo, s.n_hi, s.m_lo, s.m_hi) == (21 * 128, 22 * 128, 63 * 64, 64 * 64)
    # hipBLASLt: grid in threads / 256-thread workgroups = N tiles x M tiles (15360 x 6144 output).
    s = gs.derive(
        "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_SK0_WG32_8_1",
        (491520, 1, 1),
        (256, 1, 1),
        m=15360,
        n_candidates=(4096, 6144, 24576),
    )
    assert s.n_match == 6144 and (s.n_lo, s.n_hi) == (23 * 256, 24 * 256)
    # nvjet: cluster 4x1 rounds the N tiles up to 4 (lm_head 25136 / 192 = 131 -> 132).
    s = gs.derive("nvjet_tst_192x8_64x8_4x1_v_bz_TNT", (132, 1, 1), m=1)
    assert s.n_lo < 25136 <= s.n_hi and s.n_hi == 132 * 192
    # CUTLASS 2.x swizzle: x = M tiles * S, y = ceil(N tiles / S) (a100_dlrm [1024,512]x[512,9375]).
    s = gs.derive("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align1>", (64, 5, 1), m=1024)
    assert s.n_lo < 9375 <= s.n_hi
    # Persistent Hopper kernels and Marlin: unknown, not a wrong number.
    for name in (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        "void marlin_moe_wna16::Marlin<128, 1, 8, 4, true>",
    ):
        s = gs.derive(name, (132, 1, 1), m=8944)
        assert s.n_how == gs.UNKNOWN and s.n is None and s.reason
    assert gs.derive("void at::native::vectorized_elementwise_kernel<4>", (4, 1, 1)) is None


def test_given_m_the_grid_gives_n_on_every_shared_trace_with_shapes():
    """Where a flat or swizzled grid needs M (pricing gives it the step's tokens), the recorded
    M given, the derived N range holds the recorded N for every 2-D GEMM of every shared trace
    with shapes; within one tile for nvjet/hipBLASLt/legacy cuBLAS grids (and for CUTLASS at
    swizzle 1), within the swizzle's S tiles otherwise. Batched GEMMs (aten::bmm) are left out:
    a flat grid folds their batch count in with the tiles, and linear layers are 2-D. Bugs: M
    and N swapped in the flat grid's division, the cluster rounding applied to the wrong side,
    the swizzle width taken from grid.y."""
    checked = wrong = 0.0
    lines = []
    for key in SHAPED:
        trace = read_real(key)
        work = segment(trace).work
        ops = trace.cpu_ops
        names = work["name"].astype(str).to_numpy()
        for i in np.flatnonzero((work["kind"] == "kernel").to_numpy() & (work["op"].to_numpy() >= 0)):
            op = int(work["op"].iat[i])
            op_name = str(ops["name"].iat[op])
            if taxonomy.categorize(names[i]) != taxonomy.GEMM or op_name in ("aten::bmm", "aten::baddbmm"):
                continue
            dims, _ = trace.shapes(op)
            rec = _recorded(op_name, dims) if dims else None
            if rec is None:
                continue
            grid = tuple(int(work[f"grid_{a}"].iat[i]) for a in "xyz")
            block = tuple(int(work[f"block_{a}"].iat[i]) for a in "xyz")
            got = gs.derive(names[i], grid, block, m=rec[0])
            if got is None or got.n_how == gs.UNKNOWN:
                continue
            dur = float(work["dur_ns"].iat[i])
            checked += dur
            if not got.n_lo < rec[1] <= got.n_hi:
                wrong += dur
                lines.append(f"{key}: {names[i][:60]} grid {grid} M={rec[0]} N={rec[1]} -> ({got.n_lo}, {got.n_hi}]")
    assert checked > 0
    assert wrong == 0, "\n".join(lines[:10])
