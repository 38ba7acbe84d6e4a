"""Phase evidence from the attention kernels of engines that write no step annotations.

An RTP-LLM run (FasterTransformer kernels) recorded without CPU ops or annotations has six steps:
one runs 32 context-FMHA launches (the prompt), the next five 32 masked multi-head attention
launches each (one token each). TensorRT-LLM, FasterTransformer and lmdeploy's TurboMind write
their attention the same ways (the kernel families, with their sources, are in
``taxonomy.KERNEL_RULES``). The traces here are built by hand (``kineto.Doc``) in that shape:
launches on one thread, no ops, no annotations, a host pause between steps, and the same GEMM
grids in every step, so that the attention kernels' names are the evidence that tells the
prompt from the tokens.
"""

from __future__ import annotations

import pytest
from kineto import Doc

from tracekit import read_trace
from tracekit.analysis import analyze
from tracekit.analysis.pricing import taxonomy
from tracekit.analysis.steps import evidence
from tracekit.analysis.steps import segment as seg

LAYERS, DECODE_STEPS = 32, 5

# Context FMHA as RTP-LLM's run launched it (the name TensorRT-LLM's fmha_cubin.h gives the cubin function).
FMHA_V2 = "fmha_v2_flash_attention_fp16_64_128_S_128_causal_sm80_kernel_nl_tiled"
# TurboMind's attention_kernel<AttentionUniversal<..., CtaMap>>, demangled as Kineto writes templates
# (lmdeploy src/turbomind/kernels/attention/attention_config.h and decoding_config.h).
_TM = (
    "void turbomind::attention_kernel<turbomind::attention::AttentionUniversal<turbomind::arch::Sm80, "
    "turbomind::attention::Mainloop<turbomind::attention::Sm80_CpAsync<{stages}>, turbomind::attention::Impl<"
    "(turbomind::attention::MMA){mma}, __half, __half, 1, 64, 64, 1, 16, 64, 128, {stages}> >, "
    "turbomind::attention::{iterator}<__half, 64, 128>, turbomind::attention::{cta_map}> >"
    "(turbomind::AttentionParams<__half>, turbomind::attention::{cta_map})"
)
TM_PREFILL = _TM.format(stages=2, mma=0, iterator="LinearIteratorFactory", cta_map="AttentionCtaMap")
TM_DECODE = _TM.format(stages=3, mma=3, iterator="GetBlockIterFactory", cta_map="DecodingCtaMap")

# (prompt attention, token attention) per engine family.
ENGINES = {
    # RTP-LLM (FasterTransformer kernels): the run of issue 46.
    "rtp-llm": (
        FMHA_V2,
        "void fastertransformer::masked_multihead_attention_kernel<unsigned short, 128, 128, 4, 256, "
        "false>(fastertransformer::Multihead_attention_params<unsigned short, false>)",
    ),
    # TensorRT-LLM generating with XQA: extern "C" kernel_mha, loaded from its xqa_kernel_dt_* cubins.
    "tensorrt-llm-xqa": (FMHA_V2, "kernel_mha"),
    # TensorRT-LLM generating with masked multi-head attention (its mmha namespace).
    "tensorrt-llm-mmha": (
        FMHA_V2,
        "void tensorrt_llm::kernels::mmha::masked_multihead_attention_kernel<unsigned short, "
        "unsigned short, tensorrt_llm::kernels::KVBlockArray, 128, 128, false, false, "
        "false, false, false, 8u, 4u, 4u>",
    ),
    "turbomind": (TM_PREFILL, TM_DECODE),
}

GEMM = "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn"  # cuBLAS
NORM = "void rms_norm_kernel<__half>"
EMBED = "void embedding_lookup_kernel<__half>"
SAMPLE = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float> > >"


def _run(prompt_attention: str, token_attention: str) -> Doc:
    """One prompt step then ``DECODE_STEPS`` token steps of a ``LAYERS``-layer model, each an
    embedding lookup, per layer a norm, a QKV GEMM, attention and an output GEMM, then the LM
    head and the sampler; 2 ms of host time between steps. Only the attention kernel (and the
    time each kernel takes) tells the steps apart."""
    doc = Doc()
    t = 0.0  # host clock, us
    for step in range(1 + DECODE_STEPS):
        prompt = step == 0
        kernel_us = 3000.0 if prompt else 100.0  # ~393 ms and ~13 ms steps, as in the RTP-LLM run
        sequence = [EMBED]
        for _ in range(LAYERS):
            sequence += [NORM, GEMM, prompt_attention if prompt else token_attention, GEMM]
        sequence += [GEMM, SAMPLE]
        gpu = t + 5.0
        for name in sequence:
            gpu = max(gpu, t + 5.0)
            doc.kernel(name, t, gpu, kernel_us, grid=(16, 4, 1))
            gpu += kernel_us
            t += 4.0
        t = gpu + 2000.0
    return doc


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_engine_attention_families_are_attention_with_a_phase(engine):
    """Fails if a family is not attention (XQA's bare ``kernel_mha`` was "other") or does not say
    its phase (RTP-LLM's and TurboMind's generation kernels and every prompt kernel said none).
    Near names stay no evidence: ``fmha_`` alone is not TensorRT-LLM's context FMHA (PyTorch's
    memory-efficient SDPA ``fmha_cutlassF_*`` and CK's ``FmhaFwdKernel`` run for prompt and tokens
    alike), and ``kernel_mha`` counts only as a whole word (llama2.cu-style ``mat_vec_kernel_MHA``)."""
    prompt, token = ENGINES[engine]
    assert taxonomy.categorize(prompt) == taxonomy.categorize(token) == taxonomy.ATTENTION
    assert evidence.is_prefill_attention(prompt) and not evidence.is_decode_attention(prompt)
    assert evidence.is_decode_attention(token) and not evidence.is_prefill_attention(token, weak=True)
    for name in (
        "fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)",
        "_ZN7ck_tile6kentryILi2ENS_13FmhaFwdKernel",
        "mat_vec_kernel_MHA<float>",
    ):
        assert not evidence.is_prefill_attention(name, weak=True) and not evidence.is_decode_attention(name), name


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_unannotated_engine_run_names_its_prefill_and_decode_steps(tmp_path, engine):
    """The steps of a run with no annotations and no CPU ops are found from the launch pattern;
    their phases come from the attention kernels each ran. Fails on the code before these
    families were phase evidence: RTP-LLM's six steps were all "unknown" (no kernel said a
    phase, so no vote was cast), as were XQA's and TurboMind's; TensorRT-LLM's mmha steps were
    decode, but its prompt step was not named by its context FMHA kernel."""
    prompt, token = ENGINES[engine]
    trace = read_trace(_run(prompt, token).write(tmp_path / f"{engine}.json"))
    assert not len(trace.cpu_ops) and not len(trace.annotations)
    s = seg.segment(trace)
    assert s.source == seg.SOURCE_LAUNCHES
    steps = s.steps
    assert steps["phase"].tolist() == [seg.PREFILL] + [seg.DECODE] * DECODE_STEPS
    assert (steps["kernels"] == 1 + 4 * LAYERS + 2).all()
    assert f"prefill attention kernel {prompt[:20]}" in steps["evidence"].iat[0]
    for why in steps["evidence"].iloc[1:]:
        assert f"decode attention kernel {token[:20]}" in why
    # The analysis counts them so: one prefill step (the prompt), five decode steps.
    phases = analyze(trace).to_dict()["phases"]
    assert (phases["prefill"]["steps"], phases["decode"]["steps"]) == (1, DECODE_STEPS)
