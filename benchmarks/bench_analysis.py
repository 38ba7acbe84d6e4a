"""Segmentation and roofline attribution of a big trace, against reading it.

    python benchmarks/bench_analysis.py [TRACE]   (default: ../shared/traces/v100_ddp_train_large.json.gz)
    python benchmarks/bench_analysis.py --stress [--scale 0.1] [--case threads]   (the stress set alone)
    python benchmarks/bench_analysis.py --quick   (the stress set at a tenth of the issue's sizes)

Prints each stage's best-of-N time and its ratio to the read. Targets (issues 4
and 5): segmentation adds less than the read itself, and so does attribution.
The V100 file is a training trace, so segmentation stops once it recognises that;
the inference traces below show the full path (passes, classification, steps).

Serving traces (issue 10): segmenting the GB10 vLLM trace (10 decode steps, ~15k
kernels) stays under 10% of its read, with its annotations, from its execute_model
frames (annotations stripped) and from the launch pattern (Python frames stripped too).

Idle causes and step timelines (issue 12): attributing every idle gap to its cause, naming
the largest ones (call, op, Python frames) and building the two step timelines adds less than
10% to the time of analysing the GB10 serving trace (read + analyse, as ``tracekit report``
does). The two smaller traces are shown for information: on them fixed costs of a few
milliseconds weigh more. Since the idle table groups every interval, not the 100 largest (its
counts and times were a sample's), every one of GB10's 11,614 idle cells is named: about 0.05 s
more, and the stage reads ~20% (it read 10.1% before, just over the target too).

Model pricing (issue 11): pricing a serving trace's kernels from its model (``--model``)
adds less than 10% to the time of analysing it (read + analyse, as ``tracekit report``
does); the line also shows the extra against the analysis stage alone. Caches of
per-name answers are cleared before each run, as a fresh process starts.

Structure stress (issue 23): traces grown from a real one the way real runs grow
(``growth.py``: steps repeated 1,000x, kernel kinds alternating on one stream 100k times,
10k threads, nesting 1,000 deep, 1M Python frames, 50k tiny steps, kernels without
launches, every stream overlapping), each analysed against its own read in the same run,
per million events. Target: every stage terminates, and no case's analysis above 3x its
read. ``--stress`` exits 1 when a case is over.
"""

from __future__ import annotations

import gc
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "traces")
DEFAULT = os.path.join(SHARED, "v100_ddp_train_large.json.gz")
INFERENCE = ["mi300x_sglang-qwen3-8b_extend-step.json.gz", "h100_hf-qwen1.5-0.5b_forward_bs16.json.gz"]
SERVING = os.path.join(SHARED, "gb10_vllm-qwen3.5-27b-nvfp4_decode-10steps.pt.trace.json.gz")
SERVING_TARGET = 0.10


