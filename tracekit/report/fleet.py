"""Renderers of a fleet (``tracekit batch``): CSV, Parquet, JSON and an HTML fleet page.

Each reads ``Fleet.to_dict()``: the rows and the outlier marks the batch computed. The
page is one self-contained file (HtmlPage: Bokeh inlined, a CSP that lets only its own
scripts run): a sortable table of every row (templates/fleet.js sorts it) and figures of
step time and tokens/s over the traces' recording time, outliers marked.
"""

from __future__ import annotations

import functools
import io
import math
import os
import tempfile
from typing import Any

from markupsafe import Markup

from tracekit import formatting as fmt
from tracekit.errors import TracekitError
from tracekit.report import chart_style, charts
from tracekit.report.base import JsonDocument, Registry, Renderer
from tracekit.report.render_html import HtmlPage, csp, loader_js
from tracekit.report.templating import html_env, inline_script, render

INTEGER_COLUMNS = ("files", "prefill_steps", "decode_steps", "mixed_steps", "unknown_steps", "kernels", "findings")
INSTALL_PYARROW = "writing Parquet needs pyarrow: pip install 'tracekit[batch]' (or pip install pyarrow)"

# The page's table: (column, heading, formatter). The CSV/Parquet/JSON files hold every column.
_TABLE = (
    ("name", "Trace", None),
    ("status", "Status", None),
    ("recorded_at", "Recorded (UTC)", None),
    ("device", "Device", None),
    ("model", "Model", None),
    ("run_kind", "Run", None),
    ("prefill_steps", "Prefill steps", fmt.count),
    ("decode_steps", "Decode steps", fmt.count),
    ("prefill_step_p50_ms", "Prefill step p50", fmt.ms),
    ("prefill_step_p90_ms", "p90", fmt.ms),
    ("decode_step_p50_ms", "Decode step p50", fmt.ms),
    ("decode_step_p90_ms", "p90", fmt.ms),
    ("prefill_tokens_per_s", "Prefill tok/s", lambda v: fmt.num(v)),
    ("decode_tokens_per_s", "Decode tok/s", lambda v: fmt.num(v)),
    ("prefill_mfu", "Prefill MFU", fmt.pct),
    ("decode_mbu", "Decode MBU", fmt.pct),
    ("decode_idle_share", "Decode idle", fmt.pct),
    ("idle_top_cause", "Top idle cause", None),
    ("kernel_ms", "Kernel time", fmt.ms),
    ("top_finding", "Top finding / error", None),
)
# Figures over recording time: (title, y label, [(column, legend)]).
_FIGURES = (
    (
        "Step time over recording time (p50 per trace)",
        "ms (log)",
        [("prefill_step_p50_ms", "prefill step"), ("decode_step_p50_ms", "decode step")],
    ),
    (
        "Tokens/s over recording time",
        "tokens/s (log)",
        [("prefill_tokens_per_s", "prefill"), ("decode_tokens_per_s", "decode")],
    ),
)
_COLORS = ("#2f6db5", "#e07b1f")


def view_model(data: dict[str, Any]) -> dict[str, Any]:
    rows = data["rows"]
    head = [{"key": k, "label": label, "numeric": f is not None} for k, label, f in _TABLE]
    body = []
    for r in rows:
        marked = set((r.get("outliers") or "").split(",")) - {""}
        cells = []
        for k, _, f in _TABLE:
            v = r.get(k)
            if k == "top_finding" and r.get("status") not in (None, "ok"):  # error or timeout: why
                v = r.get("error")
            text = fmt.MISSING if v is None else (f(v) if f else str(v))
            sort = "" if v is None else (repr(float(v)) if f else str(v))
            cells.append(
                {
                    "text": text,
                    "sort": sort,
                    "numeric": f is not None,
                    "outlier": k in marked,
                    "title": r.get("file") if k == "name" else (r.get("note") if k == "status" else None),
                }
            )
        body.append({"cells": cells, "error": r.get("status") != "ok", "outlier": bool(marked)})
    return {
        "title": f"{data['traces']} trace{'s' if data['traces'] != 1 else ''}",
        "traces": data["traces"],
        "errors": data["errors"] + (data.get("timeouts") or 0),
        "executor": data.get("executor"),
        "seconds": data.get("seconds"),
        "outlier_rule": data.get("outlier_rule"),
        "outliers": sum(bool(r.get("outliers")) for r in rows),
        "head": head,
        "rows": body,
        "tracekit_version": data.get("tracekit_version"),
    }


