"""View-model of the step replay (the JSON contract's ``replay`` key, and ``tracekit whatif``'s
document): the books, what would help replayed, all of it together, the critical path by kind.

``tracekit.analysis.replay`` computed every figure; here they only become display text, the same
for the report's section "What would help, replayed" (HTML, Markdown, text) and the ``whatif``
command's outputs. Trace-derived strings (kernel categories, call names, finding texts) stay
raw here: each template escapes them for its format.
"""

from __future__ import annotations

from typing import Any

from tracekit import formatting as fmt
from tracekit.report.view import phase_label

# The critical path's kinds in the order a reader meets them (``analysis.replay.critical.KINDS``),
# and what each means, for the table's heading and the page's legend.
KIND_LABELS = {
    "kernel": "kernels",
    "launch": "launches",
    "host": "host work",
    "sync": "synchronising calls",
    "queue": "queueing",
    "unexplained": "unexplained wait",
}
TOP_CATEGORIES = 4  # kernel categories named beside a phase's critical-path kernel time


def pair(fig: dict | None, unit: str = "ms") -> str:
    """``{measured, replayed}`` as "a → b"; a side that cannot be computed shows as missing."""
    if not fig:
        return fmt.MISSING
    show = fmt.ms if unit == "ms" else fmt.per_s
    a, b = fig.get("measured"), fig.get("replayed")
    if a is None and b is None:
        return fmt.MISSING
    return f"{show(a) if a is not None else fmt.MISSING} → {show(b) if b is not None else fmt.MISSING}"


def phase_figures(phase: str, fig: dict[str, Any]) -> dict[str, str]:
    """One phase's replayed figures (``Outcome.phases[phase]``) as display text."""
    latency_key, latency_label = (
        ("ttft_ms", "TTFT")
        if phase == "prefill"
        else ("tpot_p50_ms", "TPOT p50")
        if phase == "decode"
        else (None, None)
    )
    return {
        "phase": phase,
        "label": phase_label(phase),
        "steps": fmt.count(fig.get("steps")),
        "measured": fmt.ms(fig.get("measured_ms")),
        "replayed": fmt.ms(fig.get("replayed_ms")),
        "saving": fmt.ms(fig.get("saving_ms")),
        "saving_share": fmt.pct(fig["saving_ms"] / fig["measured_ms"]) if fig.get("measured_ms") else fmt.MISSING,
        "step_p50": pair(fig.get("step_p50_ms")),
        "latency_label": latency_label or "latency",
        "latency": pair(fig.get(latency_key)) if latency_key else fmt.MISSING,
        "tokens_per_s": pair(fig.get("tokens_per_s"), "tok/s"),
    }


def books_lines(books: dict[str, Any] | None) -> list[str]:
    """The replay's books in sentences: how closely the unchanged replay reproduced the steps, the
    unexplained wait it leaves named, and the latency models it ran with."""
    if not books:
        return []
    within = "within the 2% it must" if books.get("reproduced") else "above the 2% it must: its savings are less sure"
    steps = books.get("steps")  # the report's per-step rows, or the whatif document's count of them
    n = steps if isinstance(steps, int) else len(steps or [])
    lines = [
        f"Replayed unchanged, the replay reproduced each of the {fmt.count(n)} steps within "
        f"{fmt.pct(books.get('max_error'))} ({within}); unexplained wait {fmt.ms(books.get('unexplained_ms'))} "
        f"in all (at most {fmt.pct(books.get('max_unexplained_share'))} of a step), kept in every what-if."
    ]
    lat, gap = books.get("launch_latency_us") or {}, books.get("device_gap_us") or {}
    if lat or gap:
        lines.append(
            f"Latencies measured from the trace: launch to start {fmt.num(lat.get('eager'))} µs eager, "
            f"{fmt.num(lat.get('graph'))} µs graph; kernel to kernel {fmt.num(gap.get('eager'))} µs eager, "
            f"{fmt.num(gap.get('graph'))} µs graph."
        )
    if books.get("collectives_across_ranks"):
        lines.append(str(books["collectives_across_ranks"]).capitalize() + ".")
    return lines


