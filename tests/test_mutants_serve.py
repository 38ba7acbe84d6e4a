"""Tests written for the survivors of the mutation campaign's samples of tracekit/serve (issue 51,
part 5): each names the mutant it kills; the expected messages are the ones the server promises
its client (a GPU not in the database fails first; an unreadable path says why in words)."""

from __future__ import annotations

import pytest

from tracekit.errors import TracekitError
from tracekit.serve.cache import AnalysisCache, Confinement, identity


def test_a_gpu_not_in_the_database_fails_before_the_trace_is_read(tmp_path):
    """Mutant: serve/cache.py AnalysisCache.get ``if gpu is not None`` -> ``if not gpu is not None``:
    the GPU was never looked up first, so a request naming an unknown GPU read (and here failed
    on) the trace instead of saying the GPU is unknown; nothing is analysed either way."""
    junk = tmp_path / "junk.json"
    junk.write_text("not json")
    cache = AnalysisCache(Confinement([str(tmp_path)]))
    with pytest.raises(TracekitError, match="'no-such-gpu' is not in tracekit's GPU database"):
        cache.get(str(junk), gpu="no-such-gpu")
    assert cache.misses == 0


def test_an_unreadable_path_says_why_in_words(tmp_path):
    """Mutant: serve/cache.py identity ``e.strerror or e`` -> ``and``: the message carried Python's
    "[Errno 2] No such file or directory: '...'" instead of the OS's words alone."""
    missing = tmp_path / "missing.json"
    with pytest.raises(TracekitError) as e:
        identity(str(missing))
    assert str(e.value) == f"{missing}: cannot read it (No such file or directory)"


def test_the_server_falls_back_to_fastmcp_when_mcp_2_is_absent(monkeypatch):
    """Mutant: serve/server.py _sdk ``except ImportError`` -> an exception nothing raises: with
    mcp 1 installed (no mcp.server.mcpserver) the server could not start at all. mcp 2 is what
    this environment has, so mcp 1 is stood in for: mcpserver hidden (a None entry in
    sys.modules), and a module mcp.server.fastmcp with its FastMCP and ToolError."""
    import sys
    import types

    from tracekit.serve.server import _sdk

    fast = types.ModuleType("mcp.server.fastmcp")
    exc = types.ModuleType("mcp.server.fastmcp.exceptions")

    class FastMCP: ...

    class ToolError(Exception): ...

    fast.FastMCP, exc.ToolError = FastMCP, ToolError
    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)
    monkeypatch.setitem(sys.modules, "mcp.server.fastmcp", fast)
    monkeypatch.setitem(sys.modules, "mcp.server.fastmcp.exceptions", exc)
    assert _sdk() == (FastMCP, ToolError)


@pytest.fixture(scope="module")
def rtx_tools():
    from conftest import real_trace_path

    from tracekit.serve.tools import Tools

    path = real_trace_path("rtx3090_vllm")
    return Tools(AnalysisCache(Confinement([str(path.parent)]))), str(path)


def test_the_idle_tool_lists_only_the_asked_phases_findings(rtx_tools):
    """Mutant: serve/tools.py idle ``f["phase"] == phase`` -> ``>=``: asked for decode, the tool also
    listed the prefill findings ("prefill" sorts after "decode"). The vLLM trace's one idle
    finding is its prefill's host-bound (the analysis's own findings list says): none for decode."""
    from tracekit.serve.tools import _IDLE_FINDINGS

    tools, path = rtx_tools
    doc = tools.cache.get(path).doc
    idle = [(f["id"], f["phase"]) for f in doc["findings"] if f["id"] in _IDLE_FINDINGS]
    assert idle and all(p != "decode" for _, p in idle)
    assert tools.idle(path, phase="decode")["findings"] == []
    assert [(f["id"], f["phase"]) for f in tools.idle(path)["findings"]] == idle


def test_the_whatif_tool_gives_every_critical_path_part_but_the_category_split(rtx_tools):
    """Mutant: serve/tools.py whatif ``k != "kernel_by_category"`` -> ``>=``: the parts sorting
    before "kernel_by_category" (host, kernel) were dropped and the split itself kept. The tool's
    rows have the parts of the replay's own (report.whatif, run a second time) less
    kernel_by_category."""
    from tracekit.analysis.replay.changes import parse
    from tracekit.report.whatif import whatif

    tools, path = rtx_tools
    got = tools.whatif(path, remove="launch")["critical_path_ms"]
    own = whatif(tools.cache.get(path).analysis, parse("launch", None, None)).to_dict()["critical_path"]
    assert {p: set(row) for p, row in got.items()} == {p: set(row) - {"kernel_by_category"} for p, row in own.items()}
    assert all({"host", "kernel"} <= set(row) and "kernel_by_category" not in row for row in got.values())