def _best(fn, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def measure(path: str) -> dict:
    from tracekit import read_trace
    from tracekit.analysis.pricing.attribution import attribute
    from tracekit.analysis.steps.segment import segment
    from tracekit.specs import lookup

    trace = read_trace(path)
    seg = segment(trace)
    match = lookup(trace.device_props())
    t_read = _best(lambda: read_trace(path))
    t_seg = _best(lambda: segment(trace))
    t_attr = _best(lambda: attribute(trace, seg, match))
    return {"file": os.path.basename(path), "read_s": t_read, "segment_s": t_seg, "attribute_s": t_attr}


def main(paths: list[str]) -> list[dict]:
    out = []
    for path in paths:
        if not os.path.exists(path):
            print(f"skipped: {path} is absent (../shared/traces is not beside this checkout)")
            continue
        r = measure(path)
        out.append(r)
        print(
            f"{r['file']:50s} read {r['read_s']:.3f} s | segment {r['segment_s']:.3f} s "
            f"({r['segment_s'] / r['read_s']:.2f}x read) | attribute {r['attribute_s']:.3f} s "
            f"({r['attribute_s'] / r['read_s']:.2f}x read)   target: both < 1.00x"
        )
    return out


def serving(path: str = SERVING) -> list[dict]:
    """Segmentation of a serving trace by each step source, against its read."""
    import dataclasses

    from tracekit import read_trace
    from tracekit.analysis.steps.segment import segment

    if not os.path.exists(path):
        print(f"skipped: {path} is absent (../shared/traces is not beside this checkout)")
        return []
    trace = read_trace(path)
    t_read = _best(lambda: read_trace(path))
    no_ann = dataclasses.replace(trace, annotations=trace.annotations.iloc[0:0])
    bare = dataclasses.replace(no_ann, python=trace.python.iloc[0:0])
    out = []
    from tracekit.analysis.pricing import taxonomy
    from tracekit.analysis.steps import evidence

    def cold(t):
        # As a fresh process meets the trace: the per-name caches start empty.
        taxonomy._categorize.cache_clear()
        evidence._GEMM_CACHE.clear()
        return segment(t)

    for label, t in (("annotations", trace), ("execute_model frames", no_ann), ("launch pattern", bare)):
        s = segment(t)
        t_seg = _best(lambda: cold(t))
        ratio = t_seg / t_read
        out.append({"file": os.path.basename(path), "source": label, "steps": len(s.steps), "ratio": ratio})
        print(
            f"{os.path.basename(path)[:40]:40s} {label:21s} {len(s.steps):3d} steps | read {t_read:.3f} s | "
            f"segment {t_seg:.3f} s ({ratio:.3f}x read)   target < {SERVING_TARGET:.2f}x"
            f"{'' if ratio < SERVING_TARGET else '   MISSED'}"
        )
    return out


MODELLED = [
    ("gb10_vllm-qwen3.5-27b-nvfp4_decode-10steps.pt.trace.json.gz", "qwen3.5-27b", "nvfp4"),
    ("b200_vllm-gpt-oss-120b-tp8_prefill-eager.json.gz", "gpt-oss-120b", None),
    ("mi300x_sglang-qwen3-8b_extend-step.json.gz", "qwen3-8b", None),
    ("b300_sglang-qwen3-30b-a3b_decode-bs16_graph.json.gz", "qwen3-30b-a3b", None),
]
MODEL_TARGET = 0.10


def model_pricing() -> list[dict]:
    """Analysis with and without the model, against read + analysis."""
    from tracekit import read_trace
    from tracekit.analysis import analyze
    from tracekit.analysis.pricing import kernel_names, taxonomy
    from tracekit.analysis.steps import evidence
    from tracekit.models import load_model

    out = []
    for name, key, weights in MODELLED:
        path = os.path.join(SHARED, name)
        if not os.path.exists(path):
            print(f"skipped: {path} is absent (../shared/traces is not beside this checkout)")
            continue
        trace = read_trace(path)
        model = load_model(key, weights=weights)

        def cold(**kw):
            taxonomy._categorize.cache_clear()
            kernel_names.name_dtype.cache_clear()
            kernel_names.component_of.cache_clear()
            kernel_names.name_flags.cache_clear()
            evidence._GEMM_CACHE.clear()
            return analyze(trace, **kw)

        t_read = _best(lambda: read_trace(path))
        # Alternate the two, best of several: on a shared machine, load drifts between runs.
        t_plain = t_model = float("inf")
        for _ in range(11):
            t_plain = min(t_plain, _best(lambda: cold(), repeat=1))
            t_model = min(t_model, _best(lambda: cold(model=model), repeat=1))
        extra = max(t_model - t_plain, 0.0)
        ratio = extra / (t_read + t_plain)
        out.append({"file": name, "extra_s": extra, "ratio": ratio})
        print(
            f"{name[:40]:40s} --model {key:14s} read {t_read:.3f} s | analyse {t_plain:.3f} s | with the model "
            f"{t_model:.3f} s: +{extra:.3f} s = {ratio:.1%} of read + analyse ({extra / t_plain:.0%} of analyse "
            f"alone)   target < {MODEL_TARGET:.0%}{'' if ratio < MODEL_TARGET else '   MISSED'}"
        )
    return out


IDLE_TARGET = 0.10


def idle_and_timelines() -> list[dict]:
    from tracekit import read_trace
    from tracekit.analysis.analyze import analyze
    from tracekit.analysis.steps.latency import step_weights
    from tracekit.analysis.steps.segment import segment
    from tracekit.analysis.steps.timeline import timelines
    from tracekit.analysis.tables import short_name
    from tracekit.analysis.waiting.idle import idle_causes

    out = []
    for name in [os.path.basename(SERVING), *INFERENCE]:
        path = os.path.join(SHARED, name)
        if not os.path.exists(path):
            print(f"skipped: {path} is absent (../shared/traces is not beside this checkout)")
            continue
        trace = read_trace(path)
        seg = segment(trace)
        work = analyze(trace).work  # with categories, as the timeline needs
        weights = step_weights(seg.steps)

        def run():
            idle = idle_causes(trace, seg)  # describing intervals builds per-thread indexes afresh
            for w in weights.values():
                if w.any():
                    idle.top(w, 1.0, work)
            timelines(trace, seg.steps, work, idle, short_name, seg.device_type)

        t_read = _best(lambda: read_trace(path))
        t_analyse = _best(lambda: analyze(trace))
        t_idle = _best(run)
        ratio = t_idle / (t_read + t_analyse)
        out.append({"file": name, "idle_s": t_idle, "ratio": ratio})
        print(
            f"{name[:44]:44s} read {t_read:.3f} s | analyse {t_analyse:.3f} s | idle causes, top intervals and "
            f"timelines {t_idle:.3f} s = {ratio:.1%} of read + analyse ({t_idle / t_read:.0%} of read alone)   "
            + (
                f"target < {IDLE_TARGET:.0%}{'' if ratio < IDLE_TARGET else '   MISSED'}"
                if path == SERVING
                else "(for information)"
            )
        )
    return out


STRESS_BASE = os.path.join(SHARED, "mi300x_sglang-qwen3-8b_decode-step_hipgraph.json.gz")
STRESS_TARGET = 3.0  # analysis time per event, against the read's in the same run


def stress(scale: float = 1.0, cases: list[str] | None = None, base: str = STRESS_BASE) -> list[dict]:
    """The structure-stress set (issue 23): traces grown from a real one (``growth.py``), each
    read and analysed, the analysis against the read of the same file in the same run (both
    per million events). ``scale`` shrinks the issue's sizes (1.0: steps repeated 1,000x, 100k
    alternating kernels, 10k threads, nesting 1,000 deep, 1M Python frames, 50k tiny steps)."""
    import tempfile

    import growth

    from tracekit import read_trace
    from tracekit.analysis import analyze

    if not os.path.exists(base):
        print(f"skipped: {base} is absent (../shared/traces is not beside this checkout)")
        return []
    doc = growth.load(base)
    print(
        f"structure stress, grown from {os.path.basename(base)} at scale {scale:g} of the issue's sizes; "
        f"target: analysis < {STRESS_TARGET:.0f}x read per event"
    )
    out = []
    with tempfile.TemporaryDirectory(prefix="tracekit-stress-") as tmp:
        for name in cases or list(growth.CASES):
            what = growth.CASES[name][1]
            path = growth.write(growth.grow(doc, name, scale), os.path.join(tmp, "grown.json.gz"))
            t_read = _best(lambda: read_trace(path), repeat=1)
            trace = read_trace(path)
            t_analyse = _best(lambda t=trace: analyze(t), repeat=1)
            n = max(trace.n_events, 1)
            ratio = t_analyse / t_read
            out.append({"case": name, "events": n, "read_s": t_read, "analyse_s": t_analyse, "ratio": ratio})
            print(
                f"{name:22s} {n:>10,} events | read {t_read:7.3f} s ({t_read / n * 1e6:6.2f} s/M) | analyse "
                f"{t_analyse:7.3f} s ({t_analyse / n * 1e6:6.2f} s/M) = {ratio:5.2f}x read"
                f"{'   OVER ' + format(STRESS_TARGET, '.0f') + 'x' if ratio > STRESS_TARGET else ''}   ({what})"
            )
            del trace
            os.remove(path)
    return out


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="*", help="traces to segment and attribute (default: the shared ones)")
    ap.add_argument("--stress", action="store_true", help="only the structure-stress set, at --scale")
    ap.add_argument("--quick", action="store_true", help="only the stress set, at a tenth of the issue's sizes")
    ap.add_argument("--scale", type=float, default=None, help="stress sizes against the issue's (default 1.0)")
    ap.add_argument("--case", action="append", help="one stress case by name (repeatable); default all")
    args = ap.parse_args()
    if args.stress or args.quick or args.case:
        sys.exit(
            1
            if any(
                r["ratio"] > STRESS_TARGET
                for r in stress(args.scale if args.scale is not None else (0.1 if args.quick else 1.0), args.case)
            )
            else 0
        )
    main(args.traces or [DEFAULT] + [os.path.join(SHARED, f) for f in INFERENCE])
    if not args.traces:
        serving()
        idle_and_timelines()
        model_pricing()
        stress(0.1)
