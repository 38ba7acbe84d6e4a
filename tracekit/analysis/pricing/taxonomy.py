"""Kernel taxonomy: which kind of work a GPU kernel does, from its name and launching op.

A trace holds ~100k kernels but only a few hundred distinct names, so the rules are
regular expressions tried in order on each distinct (kernel name, op name, kind) once.

How a kernel is categorised, first answer wins:

1. ``kind`` "memcpy" / "memset" (copy-engine activities) map straight to those categories.
   A kernel is never memcpy/memset: SM copy kernels (``direct_copy_kernel``, cat, dtype
   casts) and ``FillFunctor`` fills read/write every element on the SMs like any other
   one-pass kernel, so they are ``elementwise``; the two categories stay what the copy
   engine did.
2. ``KERNEL_RULES``: names that say what the kernel computes (library prefixes such as
   ``nvjet_``/``Cijk_``/``ncclDevKernel_``, functor or function names such as
   ``silu_kernel``, ``rms_norm``, ``flash_fwd``). Ordered from most specific to least:
   e.g. MoE before GEMM (a grouped GEMM is MoE work), attention before KV-cache (FlashInfer
   ``BatchDecodeWithPagedKVCache`` is attention), conv before GEMM (cuDNN implicit GEMM)
   and GEMM/conv before activation (``..._relu_...`` epilogues).
3. ``GENERIC_RULES``: kernel families that say only how they run (``elementwise_kernel``,
   ``triton_poi_*``/``triton_red_*``, copies, gathers). They come before the op so that a
   copy kernel inside ``aten::addmm`` stays elementwise instead of inflating "gemm".
4. ``OP_RULES``: the launching op's name, for kernels whose own name is opaque (old
   ``triton__0d1d2d`` names, ``cudnn::ops::*`` helpers, ``bitonicSortKVInPlace`` under
   ``aten::topk``, custom-op kernels).
5. Otherwise ``other``; ``unmatched()`` lists those names so the tables can grow from
   real traces.

Judgement calls, so that readers know: ``aten::topk``/``argmax`` count as sampling even
when a MoE router calls them (the names cannot tell); a cuBLAS GEMM that cuDNN picks for
a 1x1 convolution counts as gemm (the kernel name wins over the op); triton_kernels'
``_topk_forward`` counts as MoE routing (engines run it only in their MoE layers) and its
``_finalize_matmul_scatter`` as MoE, the combine of the top-k outputs, not a GEMM.

Matching is case-insensitive ``re.search`` over the whole name, template arguments
included: ``vectorized_elementwise_kernel<4, silu_kernel...>`` says "silu" only there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np
import pandas as pd

from tracekit.analysis import categorical

GEMM = "gemm"
ATTENTION = "attention"
NORMALIZATION = "normalization"
ACTIVATION = "activation"
ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
EMBEDDING = "embedding"
ROPE = "rope"
MOE = "moe"
LINEAR_ATTENTION = "linear_attention"
QUANTIZE = "quantize"
SAMPLING = "sampling"
KV_CACHE = "kv_cache"
COMMUNICATION = "communication"
MEMCPY = "memcpy"
MEMSET = "memset"
CONV = "conv"
OTHER = "other"

CATEGORIES = (
    GEMM,
    ATTENTION,
    LINEAR_ATTENTION,
    NORMALIZATION,
    ACTIVATION,
    ELEMENTWISE,
    REDUCTION,
    EMBEDDING,
    ROPE,
    MOE,
    QUANTIZE,
    SAMPLING,
    KV_CACHE,
    COMMUNICATION,
    MEMCPY,
    MEMSET,
    CONV,
    OTHER,
)

# (category, pattern, why / real example). Order matters: first match wins.
KERNEL_RULES: tuple[tuple[str, str, str], ...] = (
    (COMMUNICATION, r"nccl|rccl|msccl", "NCCL/RCCL: ncclKernel_AllReduce_RING_LL_Sum_float, ncclDevKernel_*"),
    (
        COMMUNICATION,
        r"cross_device_reduce|quick_?reduce|reduce_?scatter|(one|two)_?shot|"
        r"(?<![a-z])all_?(reduce|gather|to_?all)",
        "custom all-reduce (vLLM cross_device_reduce_1stage, SGLang custom_all_reduce); "
        "'all' must start a word so that 'small_reduce' stays a reduction",
    ),
    (MEMCPY, r"^memcpy\b", "Kineto names copy-engine events 'Memcpy HtoD (Pinned -> Device)'"),
    (MEMSET, r"^memset\b", "Kineto names memset events 'Memset (Device)'"),
    (
        MOE,
        r"moe|fused_experts|grouped_?gemm|topk_?(softmax|sigmoid)|grouped_topk|"
        r"expert|shuffle_rows|matmul_ogs|^bmm_\w*_dynb|^_finalize_matmul|^_topk_forward|^_combined_routing_|"
        r"^_routing_|^_expt_data_|^_sum_bitmatrix",
        "MoE routing / grouped GEMM: moe_align_block_size, fused_moe_kernel, topk_softmax, Triton "
        "_matmul_ogs_*, TensorRT-LLM bmm_*_dynBatch (one batch per expert); triton_kernels' MoE "
        "(gpt-oss in vLLM and SGLang, triton-lang/triton python/triton_kernels): the top-k combine "
        "_finalize_matmul_scatter_* (matmul_ogs_details/_finalize_matmul.py; 'matmul' in it is not a dense "
        "GEMM) and the routing kernels _topk_forward (topk_details), _combined_routing_compute/_memset, "
        "_expt_data_*, _routing_* (routing.py, routing_details) and _sum_bitmatrix_* (its histogram); "
        "before sampling, whose 'top_?k' would take _topk_forward, which serving engines' samplers do not run",
    ),
    (
        LINEAR_ATTENTION,
        r"gated_delta|delta_rule|fused_recurrent|chunk_gla|causal_conv1d|selective_scan|"
        r"mamba|(?<![a-z])ssd_|_ssm_|chunk_scan|chunk_state|state_passing|lightning_attn|"
        r"linear_attn",
        "linear attention / state-space layers (Qwen3-Next/3.5 gated DeltaNet, Mamba): "
        "fused_recurrent_gated_delta_rule_*, _causal_conv1d_update_kernel; before attention and conv",
    ),
    # Engine attention families whose names the general rule below would miss (XQA's bare
    # ``kernel_mha``) or that it matches only by accident; named here so that their source is.
    (
        ATTENTION,
        r"fmha_v2_|masked_?multi_?head_?attention|(?<![a-z0-9_])kernel_mha(?![a-z0-9_])|xqa_?kernel|"
        r"turbomind::attention_kernel",
        "TensorRT-LLM / FasterTransformer / RTP-LLM / TurboMind attention: context FMHA "
        "fmha_v2_flash_attention_fp16_64_128_S_128_causal_sm80_kernel_nl_tiled (TensorRT-LLM "
        "cpp/tensorrt_llm/kernels/contextFusedMultiHeadAttention/cubin/fmha_cubin.h, mFuncName); masked "
        "multi-head attention mmha::masked_multihead_attention_kernel (FasterTransformer "
        "src/fastertransformer/kernels/decoder_masked_multihead_attention.cu, TensorRT-LLM "
        "decoderMaskedMultiheadAttentionTemplate.h); XQA kernel_mha (TensorRT-LLM cpp/kernels/xqa/mha.cu, "
        'extern "C", loaded by that name from the xqa_kernel_dt_* cubins; RTP-LLM builds it as '
        "xqa_kernel_sm90_* in 3rdparty/xqa/def.bzl); TurboMind turbomind::attention_kernel<AttentionUniversal<..., "
        "DecodingCtaMap | AttentionCtaMap>> (lmdeploy src/turbomind/kernels/attention/kernel_impl.h)",
    ),
    (
        ATTENTION,
        r"flash_fwd|flash_bwd|flash::|pytorch_flash|flash_?attn|flash_?mla|fmha|"
        r"mha_|paged_?attention|(batch|single)(prefill|decode)with|mergestate|"
        r"attention|_attn_|attn_fwd|sdpa|xqa|mmha",
        "flash_fwd_splitkv_kernel, FmhaBatchPrefillWithPagedKVCacheKernel, "
        "paged_attention_ll4mi_QKV_mfma16_kernel, BatchDecodeWithPagedKVCacheKernel",
    ),
    (
        KV_CACHE,
        r"reshape_and_cache|concat_and_cache|store_?kv_?cache|store_cache|kv_?cache|"
        r"kv_buffer|kv_indices|copy_blocks|swap_blocks|slot_mapping|page_indices",
        "KV-cache writes and page bookkeeping: store_kvcache, reshape_and_cache_flash, "
        "create_flashinfer_kv_indices_triton",
    ),
    (
        NORMALIZATION,
        r"rms_?norm|layer_?norm|group_?norm|batch_?norm|instance_?norm|qk_?norm|l2_?norm|"
        r"\bbn_(fw|bw)|cudnn::bn_|gammabetabackward|rowwisemoments|"
        r"triton_\w+_fused\w*(mean\w*rsqrt|var_mean)",
        "add_rmsnorm_quant_kernel, vectorized_layer_norm_kernel, cudnn::bn_fw_tr_1C11_*, "
        "inductor RMSNorm triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0",
    ),
    (
        ATTENTION,
        r"_fwd_kernel|_fwd_grouped_kernel|decode_?attention|context_?attention|"
        r"extend_?attention",
        "Triton attention kernels (SGLang/LightLLM _fwd_kernel*); after norm so that "
        "'_rms_norm_fwd_kernel' stays normalization",
    ),
    (ROPE, r"rotary|rope(?!r)", "rotary_embedding_kernel, apply_rope, mrope"),
    (
        SAMPLING,
        r"sampling|multinomial|top_?k|top_p(?![a-z])|argmax|radixselect",
        "greedy/top-k sampling: reduce_kernel<ArgMaxOps>, gatherTopK, TopKTopPSamplingFromProb",
    ),
    (
        EMBEDDING,
        r"indexselect|index_select|embed|pooled_embs",
        "indexSelectLargeIndex (aten::embedding), fbgemm split_embedding_codegen_*, permute_pooled_embs_kernel",
    ),
    (
        CONV,
        r"conv(?!ert)|scudnn|implicit_?gemm|_fprop|dgrad|wgrad|winograd|im2col|col2im|"
        r"cudnn::cnn|cask_cudnn|cutlass_cudnn|nchwtonhwc|nhwctonchw",
        "cuDNN convolution: implicit_convolve_sgemm, sm80_xmma_fprop_implicit_gemm_*, "
        "volta_scudnn_128x64_relu_*, cutlass_tensorop_s1688dgrad_*",
    ),
    (
        GEMM,
        r"^cijk_|^nvjet|(?<!fb)gemm|gemv|matmul|splitkreduce|cublas|hipblas|wvsplitk|marlin|"
        r"triton_tem_|^bmm_",
        "cuBLAS/cuBLASLt (sm90_xmma_gemm_*, nvjet_sm103_*, ampere_sgemm_*, splitKreduce), "
        "hipBLASLt/Tensile Cijk_*, CUTLASS *gemm*, Triton matmul, inductor templates; "
        "not fbgemm_gpu::* (embedding/sparse helpers)",
    ),
    (
        ACTIVATION,
        r"silu|gelu|swish|swiglu|geglu|act_and_mul|relu|sigmoid|tanh|mish|softplus|"
        r"hardswish|threshold_kernel",
        "act_and_mul_kernel<silu>, silu_kernel, GeluCUDAKernelImpl, threshold (ReLU)",
    ),
    (
        QUANTIZE,
        r"quant(?!ile)|cvt_\w*fp[48]|fp[48]_?quant",
        "activation quantisation before FP8/FP4 GEMMs: scaled_fp8_quant_kernel, cvt_fp16_to_fp4, "
        "quantize_with_block_size; after norms and activations, whose fused +quant kernels keep their job",
    ),
    (
        REDUCTION,
        r"softmax|reduce_kernel|devicereduce|reducebykey|segmentedreduce|scan|cumsum|"
        r"logsumexp|(max|avg)_?pool|welford|nllcriterion",
        "softmax_warp_forward, reduce_kernel<sum/mean/max>, cub DeviceScan, max_pool2d; "
        "not scatter/index_add kernels that merely carry a ReduceAdd functor",
    ),
)

# Kernel families that only say how they run (tier 3 above).
GENERIC_RULES: tuple[tuple[str, str, str], ...] = (
    (
        ELEMENTWISE,
        r"alloc_\w*kernel|future_token|position_kernel",
        "serving-engine bookkeeping: SGLang alloc_decode_kernel, resolve_future_token_ids_kernel",
    ),
    (REDUCTION, r"triton_(red|per)_", "inductor reductions / persistent reductions"),
    (ELEMENTWISE, r"triton_poi_", "inductor pointwise kernels"),
    (
        ELEMENTWISE,
        r"elementwise|functor|copy|catarray|multi_tensor_apply|foreach|gather|"
        r"scatter|index_put|indexfunc|where_kernel|masked_fill|fill_kernel|"
        r"arange|clamp",
        "at::native::*elementwise_kernel, FillFunctor, direct_copy_kernel, CatArrayBatchedCopy, "
        "optimizer multi_tensor_apply, gather/scatter/index kernels",
    ),
)

# Launching-op rules, tried when the kernel name says nothing (see tier 4 above).
OP_RULES: tuple[tuple[str, str, str], ...] = (
    (
        COMMUNICATION,
        r"nccl|c10d::|record_param_comms|all_?reduce|all_?gather|reduce_?scatter|"
        r"all_?to_?all|all2all|broadcast_",
        "collectives: c10d::allreduce_, record_param_comms",
    ),
    (MOE, r"moe|expert", "vllm::moe_align_block_size, sglang fused_moe"),
    (
        ATTENTION,
        r"attention|attn|mha_|fmha",
        "aten::scaled_dot_product_attention, aten::_flash_attention_forward, aiter::mha_*",
    ),
    (KV_CACHE, r"reshape_and_cache|store_cache|kv_?cache|kv_buffer", "sglang::store_cache"),
    (
        NORMALIZATION,
        r"(layer|rms|group|batch|instance)_?norm",
        "aten::layer_norm, aten::rms_norm, aiter::rmsnorm (not aten::norm, a reduction)",
    ),
    (ROPE, r"rotary|rope(?!r)", "sgl_kernel::rotary_embedding"),
    (
        SAMPLING,
        r"::(argmax|topk|multinomial|sort|argsort)$|sampl",
        "aten::argmax, aten::topk, aten::sort (top-p sampling sorts the logits; radix-sort kernels say nothing)",
    ),
    (EMBEDDING, r"embedding|index_select", "aten::embedding, aten::index_select"),
    (CONV, r"conv(?!ert)", "aten::cudnn_convolution, aten::convolution_backward"),
    (
        GEMM,
        r"::(mm|bmm|addmm|addmv|mv|dot|matmul|linear|baddbmm|addbmm|_scaled_mm|einsum|"
        r"_addmm_activation)$|(?<!fb)gemm",
        "aten::mm / aten::linear / aten::addmm, aiter::gemm_a16w16",
    ),
    (
        ACTIVATION,
        r"silu|gelu|relu|sigmoid|tanh|swiglu|act_and_mul|hardswish|mish|softplus|"
        r"threshold",
        "aten::silu, aten::gelu, sgl_kernel::silu_and_mul",
    ),
    (
        REDUCTION,
        r"softmax|::(sum|mean|max|min|amax|amin|prod|cumsum|var|std|norm|"
        r"linalg_vector_norm|logsumexp|all|any)$|(max|avg)_pool",
        "aten::softmax, aten::_softmax, aten::sum, aten::mean",
    ),
    (
        ELEMENTWISE,
        r"^aten::(_?foreach_\w+|add|sub|rsub|mul|div|neg|abs|pow|sqrt|rsqrt|exp|log2?|"
        r"cos|sin|where|clamp\w*|masked_fill|fill|zero|copy|to|_to_copy|clone|"
        r"contiguous|_?cat|stack|index|index_put|_index_put_impl|index_add|"
        r"index_copy|gather|scatter\w*|eq|ne|lt|le|gt|ge|logical_\w+|bitwise_\w+|"
        r"remainder|atan2|minimum|maximum|nan_to_num|arange|repeat|triu|tril)_?$",
        "aten ops that run TensorIterator-style one-pass kernels (copy_, cat, fill_, index, ...)",
    ),
)


def _compile(rules: tuple[tuple[str, str, str], ...]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    # Matching is case-insensitive by lower-casing the text once (``_first``): case-sensitive
    # patterns over lower-case text run several times faster than IGNORECASE over kernel
    # names thousands of characters long. The patterns are written in lower case for that
    # (a test checks it).
    return tuple((category, re.compile(pattern)) for category, pattern, _ in rules)


_KERNEL = _compile(KERNEL_RULES)
_OP = _compile(OP_RULES)
_GENERIC = _compile(GENERIC_RULES)


def _first(rules: tuple[tuple[str, re.Pattern[str]], ...], text: str) -> str | None:
    text = text.lower()
    for category, pattern in rules:
        if pattern.search(text):
            return category
    return None


def categorize(kernel_name: str, op_name: str | None = None, kind: str = "kernel") -> str:
    """Category of one GPU activity (one of ``CATEGORIES``); see ``_categorize``."""
    if not isinstance(op_name, str):
        op_name = None  # pandas NaN and None alike: and NaN != NaN would defeat the cache
    if not isinstance(kernel_name, str):
        kernel_name = ""
    return _categorize(kernel_name, op_name, kind)


@lru_cache(maxsize=1 << 16)
def _categorize(kernel_name: str, op_name: str | None = None, kind: str = "kernel") -> str:
    """Category of one GPU activity (one of ``CATEGORIES``).

    ``op_name`` is the launching op; anything but a non-empty string (None, pandas NaN)
    means "no op".
    """
    if kind in (MEMCPY, MEMSET):
        return kind
    name = kernel_name if isinstance(kernel_name, str) else ""
    return (
        _first(_KERNEL, name)
        or _first(_GENERIC, name)
        or (_first(_OP, op_name) if isinstance(op_name, str) and op_name else None)
        or OTHER
    )


def categorize_many(
    names: Sequence[str] | np.ndarray,
    op_names: Sequence[str | None] | np.ndarray | None = None,
    kinds: Sequence[str] | np.ndarray | None = None,
) -> np.ndarray:
    """``categorize`` over columns (e.g. a kernels table), as an object array.

    Each distinct (name, op, kind) is categorised once: 100k kernels share a few
    hundred names.
    """
    n = len(names)
    ops = op_names if op_names is not None else [None] * n
    kinds_ = kinds if kinds is not None else ["kernel"] * n
    if len(ops) != n or len(kinds_) != n:
        raise ValueError("names, op_names and kinds must have the same length")
    seen: dict[tuple[str, str | None, str], str] = {}
    out = np.empty(n, dtype=object)
    for i, (name, op, kind) in enumerate(zip(names, ops, kinds_)):
        # pandas hands missing ops over as NaN, and NaN != NaN would defeat the cache.
        key = (name, op if isinstance(op, str) else None, kind)
        category = seen.get(key)
        if category is None:
            category = seen[key] = categorize(*key)
        out[i] = category
    return out


def categorize_units(work: pd.DataFrame, ops: pd.DataFrame, op: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``categorize_many`` over a work table (categorical ``name`` and ``kind`` columns)
    whose row ``i`` was launched by row ``op[i]`` of ``ops`` (-1: none), once per distinct
    (name, op name, kind) triple of category codes rather than once per row. Returns the
    categories and each unit's op name (None without an op, as ``astype(str)`` reads it
    otherwise)."""
    if len(ops):
        op_codes = categorical.codes(ops["name"]).astype(np.int64)
        op_code = np.where(op >= 0, op_codes[np.maximum(op, 0)], -1)
        # Code -1: no op (or a nameless one).
        op_names = categorical.with_none(categorical.category_strings(ops["name"]))
    else:
        op_code = np.full(len(op), -1, dtype=np.int64)
        op_names = np.array([None], dtype=object)
    op_name = op_names[op_code]
    op_name[(op >= 0) & (op_code < 0)] = np.nan  # a launching op whose name is missing reads NaN
    name_codes = categorical.codes(work["name"]).astype(np.int64)
    kind_codes = categorical.codes(work["kind"]).astype(np.int64)
    names = np.append(categorical.category_strings(work["name"]), np.nan)
    kinds = np.append(categorical.category_strings(work["kind"]), np.nan)
    n_op, n_kind = len(op_names), len(kinds)
    # Code -1 wraps to the final entry of each vocabulary (NaN, or None for the op).
    key = (name_codes % len(names)) * (n_op * n_kind) + (op_code % n_op) * n_kind + (kind_codes % n_kind)
    if not len(key):
        return np.empty(0, dtype=object), op_name
    # A hash factorisation (distinct keys in order of appearance), not np.unique's sort.
    inverse, uniq = pd.factorize(key)
    name_i, rest = np.divmod(uniq, n_op * n_kind)
    op_i, kind_i = np.divmod(rest, n_kind)
    per_key = categorize_many(names[name_i], op_names[op_i], kinds[kind_i])
    return per_key[inverse], op_name