def test_a_finding_index_out_of_range_names_the_valid_range():
    """Mutant: serve/tools.py _find ``len(found) - 1`` -> ``/ 1``: three findings are 0 to 2, not
    0 to 3.0."""
    from tracekit.serve.tools import _find

    found = [{"id": "a", "phase": "decode"}] * 3
    with pytest.raises(TracekitError, match=r"this trace has 3 \(0 to 2\)$"):
        _find(found, "7", None)


def test_the_kernels_tool_fills_each_column_with_its_own_value(rtx_tools):
    """Mutant: serve/tools.py _kernel_cell ``c == "name"`` -> ``c <= "name"``: every column whose
    name sorts before "name" (category, calls, bound, limiter, mean_us...) was filled with the
    kernel's short name. Each row's category is one of the phase's categories (the report's own
    by_category), its calls a whole number, and only the name column holds the name."""
    tools, path = rtx_tools
    out = tools.kernels(path, phase="decode", limit=5)
    cols = out["columns"]
    assert out["rows"]
    for row in out["rows"]:
        cell = dict(zip(cols, row))
        assert cell["category"] in out["by_category_ms"]
        assert isinstance(cell["calls"], int) and cell["calls"] >= 1
        assert cell["bound"] in ("compute", "memory", "interconnect", "unknown")
        assert sum(v == cell["name"] for v in row) == 1


def test_the_idle_tool_carries_the_launch_overhead_per_decode_step(rtx_tools):
    """Mutant: serve/tools.py idle ``is not None`` -> ``is None``: the report's launch overhead per
    decode step (0.24 ms on this vLLM trace, in the JSON report's metrics) was left out, and a
    missing one would have been copied as null. The tool gives it, rounded to 5 digits."""
    tools, path = rtx_tools
    want = tools.cache.get(path).doc["metrics"]["launch_overhead_ms_per_decode_step"]
    assert want is not None
    assert tools.idle(path)["launch_overhead_ms_per_decode_step"] == pytest.approx(want, abs=1e-5)


def test_a_finding_asked_for_by_id_and_phase_is_that_phases():
    """Mutant: serve/tools.py _find ``f["phase"] == phase`` -> ``<=``: asked for a finding of the
    prefill phase, the tool took the same id's decode finding listed before it ("decode" sorts
    before "prefill"). By hand: index 1 is the prefill one; an id missing from the phase fails."""
    from tracekit.serve.tools import _find

    found = [{"id": "host-bound", "phase": "decode"}, {"id": "host-bound", "phase": "prefill"}]
    assert _find(found, "host-bound", "prefill") == 1
    assert _find(found, "host-bound", "decode") == 0
    with pytest.raises(TracekitError, match="no finding 'host-bound' in mixed"):
        _find(found, "host-bound", "mixed")


def test_the_device_brief_gives_the_reason_only_when_no_spec_row_was_found():
    """Mutant: serve/tools.py _device ``dev.get("spec") is None`` -> ``is not None``: the reason a
    device has no spec row (why its peaks are unknown) was dropped when it had none and shown when
    it had one."""
    from tracekit.serve.tools import _device

    unknown = {"name": "NVIDIA X1", "spec": None, "peak_basis": None, "reason": "not in tracekit's GPU database"}
    assert _device({"device": unknown})["reason"] == "not in tracekit's GPU database"
    known = {"name": "NVIDIA H100 80GB HBM3", "spec": "H100 SXM", "peak_basis": "datasheet", "reason": "a note"}
    assert _device({"device": known}) == {
        "name": "NVIDIA H100 80GB HBM3",
        "spec": "H100 SXM",
        "peak_basis": "datasheet",
    }


