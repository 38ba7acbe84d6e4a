"""Factors learnt from checks: ``project --check TARGET --save-factors FILE`` and ``--factors FILE``.

A checked pair (the same workload measured on two GPUs) measures three things, kept as sums with
the pair they came from so that several files merge by adding them::

    {"format": "tracekit-learnt-factors", "version": 1,
     "pairs": [{"source": {...trace, device, spec_key, class}, "target": {...},
                "categories": {CATEGORY: {"projected_ms": p, "measured_ms": m}},
                "fractions": {CLASS: {CATEGORY: {SIDE: {"roof_ms": r, "kernel_ms": t}}}},
                "collectives": {CLASS: {KIND: {"bound_ms": b, "measured_ms": t}}}}]}

- ``categories``: per factor row, the kernel time the table's factors projected onto the target
  and the time the target measured. m / p is the target class's efficiency relative to the
  source class's on this work that the table did not know; a later projection between the same
  two classes multiplies that category's time by it (the inverse for the opposite direction;
  pairs combine as a time-weighted geometric mean). Per category, not per kernel: the two
  engines' kernels differ, their categories' work does not.
- ``fractions``: each class's measured fraction of each category's datasheet roof (roofline
  time over measured time, per side of the ridge), for the report and for people comparing
  with the published table.
- ``collectives``: each class's collective efficiency (latency-bandwidth bound over measured
  time, ``tracekit.whatif.collectives``), which replaces the source's own on the target's class.

Everything the file did not measure keeps the table's figures; the report names the pairs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracekit.analysis.pricing.roofline import COMPUTE, MEMORY
from tracekit.errors import TracekitError
from tracekit.specs import GpuSpec, factors
from tracekit.specs.links import group_link
from tracekit.whatif.collectives import bound, classify, message_bytes

FORMAT = "tracekit-learnt-factors"
VERSION = 1
_SIDES = {COMPUTE: "compute", MEMORY: "memory"}


@dataclass(frozen=True)
class Learnt:
    """Merged pairs: fractions and efficiencies as sums, so that pairs weigh by their time."""

    pairs: tuple[dict[str, Any], ...]
    path: str = ""

    def _sum(self, section: str, cls: str, key: str, sub: str | None, num: str, den: str) -> float | None:
        n = d = 0.0
        for p in self.pairs:
            e = (p.get(section) or {}).get(cls, {}).get(key)
            e = e.get(sub) if (e is not None and sub is not None) else e
            if e:
                n, d = n + float(e[num]), d + float(e[den])
        return n / d if d > 0 else None

    def fraction(self, cls: str, category: str, side: str) -> float | None:
        f = self._sum("fractions", cls, category, side, "roof_ms", "kernel_ms")
        return f if f is not None and f > 0 else None

    def correction(self, cls_s: str, cls_t: str, category: str) -> float | None:
        """Measured over projected kernel time of ``category`` from class ``cls_s`` onto
        ``cls_t``, over the pairs between these classes (either direction); None without one."""
        num = den = 0.0
        for p in self.pairs:
            e = (p.get("categories") or {}).get(category)
            if not e or not (e["projected_ms"] > 0 and e["measured_ms"] > 0):
                continue
            pair = (p["source"].get("class"), p["target"].get("class"))
            sign = 1.0 if pair == (cls_s, cls_t) else -1.0 if pair == (cls_t, cls_s) else 0.0
            if sign:
                w = e["projected_ms"] + e["measured_ms"]
                num += sign * w * np.log(e["measured_ms"] / e["projected_ms"])
                den += w
        return float(np.exp(num / den)) if den > 0 else None

    def scale(self, cls_s: str, cls_t: str, categories: np.ndarray) -> np.ndarray:
        """Per unit, the correction of its factor row (1 where none; never communication,
        whose collectives carry their own efficiency)."""
        out = np.ones(len(categories))
        for c in set(categories.tolist()) - {"communication"}:
            k = self.correction(cls_s, cls_t, str(c))
            if k is not None:
                out[categories == c] = k
        return out

    def efficiencies(self, cls: str) -> dict[str, float]:
        kinds = {k for p in self.pairs for k in ((p.get("collectives") or {}).get(cls) or {})}
        out = {k: self._sum("collectives", cls, k, None, "bound_ms", "measured_ms") for k in kinds}
        return {k: v for k, v in out.items() if v}

    def describe(self) -> str:
        where = f" ({os.path.basename(self.path)})" if self.path else ""
        pairs = "; ".join(
            f"{p['source'].get('device') or p['source'].get('spec_key')} -> "
            f"{p['target'].get('device') or p['target'].get('spec_key')}"
            for p in self.pairs
        )
        return f"learnt from {len(self.pairs)} checked pair{'s' if len(self.pairs) != 1 else ''}{where}: {pairs}"

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "pairs": list(self.pairs)}


def merge(items: list[Learnt]) -> Learnt:
    return Learnt(tuple(p for x in items for p in x.pairs))


def _side(spec: GpuSpec | None, key: str | None, trace: str | None, device: str | None) -> dict[str, Any]:
    cls = factors.vendor_class(spec).key if spec is not None else None
    return {"trace": trace, "device": device, "spec_key": key, "class": cls}


def fractions_of(work, spec: GpuSpec) -> dict[str, dict[str, dict[str, float]]]:
    """Per factor row and side: the roofline time and the measured time of the units of
    ``work`` (an analysis's priced units on ``spec``) bound on that side."""
    rf = work["roof_fraction"].to_numpy(dtype=float)
    dur = work["dur_ns"].to_numpy(dtype=float) / 1e6
    bound_ = work["bound"].astype(str).to_numpy()
    cats = [
        factors.unit_category(c, p)
        for c, p in zip(work["category"].astype(str).to_numpy(), work["phase"].astype(str).to_numpy())
    ]
    out: dict[str, dict[str, dict[str, float]]] = {}
    for i in np.flatnonzero(np.isfinite(rf) & (rf > 0) & (dur > 0) & np.isin(bound_, list(_SIDES))).tolist():
        if cats[i] == "communication":
            continue
        e = out.setdefault(cats[i], {}).setdefault(_SIDES[bound_[i]], {"roof_ms": 0.0, "kernel_ms": 0.0})
        e["roof_ms"] += rf[i] * dur[i]
        e["kernel_ms"] += dur[i]
    return out


def collectives_of(work, spec: GpuSpec, ranks: int) -> dict[str, dict[str, float]]:
    """Per collective kind: its latency-bandwidth bound on ``spec``'s group of ``ranks`` and its
    measured time, over the collectives of ``work`` whose message size pricing knows."""
    link = group_link(spec, ranks)
    if link is None:
        return {}
    cat = work["category"].astype(str).to_numpy()
    nbytes = work["bytes"].to_numpy(dtype=float)
    dur = work["dur_ns"].to_numpy(dtype=float) / 1e6
    sel = np.flatnonzero((cat == "communication") & np.isfinite(nbytes) & (nbytes > 0) & (dur > 0))
    names = work["name"].astype(str).to_numpy()
    out: dict[str, dict[str, float]] = {}
    for i, s in zip(sel.tolist(), message_bytes(nbytes[sel], ranks).tolist()):
        kind, alg = classify(names[i])
        e = out.setdefault(kind, {"bound_ms": 0.0, "measured_ms": 0.0})
        e["bound_ms"] += bound(kind, alg, s, link).total * 1e3
        e["measured_ms"] += dur[i]
    return out


def from_check(projection, measured, ranks: int) -> Learnt:
    """What a checked pair measured: the source's fractions and efficiencies on its class (from
    the projection's own parts) and the target trace's on its class (``measured``, its analysis)."""
    src_spec, tgt_spec = projection.source_spec, projection.target
    src_cls, tgt_cls = factors.vendor_class(src_spec).key, factors.vendor_class(tgt_spec).key
    fr: dict[str, Any] = {}
    co: dict[str, Any] = {}
    for cls, work, spec in ((src_cls, projection.parts.work, src_spec), (tgt_cls, measured.work, tgt_spec)):
        for cat, sides in fractions_of(work, spec).items():
            for side, e in sides.items():
                t = fr.setdefault(cls, {}).setdefault(cat, {}).setdefault(side, {"roof_ms": 0.0, "kernel_ms": 0.0})
                t["roof_ms"] += e["roof_ms"]
                t["kernel_ms"] += e["kernel_ms"]
        for kind, e in collectives_of(work, spec, ranks).items():
            t = co.setdefault(cls, {}).setdefault(kind, {"bound_ms": 0.0, "measured_ms": 0.0})
            t["bound_ms"] += e["bound_ms"]
            t["measured_ms"] += e["measured_ms"]
    s, m = projection.source, measured
    pair = {
        "source": _side(src_spec, s.device.get("spec_key"), s.source.get("path"), s.device.get("name")),
        "target": _side(tgt_spec, m.device.get("spec_key"), m.source.get("path"), m.device.get("name")),
        "categories": _categories(projection, measured),
        "fractions": fr,
        "collectives": co,
    }
    return Learnt((pair,))


def _categories(projection, measured) -> dict[str, dict[str, float]]:
    """Per factor row: the kernel time the table's factors projected (a learnt scale the
    projection applied divided out) and the kernel time the target measured."""
    rp = projection.repriced
    central = rp.central / rp.scale if rp.scale is not None else rp.central
    out: dict[str, dict[str, float]] = {}
    for c, v in zip(rp.categories.tolist(), central.tolist()):
        out.setdefault(str(c), {"projected_ms": 0.0, "measured_ms": 0.0})["projected_ms"] += v / 1e6
    w = measured.work
    for c, p, d in zip(
        w["category"].astype(str).to_numpy(), w["phase"].astype(str).to_numpy(), w["dur_ns"].to_numpy(dtype=float)
    ):
        out.setdefault(factors.unit_category(c, p), {"projected_ms": 0.0, "measured_ms": 0.0})["measured_ms"] += d / 1e6
    return out


def dumps(learnt: Learnt) -> str:
    """The file's text (the CLI writes it atomically, refusing an existing file without --force)."""
    return json.dumps(learnt.to_dict(), indent=1) + "\n"


def load(path: str) -> Learnt:
    """A factors file written by ``--save-factors`` (or several merged); every failure is one
    ``TracekitError`` sentence."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise TracekitError(f"factors file {path} cannot be read: {e.strerror or e}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise TracekitError(f"factors file {path} is not JSON: {e}") from None
    problem = _problem(data)
    if problem:
        raise TracekitError(
            f"factors file {path} is not a tracekit factors file ({FORMAT} version {VERSION}, "
            f"written by tracekit project --check TARGET --save-factors FILE): {problem}"
        )
    return Learnt(tuple(data["pairs"]), path)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) and v >= 0


def _problem(data) -> str | None:
    """What makes a decoded factors document unusable, as a clause; None when it is fine."""
    if not isinstance(data, dict) or (data.get("format"), data.get("version")) != (FORMAT, VERSION):
        return "its format and version are not " + f"{FORMAT!r} {VERSION}"
    pairs = data.get("pairs")
    if not isinstance(pairs, list) or not pairs:
        return "it holds no pairs"
    known = {c.key for c in factors.table().classes}
    for i, p in enumerate(pairs, 1):
        if not isinstance(p, dict) or not all(isinstance(p.get(k), dict) for k in ("source", "target", "fractions")):
            return f"pair {i} lacks its source, target or fractions"
        for cls, cats in p["fractions"].items():
            if cls not in known or not isinstance(cats, dict):
                return f"pair {i} names an unknown vendor class {cls!r}"
            for cat, sides in cats.items():
                if cat not in factors.FACTOR_CATEGORIES or not isinstance(sides, dict):
                    return f"pair {i} names an unknown category {cat!r}"
                for side, e in sides.items():
                    if (
                        side not in factors.SIDES
                        or not isinstance(e, dict)
                        or not (_number(e.get("roof_ms")) and _number(e.get("kernel_ms")))
                    ):
                        return f"pair {i} {cls}.{cat}.{side} needs roof_ms and kernel_ms >= 0"
        for cat, e in (p.get("categories") or {}).items():
            if (
                cat not in factors.FACTOR_CATEGORIES
                or not isinstance(e, dict)
                or not (_number(e.get("projected_ms")) and _number(e.get("measured_ms")))
            ):
                return f"pair {i} category {cat!r} needs projected_ms and measured_ms >= 0"
        for cls, kinds in (p.get("collectives") or {}).items():
            if (
                cls not in known
                or not isinstance(kinds, dict)
                or not all(
                    isinstance(e, dict) and _number(e.get("bound_ms")) and _number(e.get("measured_ms"))
                    for e in kinds.values()
                )
            ):
                return f"pair {i} collectives of {cls!r} need bound_ms and measured_ms >= 0"
    return None
