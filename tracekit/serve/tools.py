"""The MCP tools as plain functions: each takes a trace path (and the options that change the
figures) and returns a small dict of figures, testable without the MCP SDK.

Every figure is read from what the analysis already computed (the report's JSON document,
``Comparison``, ``Projection``); the tools only choose and trim. An agent's context is
precious, so the answers are selections, not the whole document: tables come as ``columns`` plus
``rows``, every list is cut at ``limit`` with its ``total`` stated, and floats are rounded to
what a reader can use. Expected failures raise ``TracekitError`` with one sentence.
"""

from __future__ import annotations

import math
from typing import Any

from tracekit.errors import TracekitError
from tracekit.serve.cache import AnalysisCache, Entry, identity

MAX_LIMIT = 500  # rows one answer may hold, whatever ``limit`` asks
NAME_WIDTH = 160  # characters of a full kernel name kept (C++ template names run to thousands)

# The headline figures `summary` lists, as (name in the answer, key path in the JSON document).
HEADLINE = (
    ("ttft_ms", ("metrics", "ttft_ms")),
    ("tpot_ms_p50", ("metrics", "tpot_ms", "p50")),
    ("tpot_ms_p90", ("metrics", "tpot_ms", "p90")),
    ("prefill_step_ms_p50", ("metrics", "prefill_step_ms", "p50")),
    ("decode_step_ms_p50", ("metrics", "decode_step_ms", "p50")),
    ("decode_step_ms_p90", ("metrics", "decode_step_ms", "p90")),
    ("prefill_tokens_per_s", ("metrics", "prefill_tokens_per_s")),
    ("decode_tokens_per_s", ("metrics", "decode_tokens_per_s")),
    ("prefill_mfu", ("metrics", "prefill_mfu")),
    ("decode_mbu", ("metrics", "decode_mbu")),
    ("launch_overhead_share_of_decode", ("metrics", "launch_overhead_share_of_decode")),
)
# Where `provenance.reasons` says why a headline figure is null, when its key differs.
_REASON_KEY = {"tpot_ms_p50": "tpot_ms", "tpot_ms_p90": "tpot_ms"}

STEP_COLUMNS = (
    "index",
    "phase",
    "duration_ms",
    "gpu_busy_ms",
    "gpu_idle_ms",
    "idle_by_cause",
    "kernels",
    "tokens",
    "batch",
    "graph_replay",
    "mbu",
    "label",
)
KERNEL_COLUMNS = (
    "name",
    "category",
    "calls",
    "total_ms",
    "mean_us",
    "share",
    "bound",
    "limiter",
    "roof_fraction",
    "achieved_tflops",
    "achieved_gbps",
    "cost_source",
)
IDLE_COLUMNS = ("cause", "ms", "share", "count", "call", "op", "stack")
MOVER_COLUMNS = (
    "category",
    "op",
    "status",
    "before_ms",
    "after_ms",
    "delta_ms",
    "speedup",
    "before_kernel",
    "after_kernel",
)

# The idle cause each idle finding is about (tracekit/analysis/findings/advice.py).
_IDLE_FINDINGS = {"host-sync": "sync", "launch-bound": "launch", "host-bound": "host", "gpu-waits": "wait"}