def unmatched(names: Iterable[str], op_names: Iterable[str | None] | None = None) -> list[str]:
    """Distinct kernel names that fall into ``other``, sorted, for reports to list."""
    pairs = zip(names, op_names) if op_names is not None else ((n, None) for n in names)
    return sorted({name for name, op in set(pairs) if categorize(name, op) == OTHER})


# Modules whose generic kernels (eager elementwise chains, reductions) still do one
# recognisable job: an eager RMSNorm is pow/mean/rsqrt/mul kernels, an eager rotary
# embedding is cat/neg/mul. The innermost ``nn.Module:`` span around the launch says
# which. Only generic categories are refined; a GEMM inside an MLP stays a GEMM.
MODULE_RULES: tuple[tuple[str, str, str], ...] = (
    (ROPE, r"rotary|rope", "nn.Module: Qwen2RotaryEmbedding_0"),
    (NORMALIZATION, r"norm", "nn.Module: Qwen2RMSNorm_0, nn.Module: LayerNorm_3"),
    (ACTIVATION, r"silu|gelu|swiglu|geglu|activation|relu|andmul", "nn.Module: SiLU_0, nn.Module: SiluAndMul_0"),
    (EMBEDDING, r"embedding", "nn.Module: Embedding_0, nn.Module: VocabParallelEmbedding_0"),
    (SAMPLING, r"sampler|logitsprocessor", "nn.Module: Sampler_0"),
)
_MODULE = _compile(MODULE_RULES)
REFINABLE = frozenset({ELEMENTWISE, REDUCTION, OTHER})


def module_category(module_name: str) -> str | None:
    """The job an ``nn.Module:`` span's class name says, or None."""
    return _first(_MODULE, module_name or "")