def figures(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One chart per ``_FIGURES`` entry: ``{"id", "item", "note"}`` or ``{"reason"}``."""
    import datetime as dt

    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.plotting import figure

    out: list[dict[str, Any]] = []
    rows = [r for r in data["rows"] if r.get("status") == "ok"]
    for i, (title, ylabel, series) in enumerate(_FIGURES):
        chart_id = f"tk-fleet-{i}"
        undated = 0
        p = figure(
            title=title,
            x_axis_type="datetime",
            y_axis_type="log",
            height=300,
            sizing_mode="stretch_width",
            tools="pan,wheel_zoom,box_zoom,reset,save",
        )
        drawn = 0
        for j, (col, legend) in enumerate(series):
            pts = [r for r in rows if _positive(r.get(col))]
            dated = [r for r in pts if r.get("recorded_at")]
            undated += len(pts) - len(dated)
            if not dated:
                continue
            src = ColumnDataSource(
                {
                    "x": [dt.datetime.strptime(r["recorded_at"], "%Y-%m-%dT%H:%M:%SZ") for r in dated],
                    "y": [float(r[col]) for r in dated],
                    "name": [str(r["name"]) for r in dated],
                    "device": [str(r.get("device") or "") for r in dated],
                    "outlier": ["outlier" if col in (r.get("outliers") or "").split(",") else "" for r in dated],
                }
            )
            p.scatter("x", "y", source=src, size=8, color=_COLORS[j], alpha=0.8, legend_label=legend)
            mark = [k for k, r in enumerate(dated) if col in (r.get("outliers") or "").split(",")]
            if mark:
                p.scatter(
                    [src.data["x"][k] for k in mark],
                    [src.data["y"][k] for k in mark],
                    size=18,
                    marker="circle",
                    fill_color=None,
                    line_color="#c62828",
                    line_width=2,
                    legend_label="outlier",
                )
            drawn += len(dated)
        if not drawn:
            out.append({"reason": "no analysed trace has both a recording time and these figures"})
            continue
        p.add_tools(
            HoverTool(
                tooltips=[("trace", "@name"), ("device", "@device"), ("value", "@y{0,0.[000]}"), ("", "@outlier")],
                formatters={},
            )
        )
        p.yaxis.axis_label = ylabel
        p.xaxis.axis_label = "recorded (UTC)"
        p.legend.click_policy = "hide"
        chart_style.style(p)
        chart_style.legend_outside(p)
        note = (
            f"{undated} point(s) are not drawn: their traces carry no wall-clock recording time." if undated else None
        )
        out.append({"id": chart_id, **chart_style.chart_item(p, chart_id), "note": note})
    return out


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and v > 0 and math.isfinite(v)


FLEETS = Registry("batch output")


@FLEETS.register
class FleetHtml(HtmlPage):
    description = "a self-contained HTML fleet page: sortable table, figures over recording time"
    template = "fleet.html.j2"

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        vm = view_model(data)
        figs = figures(data)
        vm["figures"] = [{"id": f.get("id"), "reason": f.get("reason"), "note": f.get("note")} for f in figs]
        vm["chart_items"] = [f["item"] for f in figs if "item" in f]
        return vm

    def render_data(self, data: dict[str, Any]) -> str:
        # HtmlPage's page plus the table-sorting script, hashed into the same CSP.
        vm = self.view_model(data)
        js = charts.inline_bokeh_js() if self.include_js and vm.get("chart_items") else None
        loader, sort = loader_js(), _sort_js()
        return render(
            html_env(),
            self.template,
            vm=vm,
            bokeh_js=Markup(js) if js else None,
            loader_js=Markup(loader),
            sort_js=Markup(sort),
            csp=csp([js, loader, sort]),
        )


@FLEETS.register
class FleetJson(JsonDocument):
    description = "the fleet as JSON: Fleet.to_dict() (rows, columns, outlier rule)"


@FLEETS.register
class FleetCsv(Renderer):
    name, extension = "csv", ".csv"
    description = "one row per trace, every column"

    def render_data(self, data: dict[str, Any]) -> str:
        buf = io.StringIO()
        _frame(data).to_csv(buf, index=False)
        return buf.getvalue()


@FLEETS.register
class FleetParquet(Renderer):
    name, extension = "parquet", ".parquet"
    description = "one row per trace, every column (needs pyarrow)"

    def render_bytes(self, data: dict[str, Any]) -> bytes:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise TracekitError(INSTALL_PYARROW) from None
        buf = io.BytesIO()
        _frame(data).to_parquet(buf, index=False, engine="pyarrow")
        return buf.getvalue()


def _frame(data: dict[str, Any]):
    import pandas as pd

    frame = pd.DataFrame(data["rows"], columns=data["columns"])
    # Counts stay integers beside the blanks of error rows (nullable Int64, not float).
    ints = [c for c in data["columns"] if c in INTEGER_COLUMNS]
    return frame.astype({c: "Int64" for c in ints})


@functools.lru_cache(maxsize=1)
def _sort_js() -> str:
    return inline_script("fleet.js")


def check_parquet(fmt_name: str) -> None:
    """Refuse Parquet before the slow work when pyarrow is absent."""
    if fmt_name == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise TracekitError(INSTALL_PYARROW) from None


def write_fleet(data: dict[str, Any], renderer: Renderer, path: str | None, *, make_parent: bool = False) -> int:
    """Write the fleet in ``renderer``'s format to ``path`` (None: stdout) atomically; the size."""
    import sys

    from tracekit.report.output import is_stream, write_atomic

    if not isinstance(renderer, FleetParquet):  # the one binary format
        text = renderer.render_data(data)
        if path is None:
            sys.stdout.write(text)
            return len(text)
        return write_atomic(path, text, make_parent=make_parent)
    blob = renderer.render_bytes(data)
    if path is None:
        sys.stdout.buffer.write(blob)
        return len(blob)
    if is_stream(path):
        with open(path, "wb") as f:
            f.write(blob)
        return len(blob)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        if make_parent:
            os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tracekit-", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except OSError as e:
        raise TracekitError(f"cannot write {path}: {e.strerror or e}") from None
    return len(blob)


choose = FLEETS.choose
get_renderer = FLEETS.get