def test_the_steps_tool_starts_at_the_first_step(rtx_tools):
    """Mutant: serve/tools.py steps ``start: int = 0`` -> ``-1``: asked for the steps with no start,
    the tool said its range began at step -1 (a step index is never negative, so the rows are
    the same). The rows must be the report's steps from index 0 on, as the JSON report lists
    them, and the range [0, None]."""
    tools, path = rtx_tools
    out = tools.steps(path, limit=3)
    assert out["range"] == [0, None]
    doc = tools.cache.get(path).doc
    i = out["columns"].index("index") if "index" in out["columns"] else 0
    assert [r[i] for r in out["rows"]] == [s.get("index", k) for k, s in enumerate(doc["steps"][:3])]


def test_a_phase_with_no_idle_has_no_largest_idle_cause():
    """Mutant: serve/tools.py _phase_brief ``causes[0][1]`` -> ``causes[0][0]``: a phase whose every
    idle cause is 0 ms was given one (its name is never empty). By hand: launch 2 ms over sync
    1 ms; all zero, none."""
    from tracekit.serve.tools import _phase_brief

    assert _phase_brief({"idle_by_cause": {"sync": 1.0, "launch": 2.0}})["largest_idle_cause"] == ["launch", 2.0]
    assert _phase_brief({"idle_by_cause": {"sync": 0.0, "launch": 0.0}})["largest_idle_cause"] is None


def test_a_findings_evidence_counts_graph_replay_steps_and_keeps_to_its_own_figures():
    """Mutants: serve/tools.py _evidence ``sum(1 for s in steps if graph_replay)`` -> ``sum(2 ...)``
    (each replayed step counted twice) and ``fid == "outside-steps"`` -> ``<=`` (the time outside
    the steps added to every finding whose id sorts before it, "graph-replay" among them). By
    hand: 2 of 3 steps are graph replays; only the outside-steps finding carries outside_steps."""
    from types import SimpleNamespace

    from tracekit.serve.tools import _evidence

    doc = {
        "phases": {},
        "top_kernels": {},
        "provenance": {"lacks": [], "unknown_bound_ms_by_reason": {}, "outside_steps": {"ms": 4.0}},
        "steps": [{"graph_replay": True}, {"graph_replay": False}, {"graph_replay": True}],
        "metrics": {},
        "device": {},
    }
    entry = SimpleNamespace(doc=doc)
    ev = _evidence(entry, {"id": "graph-replay", "phase": None})
    assert ev["graph_replay_steps"] == 2 and "outside_steps" not in ev
    assert _evidence(entry, {"id": "outside-steps", "phase": None})["outside_steps"] == {"ms": 4.0}


# --- a fresh sample after the tests above: --packages tracekit/serve --sample 25 --seed 52 ----------


def test_the_explain_tool_relates_the_other_findings_of_the_phase(rtx_tools):
    """Mutant: serve/tools.py explain ``i != index`` -> ``i >= index``: the related findings listed
    the finding itself and left out those before it. By hand from the report's findings list:
    every other finding of the same phase, in order."""
    tools, path = rtx_tools
    found = tools.cache.get(path).doc["findings"]
    for index, f in enumerate(found):
        want = [{"index": i, "id": g["id"]} for i, g in enumerate(found) if i != index and g["phase"] == f["phase"]]
        assert tools.explain(path, str(index)).get("related", []) == want


def test_a_tensor_parallel_degree_of_1_is_valid(tmp_path):
    """Mutants: serve/cache.py get ``tp < 1`` -> ``tp < 2``, and serve/server.py ``Tp = ... ge=1`` ->
    ``ge=2``: tp=1 (no tensor parallelism) was refused. The cache takes it (and goes on to read
    the file, here not JSON); the tool argument's schema takes 1 and refuses 0."""
    from pydantic import TypeAdapter, ValidationError

    from tracekit.serve.server import Tp

    junk = tmp_path / "junk.json"
    junk.write_text("not json")
    cache = AnalysisCache(Confinement([str(tmp_path)]))
    with pytest.raises(TracekitError, match="is not JSON"):
        cache.get(str(junk), tp=1)
    with pytest.raises(TracekitError, match="tp 0 is not a whole number above 0"):
        cache.get(str(junk), tp=0)
    assert TypeAdapter(Tp).validate_python(1) == 1
    with pytest.raises(ValidationError):
        TypeAdapter(Tp).validate_python(0)


