"""The CI gates of ``tracekit compare --fail-if``: ``parse_gate("tpot_p50>+5%")`` gives a ``Gate``,
whose ``evaluate(comparison)`` is its verdict (``pass``, ``fail``, ``noise`` or ``missing``, by
``GATE_RULE``); ``suggested_gate`` proposes one on a figure both runs have.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracekit.compare.spread import INTERVAL, side_value
from tracekit.compare.verdicts import HEADLINE, fmt
from tracekit.errors import TracekitError

if TYPE_CHECKING:
    from tracekit.compare.comparison import Comparison

# Other spellings accepted by --fail-if.
ALIASES = {
    "ttft": "ttft_ms",
    "tpot": "tpot_mean",
    "tokens_per_s": "decode_tokens_per_s",
    "mfu": "prefill_mfu",
    "mbu": "decode_mbu",
    "itl": "decode_step_mean",
    "itl_p50": "decode_step_p50",
    "itl_p90": "decode_step_p90",
}

_GATE = re.compile(r"^\s*([A-Za-z_0-9]+)\s*(>|<)\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(%|pp|ms|tok/s)?\s*$")


@dataclass(frozen=True)
class Gate:
    """``tpot_p50>+5%``: fail when the after-run's figure rose more than 5 % over before.

    ``op`` is ``>`` or ``<``; the threshold is relative (``%``) or an absolute change in
    the figure's unit (``ms``, ``tok/s``, ``pp`` for shares such as MFU, or a bare number)."""

    metric: str
    op: str
    threshold: float
    relative: bool
    text: str

    def missing(self, c: Comparison) -> str | None:
        """One sentence when a run lacks the gate's figure (it can neither hold nor fail), else None."""
        h = c.figure(self.metric)
        if h is not None and h["before"] is not None and h["after"] is not None:
            return None
        label = h["label"] if h else HEADLINE[self.metric][0].format(word="GPU")
        which = [s for s in ("before", "after") if side_value(c.runs(s), self.metric) is None]
        runs = "neither run has" if len(which) != 1 else f"the {which[0]} run has no"
        why = ""
        engine = [a for a in (c.before, c.after) if a.metrics.get("latency_semantics") == "engine steps"]
        if engine and self.metric in ("ttft_ms",) + tuple(k for k in HEADLINE if k.startswith("tpot_")):
            why = " (an engine trace times steps, not requests, so it has no TTFT or TPOT)"
        instead = suggested_gate(c)
        hint = f"; gate on a figure both runs have, e.g. --fail-if '{instead}'" if instead else ""
        return f"--fail-if {self.text!r}: {runs} {label}{why}, so the gate cannot be checked{hint}"

    def check(self, c: Comparison) -> str | None:
        """A sentence saying how the gate failed (or why it cannot be checked), or None when it
        holds, including when the change crossed the threshold only within noise."""
        g = self.evaluate(c)
        return g["sentence"] if g["verdict"] in ("fail", "missing") else None

    def evaluate(self, c: Comparison) -> dict[str, Any]:
        """The gate's verdict on ``c`` (``GATE_RULE``): ``pass``, ``fail``, ``noise`` (the change
        crossed the threshold but its interval reaches back across it) or ``missing`` (a run lacks
        the figure), with the threshold, the change, its interval and a sentence, as the JSON's
        ``gates[]`` holds them."""
        h = c.figure(self.metric)
        out: dict[str, Any] = {
            "expr": self.text,
            "metric": self.metric,
            "op": self.op,
            "threshold": self.threshold,
            "relative": self.relative,
            "unit": "%" if self.relative else HEADLINE[self.metric][1],
            "before": None,
            "after": None,
            "change": None,
            "interval": None,
            "interval_level": None,
            "verdict": "missing",
            "sentence": None,
        }
        absent = self.missing(c)
        if absent or h is None:
            out["sentence"] = absent
            return out
        label, unit = h["label"], h["unit"]
        out.update(before=h["before"], after=h["after"])
        change = h["relative"] if self.relative else h["delta"]
        if change is None:
            out.update(
                verdict="fail", sentence=f"{self.text}: the before run's {label} is 0, so there is no relative change"
            )
            return out
        out["change"] = change
        iv = h.get("interval") or {}
        interval = iv.get("relative" if self.relative else "delta")
        if interval is not None:
            out.update(interval=interval, interval_level=iv.get("level"))

        def show(x: float) -> str:
            return f"{x:+.1%}" if self.relative else fmt(x, unit, delta=True)

        def beyond(x: float) -> bool:
            return x > self.threshold if self.op == ">" else x < self.threshold

        limit = show(self.threshold)
        where = "above" if self.op == ">" else "below"
        moved = f"{label} changed {show(change)} ({fmt(h['before'], unit)} -> {fmt(h['after'], unit)})"
        span = (
            f"{iv.get('level', INTERVAL):.0%} interval {show(interval[0])} to {show(interval[1])}" if interval else None
        )
        if not beyond(change):
            out["verdict"] = "pass"
            out["sentence"] = f"{self.text}: {moved}{f', {span}' if span else ''}, not {where} {limit}"
        elif interval is not None:
            near = interval[0] if self.op == ">" else interval[1]
            if beyond(near):
                out["verdict"] = "fail"
                out["sentence"] = f"{self.text}: {moved}, {where} {limit} beyond noise ({span})"
            else:
                out["verdict"] = "noise"
                out["sentence"] = f"{self.text}: {moved}, {where} {limit} but within noise ({span} reaches {limit})"
        elif h["verdict"] == "within noise":
            out["verdict"] = "noise"
            out["sentence"] = f"{self.text}: {moved}, {where} {limit} but within noise ({h['noise_basis']})"
        else:
            out["verdict"] = "fail"
            out["sentence"] = (
                f"{self.text}: {moved}, {where} {limit} (a figure measured once per run: no interval, "
                "so the threshold alone decides)"
            )
        return out