class Tools:
    """The eight tools over one cache of analyses."""

    def __init__(self, cache: AnalysisCache):
        self.cache = cache

    # --- one trace ---------------------------------------------------------------------

    def summary(
        self, path: str, model: str | None = None, gpu: str | None = None, tp: int | None = None, limit: int = 10
    ) -> dict[str, Any]:
        _limit(limit)
        e = self.cache.get(path, model=model, gpu=gpu, tp=tp)
        d = e.doc
        reasons = d["provenance"].get("reasons") or {}
        headline, why_null = {}, {}
        for name, keys in HEADLINE:
            value = _dig(d, keys)
            if value is not None:
                headline[name] = value
            elif _REASON_KEY.get(name, name) in reasons:
                why_null[_REASON_KEY.get(name, name)] = reasons[_REASON_KEY.get(name, name)]
        steps = d["steps"]
        by_phase: dict[str, int] = {}
        for s in steps:
            by_phase[s["phase"]] = by_phase.get(s["phase"], 0) + 1
        out = {
            "trace": d["source"]["name"],
            "device": _device(d),
            "run_kind": d["run_kind"],
            "phase_source": d["provenance"]["phase_source"],
            "latency_semantics": d["metrics"].get("latency_semantics"),
            "model": (d.get("model") or {}).get("name"),
            "steps": {"total": len(steps), "by_phase": by_phase},
            "headline": headline,
            "null_because": why_null,
            "phases": {p: _phase_brief(v) for p, v in d["phases"].items()},
            "findings": _findings(d, limit),
        }
        if d.get("truncated"):
            out["truncated"] = d["truncated"].get("text")
        out["next"] = (
            "steps(start, stop) per step; kernels(phase, category, name); idle(phase) for what the GPU "
            "waits on; explain(finding=INDEX) for a finding's evidence"
        )
        return _round(out)

    def steps(
        self,
        path: str,
        start: int = 0,
        stop: int | None = None,
        phase: str | None = None,
        limit: int = 50,
        model: str | None = None,
        gpu: str | None = None,
        tp: int | None = None,
    ) -> dict[str, Any]:
        n = _limit(limit)
        e = self.cache.get(path, model=model, gpu=gpu, tp=tp)
        steps = e.doc["steps"]
        phases = sorted({s["phase"] for s in steps})
        if phase is not None and phase not in phases:
            raise TracekitError(f"phase {phase!r} has no steps in this trace (its steps are {_words(phases)})")
        chosen = [
            s
            for s in steps
            if s["index"] >= start and (stop is None or s["index"] < stop) and (phase is None or s["phase"] == phase)
        ]
        rows = [[_step_cell(s, c) for c in STEP_COLUMNS] for s in chosen[:n]]
        return _round(
            {
                "total": len(steps),
                "matched": len(chosen),
                "returned": len(rows),
                "range": [start, stop],
                "phase": phase,
                "columns": list(STEP_COLUMNS),
                "rows": rows,
                "units": "ms; idle_by_cause: ms of the step's GPU idle per cause, summing to gpu_idle_ms",
            }
        )

    def kernels(
        self,
        path: str,
        phase: str | None = None,
        category: str | None = None,
        name: str | None = None,
        limit: int = 10,
        full_names: bool = False,
        model: str | None = None,
        gpu: str | None = None,
        tp: int | None = None,
    ) -> dict[str, Any]:
        n = _limit(limit)
        e = self.cache.get(path, model=model, gpu=gpu, tp=tp)
        d = e.doc
        if phase is not None and phase not in d["phases"]:
            raise TracekitError(
                f"phase {phase!r} is not in this trace (its phases are {_words(d['phases'])}; "
                "leave phase out for the whole trace)"
            )
        rows, note = _kernel_rows(e, phase)
        scope = d["phases"][phase] if phase else d["overall"]
        categories = sorted({r["category"] for r in rows})
        if category is not None and category not in categories:
            raise TracekitError(f"category {category!r} has no kernels here (the categories are {_words(categories)})")
        needle = (name or "").lower()
        chosen = [
            r
            for r in rows
            if (category is None or r["category"] == category)
            and (not needle or needle in r["name"].lower() or needle in r["short_name"].lower())
        ]
        columns = list(KERNEL_COLUMNS) + (["full_name"] if full_names else [])
        table = [[_kernel_cell(r, c) for c in columns] for r in chosen[:n]]
        out = {
            "phase": phase or "all (the whole trace)",
            "filters": {k: v for k, v in (("category", category), ("name", name)) if v is not None},
            "kernel_ms": scope.get("kernel_ms"),
            "total_names": len(rows),
            "matched": len(chosen),
            "matched_ms": sum(r["total_ms"] for r in chosen),
            "returned": len(table),
            "by_category_ms": scope.get("by_category"),
            "columns": columns,
            "rows": table,
            "units": "total_ms, mean_us; share of the scope's kernel time; roof_fraction of the roofline bound",
        }
        if note:
            out["note"] = note
        return _round(out)

    def idle(
        self,
        path: str,
        phase: str | None = None,
        limit: int = 10,
        model: str | None = None,
        gpu: str | None = None,
        tp: int | None = None,
    ) -> dict[str, Any]:
        n = _limit(limit)
        e = self.cache.get(path, model=model, gpu=gpu, tp=tp)
        d = e.doc
        if phase is not None and phase not in d["phases"]:
            raise TracekitError(f"phase {phase!r} is not in this trace (its phases are {_words(d['phases'])})")
        out: dict[str, Any] = {"phases": {}}
        for p, v in d["phases"].items():
            if phase is not None and p != phase:
                continue
            top = v.get("idle_top") or []
            out["phases"][p] = {
                "time_ms": v["time_ms"],
                "gpu_idle_ms": v["gpu_idle_ms"],
                "idle_share": v["idle_share"],
                "by_cause_ms": {c: ms for c, ms in (v.get("idle_by_cause") or {}).items() if ms},
                "top": {
                    "total": len(top),
                    "returned": min(n, len(top)),
                    "columns": list(IDLE_COLUMNS),
                    "rows": [[r.get(c) for c in IDLE_COLUMNS] for r in top[:n]],
                },
            }
        m = d["metrics"]
        if m.get("launch_overhead_ms_per_decode_step") is not None:
            out["launch_overhead_ms_per_decode_step"] = m["launch_overhead_ms_per_decode_step"]
        out["findings"] = [
            {"index": i, "id": f["id"], "phase": f["phase"], "at_stake_ms": f["at_stake_ms"]}
            for i, f in enumerate(d["findings"])
            if f["id"] in _IDLE_FINDINGS and (phase is None or f["phase"] == phase)
        ]
        out["causes"] = (
            "sync: a host call waited for the GPU; launch: the next kernel's launch had not reached "
            "the GPU; host: host work between launches; wait: the stream waited on another stream or "
            "event; call/op/stack: the runtime call, its op and the innermost Python frames"
        )
        return _round(out)

    def explain(
        self,
        path: str,
        finding: int | str,
        phase: str | None = None,
        model: str | None = None,
        gpu: str | None = None,
        tp: int | None = None,
    ) -> dict[str, Any]:
        e = self.cache.get(path, model=model, gpu=gpu, tp=tp)
        d = e.doc
        found = d["findings"]
        if not found:
            raise TracekitError("this trace has no findings")
        index = _find(found, str(finding).strip(), phase)
        f = found[index]
        out: dict[str, Any] = {"finding": {"index": index, **f}}
        threshold = (d["provenance"].get("finding_thresholds") or {}).get(f["id"])
        if threshold:
            out["fires_when"] = threshold
        out["evidence"] = _evidence(e, f)
        others = [i for i, g in enumerate(found) if i != index and g["phase"] == f["phase"]]
        if others:
            out["related"] = [{"index": i, "id": found[i]["id"]} for i in others]
        return _round(out)

    def whatif(
        self,
        path: str,
        remove: str | None = None,
        speed: str | None = None,
        host_floor_us: float | None = None,
        model: str | None = None,
        gpu: str | None = None,
        tp: int | None = None,
    ) -> dict[str, Any]:
        """Causes removed or kernels sped up, replayed together on the steps' own dependencies
        (``tracekit whatif``'s document, trimmed of the critical path's category detail)."""
        from tracekit.analysis.replay.changes import parse
        from tracekit.report.whatif import whatif

        changes = parse(remove, speed, host_floor_us)  # bad words fail before the slow read
        e = self.cache.get(path, model=model, gpu=gpu, tp=tp)
        if e.analysis.replayer is None:
            raise TracekitError(
                "this trace has no steps to replay"
                if e.trace is not None
                else "whatif needs one trace or a folder of ranks, not the windows of a split"
            )
        doc = e.once(("whatif", remove, speed, host_floor_us), lambda: whatif(e.analysis, changes).to_dict())
        books = doc["books"]
        return _round(
            {
                "trace": doc["source"]["name"],
                "changes": doc["changes"],
                "phases": doc["phases"],
                "unpriced_kernels": doc["unpriced_kernels"],
                "books": {
                    k: books.get(k) for k in ("max_error", "reproduced", "unexplained_ms", "max_unexplained_share")
                },
                "critical_path_ms": {
                    p: {k: v for k, v in row.items() if k != "kernel_by_category"}
                    for p, row in doc["critical_path"].items()
                },
                "basis": "replayed together on each step's dependencies, never added up; saving_ms = "
                "measured_ms - replayed_ms over the phase's steps",
            }
        )

    # --- two traces, or one onto another GPU ------------------------------------------------

    def compare(
        self,
        before: str,
        after: str,
        model: str | None = None,
        gpu_before: str | None = None,
        gpu_after: str | None = None,
        tp: int | None = None,
        limit: int = 5,
    ) -> dict[str, Any]:
        from tracekit.compare.comparison import compare

        n = _limit(limit)
        b = self.cache.get(before, model=model, gpu=gpu_before, tp=tp, what="before")
        a = self.cache.get(after, model=model, gpu=gpu_after, tp=tp, what="after")
        # Kept on the after-run's entry: the pair is compared once while both stay unchanged.
        c = a.once(("compare", b.key), lambda: compare(b.analysis, a.analysis).to_dict())
        headline = [
            {k: h.get(k) for k in ("key", "unit", "before", "after", "delta", "relative", "verdict")}
            for h in c["headline"]
            if h.get("before") is not None or h.get("after") is not None
        ]
        phases = {}
        for p, v in c["phases"].items():
            moves = (c["kernels"].get(p) or {}).get("movers") or []
            phases[p] = {
                "steps": v.get("steps"),
                "basis": v.get("basis"),
                "time_ms": v.get("time_ms"),
                "explanation": (v.get("explanation") or [])[:n],
                "movers": {
                    "total": len(moves),
                    "basis": (c["kernels"].get(p) or {}).get("basis"),
                    "columns": list(MOVER_COLUMNS),
                    "rows": [[m.get(k) for k in MOVER_COLUMNS] for m in moves[:n]],
                },
            }
        return _round(
            {
                "before": b.doc["source"]["name"],
                "after": a.doc["source"]["name"],
                "context": [{k: x.get(k) for k in ("label", "before", "after", "note")} for x in c["context"]],
                "headline": headline,
                "phases": phases,
                "summary": c["summary"],
                "suggested_gate": c.get("suggested_gate"),
            }
        )

    def project(
        self,
        path: str,
        to: str,
        model: str | None = None,
        gpu: str | None = None,
        tp: int | None = None,
        limit: int = 5,
    ) -> dict[str, Any]:
        import os

        from tracekit.specs import load_spec_file
        from tracekit.specs.lookup import spec_by_name
        from tracekit.whatif.project import project_parts

        n = _limit(limit)
        e = self.cache.get(path, model=model, gpu=gpu, tp=tp)
        if e.trace is None:
            raise TracekitError(
                "project needs one trace or a folder of ranks, not the windows of a split: project the original trace"
            )
        # A GPU name, or a spec file (confined like every path).
        key: tuple[object, ...]
        if os.path.isfile(os.path.join(self.cache.confinement.base, os.path.expanduser(to))):
            real = self.cache.confinement.resolve(to, "to")
            target, key = load_spec_file(real), ("file", real, identity(real))
        else:
            target = spec_by_name(to, option="to")  # the tool's argument, as the caller named it
            key = ("name", target.key)
        p = e.once(("project", key), lambda: project_parts(e.trace, e.parts, e.match, e.analysis, target).to_dict())
        keep = (
            "measured_gpu_busy_ms",
            "projected_gpu_busy_ms",
            "projected_gpu_busy_ms_range",
            "measured_step_ms",
            "projected_step_ms",
            "measured_tokens_per_s",
            "projected_tokens_per_s",
            "projected_range",
            "unknown_share",
        )
        return _round(
            {
                "trace": e.doc["source"]["name"],
                "measured_on": p["source"].get("device"),
                "target": {"spec": p["target"]["spec"], "key": p["target"]["spec_key"]},
                "headline": p["headline"],
                "phases": {ph: {k: v.get(k) for k in keep} for ph, v in p["phases"].items()},
                "notes": {"total": len(p["notes"]), "items": p["notes"][:n]},
                "basis": "central estimate with [low, high] ranges from how each kind of kernel reaches its "
                "roof on each GPU class",
            }
        )