def critical_rows(critical: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per phase: its steps' critical paths by kind (ms and share) and the kernel categories on them."""
    out = []
    for phase, row in (critical or {}).items():
        total = sum(row.get(k) or 0.0 for k in KIND_LABELS)
        kinds = [
            {
                "kind": k,
                "label": KIND_LABELS[k],
                "ms": fmt.ms(row.get(k)),
                "value": row.get(k) or 0.0,
                "share": fmt.pct((row.get(k) or 0.0) / total) if total else fmt.MISSING,
            }
            for k in KIND_LABELS
        ]
        cats = list((row.get("kernel_by_category") or {}).items())
        out.append(
            {
                "phase": phase,
                "label": phase_label(phase),
                "kinds": kinds,
                "total": fmt.ms(total),
                "categories": [{"category": c, "ms": fmt.ms(v)} for c, v in cats[:TOP_CATEGORIES]],
                "more_categories": max(len(cats) - TOP_CATEGORIES, 0),
            }
        )
    return out


def unpriced_lines(unpriced: dict[str, int] | None, model_used: bool = False) -> list[str]:
    """Kernels a speed-up could not reach (no cost known), per change: they keep their time. The
    hint to price them with a model only where none priced the run."""
    hint = "" if model_used else " (pass --model NAME to price them)"
    return [
        f"{change}: {fmt.count(n)} kernel{'s' if n != 1 else ''} of unknown cost kept their measured time{hint}"
        for change, n in (unpriced or {}).items()
        if n
    ]


def section(data: dict[str, Any]) -> dict[str, Any] | None:
    """The report's "What would help, replayed": None without a replay (no steps, a projection)."""
    r = data.get("replay")
    if not r:
        return None
    found = {(f.get("id"), f.get("phase")): f for f in data.get("findings") or []}
    helps = []
    for w in r.get("what_would_help") or []:
        f = found.get((w.get("finding"), w.get("phase"))) or {}
        fig = w.get("figures") or {}
        helps.append(
            {
                "finding": w.get("finding"),
                "action": f.get("action"),
                "whatif": list(w.get("whatif") or []),
                "saving": fmt.ms(w.get("saving_ms")),
                "sum": fmt.ms(f.get("sum_ms")),
                "figures": phase_figures(w.get("phase"), fig) if fig else None,
                "unpriced": unpriced_lines(w.get("unpriced_kernels"), bool(data.get("model"))),
            }
        )
    together = None
    t = r.get("together")
    if t:
        parts = t.get("sum_of_parts_ms") or {}
        together = {
            "whatif": list(t.get("whatif") or []),
            "phases": [
                dict(phase_figures(p, fig), sum_of_parts=fmt.ms(parts.get(p)))
                for p, fig in (t.get("phases") or {}).items()
                if p in parts
            ],
        }
    return {
        "books": books_lines(r.get("books")),
        "helps": helps,
        "together": together,
        "critical": critical_rows(r.get("critical_path")),
    }


def text_lines(data: dict[str, Any]) -> list[str]:
    """The section compactly, as plain lines for Markdown (escaped there) and the terminal."""
    s = section(data)
    if not s:
        return []
    out = []
    for h in s["helps"]:
        f = h["figures"]
        where = (
            (
                f" ({f['label'].lower()}: {f['measured']} → {f['replayed']}, step p50 {f['step_p50']}, "
                f"tokens/s {f['tokens_per_s']})"
            )
            if f
            else ""
        )
        out.append(
            f"{h['finding']}: {'; '.join(h['whatif'])}: saves {h['saving']} replayed "
            f"(the time involved summed: {h['sum']}){where}"
        )
    if s["together"]:
        for p in s["together"]["phases"]:
            out.append(
                f"all of them together, {p['label'].lower()}: saves {p['saving']} replayed, beside "
                f"{p['sum_of_parts']} for the parts added up ({p['measured']} → {p['replayed']})"
            )
    for c in s["critical"]:
        kinds = ", ".join(f"{k['label']} {k['ms']}" for k in c["kinds"] if k["value"] > 0)
        out.append(f"critical path, {c['label'].lower()} ({c['total']}): {kinds}")
    return out + s["books"]