# The rule every gate follows, stated in the JSON's method and the README.
GATE_RULE = (
    "a gate fails when the change is beyond its threshold and so is the near end of the change's "
    f"{INTERVAL:.0%} interval (the whole interval lies beyond the threshold); beyond the threshold with "
    "the interval reaching back across it is 'noise' and does not fail; a figure measured once per "
    "run has no interval, so its threshold alone decides (unless the change is under compare's fixed "
    "noise threshold)"
)


# The gate suggested to a user, first figure both runs have: TPOT for request-level runs, the
# decode (or prefill) step time and tokens/s for engine traces, which have no TPOT.
SUGGESTED = (
    "tpot_p50",
    "decode_step_p50",
    "decode_tokens_per_s",
    "prefill_step_p50",
    "ttft_ms",
    "prefill_tokens_per_s",
)
SUGGESTED_CHANGE = 5  # percent


def suggested_gate(c: Comparison) -> str | None:
    """``decode_step_p50>+5%``: a --fail-if on a figure both runs have (None when there is none),
    so that the suggestion cannot fail for want of the figure."""
    for key in SUGGESTED:
        h = c.figure(key)
        if h is not None and h["before"] is not None and h["after"] is not None:
            lower = HEADLINE[key][2] == "lower"
            return f"{key}{'>+' if lower else '<-'}{SUGGESTED_CHANGE}%"
    return None


def parse_gate(text: str) -> Gate:
    """``METRIC>+N%``, ``METRIC<-N%``, or an absolute change: ``tpot_p50>+0.5ms``,
    ``decode_tokens_per_s<-100tok/s``, ``decode_mbu<-2pp``, ``prefill_mfu<-0.02``."""
    metrics = ", ".join(HEADLINE)
    m = _GATE.match(text or "")
    if not m:
        raise TracekitError(
            f"--fail-if {text!r} is not of the form METRIC>+N% or METRIC<-N% (or an absolute change in ms, tok/s or pp); "
            f"metrics: {metrics}"
        )
    metric, op, number, suffix = m.groups()
    metric = ALIASES.get(metric.lower(), metric.lower())
    if metric not in HEADLINE:
        raise TracekitError(f"--fail-if {text!r}: unknown metric {m.group(1)!r} (metrics: {metrics})")
    unit = HEADLINE[metric][1]
    value = float(number)
    if suffix == "%":
        return Gate(metric, op, value / 100, True, text.strip())
    if suffix == "pp":
        if unit != "":
            raise TracekitError(
                f"--fail-if {text!r}: pp (percentage points) is for shares such as MFU, MBU or idle; {metric} is in {unit}"
            )
        value /= 100
    elif suffix and suffix != unit:
        raise TracekitError(
            f"--fail-if {text!r}: {metric} is measured in {unit or 'a share (use pp or %)'}, not {suffix}"
        )
    elif not suffix and unit:  # a share's bare number is its absolute change (0.02 = 2 points)
        example = f"{op}{number}{unit}"
        raise TracekitError(
            f"--fail-if {text!r} has no unit: write {metric}{op}{number}% for a relative change or "
            f"{metric}{example} for an absolute one"
        )
    return Gate(metric, op, value, False, text.strip())