# --- choosing and trimming ---------------------------------------------------------------


def _kernel_rows(e: Entry, phase: str | None) -> tuple[list[dict[str, Any]], str | None]:
    """Every kernel name of the phase (the whole trace for None), by total time: the report's
    ``top_kernels`` rows, uncut, computed once per analysis."""
    if e.parts is None:  # merged windows of a split: only the report's tables survive the merge
        rows = e.doc["top_kernels"].get(phase, []) if phase else e.doc["overall"].get("top_kernels", [])
        return rows, "a split's merged windows: the report's top kernels only"

    def make():
        from tracekit.analysis.tables import kernel_table, phase_work

        work = e.analysis.work
        return kernel_table(phase_work(work, phase) if phase else work)

    return e.once(("kernels", phase), make), None


def _kernel_cell(r: dict[str, Any], c: str) -> Any:
    if c == "name":
        return r["short_name"]
    if c == "full_name":
        return r["name"] if len(r["name"]) <= NAME_WIDTH else r["name"][: NAME_WIDTH - 1] + "…"
    return r.get(c)


def _step_cell(s: dict[str, Any], c: str) -> Any:
    if c == "idle_by_cause":
        return {k: v for k, v in (s.get(c) or {}).items() if v}
    if c == "label" and isinstance(s.get(c), str) and len(s[c]) > NAME_WIDTH:
        return s[c][: NAME_WIDTH - 1] + "…"  # a label is the trace's text: any length
    return s.get(c)


