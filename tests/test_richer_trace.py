"""The report names the engine option a richer trace needs (issue 46, item 4): an SGLang trace
whose ``step[...]`` labels state no keys or sums, a vLLM trace of ``execute_new_N_cached_M``
labels, each get one sentence naming the option (in ``provenance.richer_trace`` and the
``richer-trace`` finding); a trace whose steps state them, by a second annotation of each step,
gets none."""

from __future__ import annotations

from conftest import read_real
from test_engine_sums import _relabelled

from tracekit.analysis import analyze


def _hint(analysis) -> tuple[str | None, list[str]]:
    return (analysis.provenance.get("richer_trace"), [f.text for f in analysis.findings if f.id == "richer-trace"])


def test_sglang_labels_without_roofline_fields_name_the_option():
    """Bug: a plain ``step[EXTEND bs=.. toks=..]`` trace says nothing of what SGLang could have
    written: the user never learns that one profile option makes attention exact."""
    text, found = _hint(analyze(_relabelled("mi300x_extend", "step[EXTEND bs=15 toks=15360]")))
    assert text and "roofline_annotations" in text and "SGLang" in text
    assert found == [text + "."]


def test_sglang_labels_with_roofline_fields_need_nothing_more():
    """Bug: the hint fires although the label states every sum (it must look at the fields)."""
    # 15 requests of 1,024 new tokens, no prefix: Σq² = 15·1024², Σqk the same, keys = tokens.
    label = "step[EXTEND bs=15 toks=15360 c_sq=15360 c_sk=15360 c_sqsq=15728640 c_sqsk=15728640]"
    assert 15 * 1024**2 == 15728640
    text, found = _hint(analyze(_relabelled("mi300x_extend", label)))
    assert text is None and not found


def test_a_second_annotation_stating_the_sums_silences_the_hint():
    """Bug: the shared SGLang trace carries, beside ``step[...]``, a vLLM-style range stating each
    side's keys and sums; the hint must not tell the user to record what the steps already state."""
    text, found = _hint(analyze(read_real("mi300x_extend")))
    assert text is None and not found


def test_vllm_new_cached_labels_name_the_detailed_annotation_option():
    """Bug: a vLLM trace of ``execute_new_N_cached_M`` steps (no token counts, no sums) gets no hint."""
    text, found = _hint(analyze(read_real("rtx3090_vllm")))
    assert text and "detailed_trace_annotation" in text
    assert found
