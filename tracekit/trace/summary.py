"""A plain-text account of what the reader found in a trace (``tracekit summary``)."""

from __future__ import annotations

from tracekit.trace.model import Trace


def summarize(trace: Trace, top: int = 10, effects: dict[str, str] | None = None) -> str:
    """``effects``: {lack key: what the gap takes away from the analysis}, said after the gap
    (``report.quality_view.priced_instead``: what the model priced though shapes could not)."""
    k = trace.kernels
    lines = [f"trace      {trace.path}"]
    cut = trace.metadata.get("truncated")
    if cut:
        # First, before any figure: everything below covers only what survived the cut.
        lines.append(f"truncated  {_cut_text(cut)}")
    if cut and cut.get("gpu_events_lost"):
        name = trace.device_name()
        what = "its GPU events" if cut.get("gpu_evidence") else "any GPU event"
        lines.append(
            f"device     unknown (the trace was cut before {what}{'; deviceProperties name ' + name if name else ''})"
        )
    elif trace.has_gpu:
        name = trace.device_name() or "unknown"
        others = len(trace.devices) - 1
        more = (
            f" (the trace lists {others} other device{'s' if others != 1 else ''} it ran no kernels on)"
            if others > 0
            else ""
        )
        lines.append(f"device     {name}{more}")
    else:
        cpu = ((trace.sidecar or {}).get("device") or {}).get("name")
        lines.append(f"device     CPU only (no GPU events){': ' + cpu if cpu else ''}")
    rank = _rank_text(trace.distributed or {})
    if rank:
        lines.append(f"rank       {rank}")
    span_ms = (trace.end_ns - trace.start_ns) / 1e6
    lines.append(f"schema     {trace.era}")
    lines.append(f"time span  {span_ms:,.3f} ms")
    kinds = k["kind"].value_counts() if len(k) else {}
    lines.append(
        "events     "
        f"{kinds.get('kernel', 0):,} kernels, {kinds.get('memcpy', 0):,} memcpy, {kinds.get('memset', 0):,} memset, "
        f"{len(trace.cpu_ops):,} cpu ops, {len(trace.runtime):,} runtime calls, "
        f"{len(trace.annotations):,} annotations, {len(trace.python):,} python functions"
    )
    if len(k):
        kern = k[k["kind"] == "kernel"]
        lines.append(
            f"links      {int((kern['launch'] >= 0).sum()):,} kernels linked to a launch, "
            f"{int((kern['op'] >= 0).sum()):,} to an op, {int(kern['graph'].sum()):,} replayed from a graph"
        )
        busy = kern.groupby("name", observed=True)["dur_ns"].agg(["sum", "count"]).sort_values("sum", ascending=False)
        total = busy["sum"].sum()
        lines.append("")
        lines.append(f"top {min(top, len(busy))} kernels by GPU time")
        for kname, row in busy.head(top).iterrows():
            share = row["sum"] / total if total else 0.0
            lines.append(f"  {row['sum'] / 1e6:10.3f} ms {share:6.1%} {int(row['count']):7,}x  {_short(str(kname))}")
    if trace.lacks:
        lines.append("")
        lines.append("the trace lacks")
        for key, why in trace.lacks.items():
            effect = (effects or {}).get(key)
            lines.append(f"  - {why}" + (f"; so {effect}" if effect else ""))
    return "\n".join(lines)


def _rank_text(dist: dict) -> str | None:
    """The rank line: "3 of 8", "3 (world size not stated)", "unknown (world size 8)", or None when distributedInfo
    states neither as a whole number (an engine that writes "rank": "" states nothing)."""
    rank, world = (
        v if isinstance(v, int) and not isinstance(v, bool) else None
        for v in (dist.get("rank"), dist.get("world_size"))
    )
    if rank is None and world is None:
        return None
    if world is None:
        return f"{rank} (world size not stated)"
    return f"unknown (world size {world})" if rank is None else f"{rank} of {world}"


def _cut_text(cut: dict) -> str:
    """The cut in one line: what survived, and how much of the decompressed text that is."""
    n = f"{cut.get('events_recovered', 0):,} complete events"
    if cut.get("bytes_parsed") == cut.get("bytes_read") and not cut.get("gpu_events_lost"):
        return f"the {str(cut.get('how', '')).split()[0]} stream ends before its end marker; the JSON is complete ({n})"
    share = cut.get("recovered_share")
    pct = "?" if share is None else (">99.9" if 0.9995 <= share < 1 else f"{share * 100:.1f}")
    return (
        f"the file was cut mid-write ({cut.get('how')}): {n} recovered, {pct}% of the decompressed text it holds "
        "(bytes up to the last complete event; the original length is unknown); figures cover only that part"
    )


def _short(name: str, width: int = 90) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."