def _device(d: dict[str, Any]) -> dict[str, Any]:
    dev = d["device"]
    out = {"name": dev.get("name"), "spec": dev.get("spec"), "peak_basis": dev.get("peak_basis")}
    if dev.get("spec") is None and dev.get("reason"):
        out["reason"] = dev["reason"]
    return out


def _phase_brief(v: dict[str, Any]) -> dict[str, Any]:
    cats = sorted((v.get("by_category_share") or {}).items(), key=lambda kv: -(kv[1] or 0))[:3]
    causes = sorted((v.get("idle_by_cause") or {}).items(), key=lambda kv: -(kv[1] or 0))
    return {
        "steps": v.get("steps"),
        "time_ms": v.get("time_ms"),
        "gpu_busy_ms": v.get("gpu_busy_ms"),
        "gpu_idle_ms": v.get("gpu_idle_ms"),
        "idle_share": v.get("idle_share"),
        "largest_idle_cause": list(causes[0]) if causes and causes[0][1] else None,
        "kernels": v.get("kernels"),
        "mfu": v.get("mfu"),
        "mbu": v.get("mbu"),
        "by_bound_share": {k: s for k, s in (v.get("by_bound_share") or {}).items() if s},
        "top_categories": {k: s for k, s in cats},
    }


def _findings(d: dict[str, Any], limit: int) -> dict[str, Any]:
    found = d["findings"]
    n = _limit(limit)
    return {
        "total": len(found),
        "returned": min(n, len(found)),
        "items": [
            {
                "index": i,
                "id": f["id"],
                "severity": f["severity"],
                "phase": f["phase"],
                "at_stake_ms": f["at_stake_ms"],
                "text": f["text"],
            }
            for i, f in enumerate(found[:n])
        ],
    }