def test_a_library_sentence_names_the_tool_argument_not_the_cli_option():
    """Mutant: serve/server.py _as_argument ``if message.startswith(flag + " ")`` -> ``if not ...``:
    every other message lost its first two characters and the flagged ones kept "--". By hand:
    "--gpu 'x' is not ..." becomes "gpu 'x' is not ..."; other sentences stay whole."""
    from tracekit.serve.server import _as_argument

    assert _as_argument("--gpu 'x' is not in tracekit's GPU database") == "gpu 'x' is not in tracekit's GPU database"
    assert _as_argument("--tp 0 is not valid") == "tp 0 is not valid"
    assert _as_argument("phase 'x' is not in this trace") == "phase 'x' is not in this trace"


def test_a_long_step_label_is_cut_to_the_name_width():
    """Mutant: serve/tools.py _step_cell ``c == "label"`` -> ``c < "label"``: a step's label (the
    trace's own text, any length) was no longer cut. By hand: NAME_WIDTH - 1 characters and "…"."""
    from tracekit.serve.tools import NAME_WIDTH, _step_cell

    assert _step_cell({"label": "x" * (NAME_WIDTH + 30)}, "label") == "x" * (NAME_WIDTH - 1) + "…"
    assert _step_cell({"label": "decode step"}, "label") == "decode step"


def test_a_findings_evidence_lists_the_phases_nonzero_idle_causes():
    """Mutant: serve/tools.py _evidence ``(p.get("idle_by_cause") or {})`` -> ``and {}``: the
    evidence's idle split was always empty. By hand: sync 1.5 ms is listed, launch at 0 is not."""
    from types import SimpleNamespace

    from tracekit.serve.tools import _evidence

    doc = {
        "phases": {"decode": {"idle_by_cause": {"sync": 1.5, "launch": 0.0}}},
        "top_kernels": {},
        "provenance": {},
        "steps": [],
        "metrics": {},
        "device": {},
    }
    ev = _evidence(SimpleNamespace(doc=doc), {"id": "no-such-rule", "phase": "decode"})
    assert ev["phase"]["idle_by_cause_ms"] == {"sync": 1.5}


def test_tool_figures_keep_the_microsecond_below_a_million_ms_and_five_digits_above():
    """Mutant: serve/tools.py _round ``abs(x) < 1e6`` -> ``< 1000001.0``: from 1e6 on a figure is
    given to 5 significant digits, as the docstring's 123456.789 ms example sets the bound."""
    from tracekit.serve.tools import _round

    assert _round(123456.7894) == 123456.789
    assert _round(1000000.5) == 1000000.0
    assert _round(0.000123456) == 0.00012346


def test_a_phase_brief_names_its_three_largest_categories():
    """Mutant: serve/tools.py _phase_brief ``[:3]`` -> ``[:2]``: the brief named two categories. By
    hand: of four shares, the three largest, largest first."""
    from tracekit.serve.tools import _phase_brief

    shares = {"gemm": 0.5, "attention": 0.2, "elementwise": 0.25, "memcpy": 0.05}
    assert list(_phase_brief({"by_category_share": shares})["top_categories"]) == ["gemm", "elementwise", "attention"]


def test_the_compare_tool_gives_each_phases_explanation():
    """Mutant: serve/tools.py compare ``(v.get("explanation") or [])[:n]`` -> ``and``: every phase's
    explanation came back empty. The B300 and MI300X runs of one model differ in time, so each
    phase's explanation has at least 3 sentences, the first on the phase's time; cut at limit=3."""
    from conftest import real_trace_path

    from tracekit.serve.tools import Tools

    before, after = real_trace_path("b300_qwen3_moe"), real_trace_path("mi300x_qwen3_moe")
    tools = Tools(AnalysisCache(Confinement([str(before.parent)])))
    out = tools.compare(str(before), str(after), limit=3)
    assert out["phases"]
    for v in out["phases"].values():
        assert len(v["explanation"]) == 3 and v["explanation"][0].startswith("Time ")


# --- seed 54: --packages tracekit/serve --sample 25 --seed 54 --lists-only ----------------------


