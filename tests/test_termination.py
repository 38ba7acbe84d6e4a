"""Every stage finishes, whatever the trace's structure (issue 23): traces grown from a real
one by ``benchmarks/growth.py`` (the stress benchmark and the fuzz campaign grow them the
same way) are analysed in a subprocess under a time limit, so a stage that never ends fails
the test instead of hanging the suite."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT, real_trace_path

# Generous: each case analyses in a few seconds here; the code these tests guard against spins forever.
LIMIT_S = 120


def _growth():
    spec = importlib.util.spec_from_file_location("growth", ROOT / "benchmarks" / "growth.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


growth = _growth()


def _analyse(path, limit_s: float = LIMIT_S) -> dict:
    """The trace at ``path`` analysed in a fresh process (read, analyse, every renderer); its
    timelines' lanes and headline facts back as JSON. Fails when it takes over ``limit_s``."""
    code = textwrap.dedent(f"""
        import json, sys
        from tracekit import read_trace
        from tracekit.analysis import analyze
        from tracekit.report import render
        a = analyze(read_trace({str(path)!r}))
        for fmt in ("json", "md", "text"):
            render(a, fmt)
        d = a.to_dict()
        json.dump({{"timelines": d["timelines"], "kernels": int(len(a.work)),
                    "steps": int(len(a.steps))}}, sys.stdout)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=limit_s, env=env, cwd=str(ROOT)
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"analysing {os.path.basename(str(path))} did not finish within {limit_s} s")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_alternating_kinds_on_one_stream_finish_within_the_cap(tmp_path):
    """10,000 kernels alternating a GEMM and a norm on one stream (the real MI300X decode
    step's stream, its kernels replaced): no two neighbours share a kind, so merging by kind
    cannot get the lane under MAX_SEGMENTS. Fails on the bug where ``_segments`` then raised
    its tolerance forever (the test times out), and if the coarsened lane loses intervals,
    goes over the cap or is keyed by the lesser kind."""
    from tracekit.analysis.pricing.taxonomy import categorize
    from tracekit.analysis.steps import timeline

    doc = growth.load(str(real_trace_path("mi300x_decode")))
    grown = growth.alternate_categories(doc, 10_000)
    path = growth.write(grown, str(tmp_path / "alternating.json.gz"))
    # The two kinds, as the growth chose them: the first (and longer) is the busier in every slice.
    stream_kernels = [e for e in grown["traceEvents"] if e.get("cat") == "kernel" and e["args"].get("stream") == 3]
    long_kind, short_kind = categorize(stream_kernels[-2]["name"]), categorize(stream_kernels[-1]["name"])
    assert long_kind != short_kind
    out = _analyse(path)
    tl = out["timelines"][0]
    lane = next(lane for lane in tl["lanes"] if lane["name"] == "GPU stream 3")
    segs = lane["segments"]
    assert len(segs) <= timeline.MAX_SEGMENTS
    # Every kernel of the step on that stream is drawn once: the 10,000 grown ones plus the
    # step's memcpys left on the stream (kernels of the step on other lanes: the rest).
    other_lanes = sum(s[4] for ln in tl["lanes"] if ln["kind"] == "stream" and ln is not lane for s in ln["segments"])
    assert sum(s[4] for s in segs) == tl["kernels"] - other_lanes
    assert sum(s[4] for s in segs) >= 10_000
    # Equal time slices of ~6.7 alternating kernels: each holds both kinds, the long one busier
    # (the few slices that also hold one of the step's memcpys say 3 kinds).
    mixed = [s for s in segs if " of 2 kinds, " in tl["labels"][s[3]]]
    assert len(mixed) > timeline.MAX_SEGMENTS * 0.9
    assert {tl["keys"][s[2]] for s in mixed} == {long_kind}
    assert {tl["labels"][s[3]] for s in mixed} == {f"{s[4]} intervals of 2 kinds, mostly {long_kind}" for s in mixed}
    # Slices in time order, each within the step.
    starts = [s[0] for s in segs]
    assert starts == sorted(starts) and all(s[1] >= s[0] for s in segs)


def test_repeated_decode_steps_finish(tmp_path):
    """The issue's reproduction: the MI300X SGLang decode step's complete events repeated 20
    times, each copy shifted by the trace's span, ids left as they are (~30k events). Fails on
    the bug where ``summary`` never finished (``_segments`` spinning, from ``_streams``): the
    subprocess times out. Every lane stays under the cap, and no kernel goes missing."""
    from tracekit.analysis.steps import timeline

    doc = growth.load(str(real_trace_path("mi300x_decode")))
    grown = growth.repeat_steps(doc, 20, shift_ids=False)
    n_kernels = sum(1 for e in grown["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert n_kernels == 20 * 558  # 555 kernels and 3 memcpys per copy, as the trace holds
    out = _analyse(growth.write(grown, str(tmp_path / "repeated.json")))
    assert out["kernels"] == n_kernels
    # The copies share correlation ids; each kernel still goes with the launch of its own
    # copy (the latest call of its id before it started), so the run is 20 steps, not one
    # step of all 20 copies' time (what linking every kernel to the first copy's launch gave).
    assert out["steps"] == 20
    for tl in out["timelines"]:
        assert all(len(lane["segments"]) <= timeline.MAX_SEGMENTS for lane in tl["lanes"])
        drawn = sum(s[4] for lane in tl["lanes"] if lane["kind"] == "stream" for s in lane["segments"])
        assert drawn == tl["kernels"]


@pytest.mark.parametrize("case", sorted(growth.CASES))
def test_every_growth_finishes(tmp_path, case):
    """Each structure the stress benchmark grows (more steps, alternating kinds, threads,
    nesting, Python frames, tiny steps, no launches, overlapping streams), at a small scale,
    analyses and renders within the limit: a stage that loops on one of those structures, or
    crashes on it, fails here (before issue 23 the alternating case, 2,000 kernels, spun in `_segments`)."""
    doc = growth.load(str(real_trace_path("mi300x_decode")))
    grown = growth.grow(doc, case, 0.02)  # 2,000 alternating kernels: past the cap of 1,500
    out = _analyse(growth.write(grown, str(tmp_path / "grown.json.gz")))
    assert out["kernels"] > 0


@pytest.mark.parametrize("where", ["args", "top"])
def test_nesting_past_the_decoder_is_a_sentence(tmp_path, where):
    """The real MI300X decode step with one value nested 100,000 arrays deep (in an event's
    args, or in a top-level key): reading and splitting it stop with one sentence. Fails on the
    bug where the decoder's RecursionError came out as a traceback."""
    from tracekit import read_trace
    from tracekit.errors import TracekitError
    from tracekit.trace import windows

    doc = growth.load(str(real_trace_path("mi300x_decode")))
    deep = "[" * 100_000 + "]" * 100_000
    text = json.dumps(doc)
    if where == "top":
        text = text[:-1] + ', "deepKey": ' + deep + "}"
    else:
        at = text.index('"args": {') + len('"args": {')
        text = text[:at] + '"deep": ' + deep + ", " + text[at:]
    path = tmp_path / "deep.json"
    path.write_text(text)
    with pytest.raises(TracekitError, match="nests JSON arrays or objects too deep to be a trace"):
        read_trace(str(path))
    with pytest.raises(TracekitError, match="too deep"):
        windows.split(str(path), str(tmp_path / "windows"))
    assert not (tmp_path / "windows").exists()