def _find(found: list[dict[str, Any]], key: str, phase: str | None) -> int:
    if key.lstrip("-").isdigit():
        i = int(key)
        if not 0 <= i < len(found):
            raise TracekitError(f"finding {i} does not exist: this trace has {len(found)} (0 to {len(found) - 1})")
        return i
    hits = [i for i, f in enumerate(found) if f["id"] == key and (phase is None or f["phase"] == phase)]
    if not hits:
        ids = sorted({f["id"] for f in found})
        raise TracekitError(f"no finding {key!r}{f' in {phase}' if phase else ''}: this trace's are {_words(ids)}")
    return hits[0]


def _evidence(e: Entry, f: dict[str, Any]) -> dict[str, Any]:
    """The figures a finding rests on, as the report shows them: its phase's breakdown, and what
    its rule reads (the idle intervals of its cause, the kernels or categories it names)."""
    d = e.doc
    ev: dict[str, Any] = {}
    p = d["phases"].get(f["phase"]) if f["phase"] else None
    if p is not None:
        ev["phase"] = {
            **_phase_brief(p),
            "idle_by_cause_ms": {c: ms for c, ms in (p.get("idle_by_cause") or {}).items() if ms},
            "by_category_ms": p.get("by_category"),
            "unknown_cost_share": p.get("unknown_cost_share"),
            "cost_source_ms": p.get("cost_source_ms"),
            "mfu_basis": p.get("mfu_basis"),
            "mbu_basis": p.get("mbu_basis"),
        }
        reasons = {k: v for k, v in (d["provenance"].get("reasons") or {}).items() if k.startswith(f["phase"])}
        if reasons:
            ev["null_because"] = reasons
    fid = f["id"]
    if fid in _IDLE_FINDINGS and p is not None:
        cause = _IDLE_FINDINGS[fid]
        rows = [r for r in p.get("idle_top") or [] if r.get("cause") == cause]
        ev["idle_intervals"] = {
            "cause": cause,
            "columns": list(IDLE_COLUMNS),
            "rows": [[r.get(c) for c in IDLE_COLUMNS] for r in rows[:5]],
        }
    if f["phase"] in d["top_kernels"] and fid not in _IDLE_FINDINGS:
        top = d["top_kernels"][f["phase"]][:5]
        ev["top_kernels"] = {
            "columns": list(KERNEL_COLUMNS),
            "rows": [[_kernel_cell(r, c) for c in KERNEL_COLUMNS] for r in top],
        }
    if fid in ("unknown-cost", "cost-sources", "graph-replay", "phase-bound"):
        prov = d["provenance"]
        ev["lacks"] = prov.get("lacks")
        ev["unknown_bound_ms_by_reason"] = prov.get("unknown_bound_ms_by_reason")
    if fid == "graph-replay":
        ev["graph_replay_steps"] = sum(1 for s in d["steps"] if s.get("graph_replay"))
    if fid == "tpot-growth":
        m = d["metrics"]
        ev["tpot"] = {k: m.get(k) for k in ("tpot_slope_ms_per_step", "tpot_growth", "tpot_ms", "decode_step_ms")}
    if fid == "outside-steps":
        ev["outside_steps"] = d["provenance"].get("outside_steps")
    if fid.startswith("model") or fid.startswith("experts") or fid in ("cost-sources", "fp8-weights"):
        model = d.get("model") or {}
        ev["model"] = {
            k: model.get(k)
            for k in ("name", "summary", "tp", "precision", "layer_check", "estimates")
            if model.get(k) is not None
        }
    if fid in ("peak-fallback", "ceilings-implausible"):
        ev["device"] = {k: d["device"].get(k) for k in ("name", "spec", "peak_basis", "achievable_bandwidth_basis")}
        if d["provenance"].get("ceilings"):
            ev["ceilings"] = d["provenance"]["ceilings"]
    if d.get("rank_summary") and (fid.startswith("rank") or f["phase"] is None):
        ev["ranks"] = d["rank_summary"]
    return ev


def _dig(d: dict[str, Any], keys: tuple[str, ...]) -> Any:
    value: Any = d
    for k in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(k)
    return value


def _limit(limit: Any) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise TracekitError(f"limit {limit!r} is not a whole number of rows (0 or more)")
    return min(limit, MAX_LIMIT)


def _words(items) -> str:
    items = list(items)
    return ", ".join(map(str, items)) if items else "none"


def _round(x: Any) -> Any:
    """Floats cut to what a reader uses: three decimals from 1 to a million (a step's start at
    123456.789 ms keeps its microsecond), else 5 significant digits (shares, rates, bytes)."""
    if isinstance(x, float):
        if not math.isfinite(x):
            return None
        return round(x, 3) if 1 <= abs(x) < 1e6 else float(f"{x:.5g}")
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_round(v) for v in x]
    return x