def test_a_cache_of_one_keeps_one_analysis(tmp_path, monkeypatch):
    """Mutant: serve/cache.py AnalysisCache ``max(1, size)`` -> ``max(2, size)``: ``tracekit mcp
    --cache 1`` ("analyses kept in memory", at least 1) kept two. The analysis itself is stood in
    for (it is not what is counted): two traces asked for in turn leave one held, and asking for
    the first again analyses it again. A size of 0 still keeps one."""
    from tracekit.serve import cache as cache_module
    from tracekit.serve.cache import Entry

    monkeypatch.setattr(cache_module, "_analyse", lambda real, model, gpu, tp: Entry(real, None, {}))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text("{}")
    b.write_text("{}")
    cache = AnalysisCache(Confinement([str(tmp_path)]), size=1)
    cache.get(str(a))
    cache.get(str(b))
    assert len(cache) == 1 and cache.misses == 2
    cache.get(str(a))
    assert cache.misses == 3
    assert AnalysisCache(Confinement([str(tmp_path)]), size=0).size == 1


def test_a_long_full_kernel_name_is_cut_to_the_name_width():
    """Mutants: serve/tools.py _kernel_cell ``r["name"][: NAME_WIDTH - 1] + "…"`` -> ``NAME_WIDTH +
    1`` or ``NAME_WIDTH - 0`` (one or two characters over the width) and ``| "…"`` (a TypeError on
    any long name): a kernel's full name (C++ template names run to thousands of characters) is
    kept to NAME_WIDTH characters, the last an ellipsis. By hand: NAME_WIDTH - 1 characters and
    "…"; a name of exactly NAME_WIDTH stays whole; the short name is not cut."""
    from tracekit.serve.tools import NAME_WIDTH, _kernel_cell

    long = "void cutlass::Kernel<" + "x" * (NAME_WIDTH + 50) + ">"
    cut = _kernel_cell({"name": long, "short_name": "cutlass"}, "full_name")
    assert cut == long[: NAME_WIDTH - 1] + "…" and len(cut) == NAME_WIDTH
    exact = "y" * NAME_WIDTH
    assert _kernel_cell({"name": exact, "short_name": "y"}, "full_name") == exact
    assert _kernel_cell({"name": long, "short_name": "cutlass"}, "name") == "cutlass"


# --- seed 55 (the sample's survivors in tracekit/serve, coverage-map mode) ------------------------


def test_a_model_folder_outside_the_allowed_folders_is_refused_though_its_name_has_no_slash(tmp_path, monkeypatch):
    """Mutant: serve/cache.py AnalysisCache._model ``os.path.exists(candidate) or os.sep in model or
    ...`` -> ``exists(candidate) and os.sep in model or ...``: a model naming an existing folder
    without a slash in it ("ckpt") was no longer taken for a path, so it was never confined:
    load_model read its config.json from wherever it was. docs/mcp.md: a ``model`` that names a
    file is resolved and refused outside the --allow folders. By hand: the server started in
    tmp_path (its folder, the base of relative paths) with --allow traces; ckpt/config.json lies
    beside traces, not under it, so model="ckpt" is refused, before any analysis."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "traces").mkdir()
    trace = tmp_path / "traces" / "t.json"
    trace.write_text("{}")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text('{"model_type": "llama"}')
    cache = AnalysisCache(Confinement(["traces"]))
    with pytest.raises(TracekitError, match="^ckpt is outside the folders this server may read"):
        cache.get(str(trace), model="ckpt")
    assert cache.misses == 0


# --- seed 56 (the sample's survivors in tracekit/serve, coverage-map mode) ------------------------


def test_a_model_findings_evidence_carries_the_model_description():
    """Mutant: serve/tools.py _evidence ``fid.startswith("model") or fid.startswith("experts")`` ->
    ``and`` (never true: no id starts with both): the model-* and experts-* findings (the rules'
    ids model-precision, model-mismatch, model-undescribed, experts-concentrated) lost the model
    block their rule reads; only cost-sources and fp8-weights kept it. By hand: the doc's model has a
    name and a TP degree and no estimates, so the block holds those two, for each of the four ids."""
    from types import SimpleNamespace

    from tracekit.serve.tools import _evidence

    doc = {
        "phases": {},
        "top_kernels": {},
        "provenance": {},
        "steps": [],
        "metrics": {},
        "device": {},
        "model": {"name": "Qwen3-30B-A3B", "tp": 2, "estimates": None},
    }
    entry = SimpleNamespace(doc=doc)
    for fid in ("model-precision", "model-mismatch", "model-undescribed", "experts-concentrated"):
        assert _evidence(entry, {"id": fid, "phase": None})["model"] == {"name": "Qwen3-30B-A3B", "tp": 2}, fid
    assert "model" not in _evidence(entry, {"id": "graph-replay", "phase": None})
