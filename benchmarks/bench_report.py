"""Report rendering time against reading time, on the largest shared trace.

    python benchmarks/bench_report.py [TRACE]    (default: ../shared/traces/v100_ddp_train_large.json.gz)

Reads the trace, then analyses it and renders the HTML report (plus JSON and Markdown
for reference). Each figure is the best of several runs after one warm-up run (imports,
Bokeh's JS bundle read from disk once). The target (report issue): analyse + render of
the HTML report takes less time than reading the trace.
"""

from __future__ import annotations

import gc
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "..", "shared", "traces", "v100_ddp_train_large.json.gz")


def _best(fn, repeat: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def main(path: str = DEFAULT, repeat: int = 3) -> dict:
    from tracekit import read_trace
    from tracekit.analysis import analyze
    from tracekit.report import render

    if not os.path.exists(path):
        print(f"skipped: {path} is absent (../shared/traces is not beside this checkout)")
        return {}
    trace = read_trace(path)  # warm-up: imports, caches
    analysis = analyze(trace)
    render(analysis, "html")

    t_read, trace = _best(lambda: read_trace(path), repeat)
    t_analyze, analysis = _best(lambda: analyze(trace), repeat)
    t_html, html = _best(lambda: render(analysis, "html"), repeat)
    t_json, _ = _best(lambda: render(analysis, "json"), repeat)
    t_md, _ = _best(lambda: render(analysis, "md"), repeat)
    out = {
        "file": os.path.basename(path),
        "read_s": round(t_read, 3),
        "analyze_s": round(t_analyze, 3),
        "render_html_s": round(t_html, 3),
        "render_json_s": round(t_json, 4),
        "render_md_s": round(t_md, 4),
        "html_kb": round(len(html.encode()) / 1024),
        "ratio": round((t_analyze + t_html) / t_read, 2),
    }
    print(f"trace              {out['file']} ({trace.n_bytes / 1e6:.1f} MB JSON, {trace.n_events:,} events)")
    print(f"read               {out['read_s']:8.3f} s")
    print(f"analyze            {out['analyze_s']:8.3f} s")
    print(f"render html        {out['render_html_s']:8.3f} s   ({out['html_kb']:,} KB)")
    print(f"render json / md   {out['render_json_s']:8.4f} s / {out['render_md_s']:.4f} s")
    print(f"(analyze + html) / read = {out['ratio']:.2f}   (target < 1)")
    return out


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else DEFAULT)
