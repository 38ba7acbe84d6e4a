"""Category factors: the fraction of its datasheet roof each kind of kernel reaches on a vendor class.

The data is ``category_factors.json`` (shipped beside ``gpus.json``)::

    {"format": "tracekit-category-factors", "version": 1,
     "category_map": {TAXONOMY_CATEGORY: FACTOR_CATEGORY, ...},
     "classes": [{"key", "name", "match": {"vendor", "arch_contains": [...]},
                  "factors": {FACTOR_CATEGORY: {"compute": [lo, c, hi], "memory": [lo, c, hi],
                                                "source": "...", "cite": [...],
                                                "default_sides": [...]}}}, ...]}

A device belongs to the first class whose ``vendor`` equals its vendor (an empty vendor matches
any) and whose ``arch_contains`` names a substring of its arch (an empty list matches any arch),
so the table reads from the most specific class to the catch-all ``generic``. Each figure says
where it comes from (``source``); a side a row publishes a figure for names its references
(``cite``), and a side without a published measurement is listed in ``default_sides`` and
carries the ``generic`` row's figures (checked here), so that no estimate passes for a
measurement. No rule names a trace.

GEMMs by size regime: a GEMM on the compute side of the ridge (large M, prefill) takes the
compute figure, one on the memory side (small M, decode) the memory figure. Attention splits by
phase: ``unit_category`` names a decode step's attention ``attention_decode`` and every other
(prefill, mixed) ``attention_prefill``.

Within a class one figure differs per part: a row's own measured GEMM fraction
(``GpuSpec.achievable_compute_factor``, e.g. H100 PCIe's 66% against H100 SXM's 80%) replaces
the class's central GEMM and MoE compute figure, the class's relative spread kept around it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from tracekit.specs.model import GpuSpec

DATA_FILE = "category_factors.json"
FORMAT = "tracekit-category-factors"
VERSION = 1
FACTOR_CATEGORIES = (
    "gemm",
    "attention_prefill",
    "attention_decode",
    "normalization",
    "elementwise",
    "moe",
    "communication",
    "other",
)
# A taxonomy category the map sends here splits by the unit's phase (``unit_category``).
PHASE_SPLIT = {"attention": ("attention_prefill", "attention_decode")}
SIDES = ("compute", "memory")
# Categories whose compute figure is a GEMM's, so that a row's measured GEMM fraction carries.
_GEMM_LIKE = ("gemm", "moe")
# The database's default factor: a row without a measured fraction says nothing of its own.
_NO_OWN_FACTOR = 1.0


@dataclass(frozen=True)
class Factor:
    """One category's fractions of the roof on one class: (low, central, high) per side."""

    compute: tuple[float, float, float]
    memory: tuple[float, float, float]
    source: str
    cite: tuple[str, ...] = ()
    default_sides: tuple[str, ...] = ()

    def side(self, side: str) -> tuple[float, float, float]:
        return self.compute if side == "compute" else self.memory


@dataclass(frozen=True)
class VendorClass:
    key: str
    name: str
    vendor: str
    arch_contains: tuple[str, ...]
    factors: dict[str, Factor]

    def matches(self, spec: GpuSpec) -> bool:
        if self.vendor and self.vendor.lower() != (spec.vendor or "").lower():
            return False
        arch = spec.arch or ""
        return not self.arch_contains or any(s.lower() in arch.lower() for s in self.arch_contains)


@dataclass(frozen=True)
class Table:
    category_map: dict[str, str]
    classes: tuple[VendorClass, ...]


def _check_triple(where: str, v) -> tuple[float, float, float]:
    if not (isinstance(v, list) and len(v) == 3 and all(isinstance(x, (int, float)) for x in v)):
        raise ValueError(f"{where} must be [low, central, high]")
    lo, c, hi = (float(x) for x in v)
    if not 0 < lo <= c <= hi <= 1:
        raise ValueError(f"{where} must satisfy 0 < low <= central <= high <= 1, not {v}")
    return lo, c, hi


def parse(data: dict) -> Table:
    """The table from a decoded document; ValueError names the first bad figure."""
    if (data.get("format"), data.get("version")) != (FORMAT, VERSION):
        raise ValueError(f"not a {FORMAT} version {VERSION} document")
    cmap = dict(data["category_map"])
    bad = sorted(set(cmap.values()) - set(FACTOR_CATEGORIES) - set(PHASE_SPLIT))
    if bad:
        raise ValueError(f"category_map maps to unknown factor categories {bad}")
    classes = []
    for c in data["classes"]:
        factors = {}
        for cat in FACTOR_CATEGORIES:
            f = c["factors"].get(cat)
            if f is None:
                raise ValueError(f"class {c['key']!r} has no {cat!r} factors")
            if not str(f.get("source", "")).strip():
                raise ValueError(f"class {c['key']!r} {cat}: every figure needs a source")
            defaults = tuple(f.get("default_sides", ()))
            if set(defaults) - set(SIDES):
                raise ValueError(f"class {c['key']!r} {cat}: default_sides must name {SIDES}")
            if len(defaults) < len(SIDES) and not [r for r in f.get("cite", ()) if str(r).strip()]:
                raise ValueError(f"class {c['key']!r} {cat}: a published figure needs a reference (cite)")
            factors[cat] = Factor(
                _check_triple(f"{c['key']}.{cat}.compute", f["compute"]),
                _check_triple(f"{c['key']}.{cat}.memory", f["memory"]),
                f["source"],
                tuple(f.get("cite", ())),
                defaults,
            )
        classes.append(
            VendorClass(
                c["key"], c["name"], c["match"].get("vendor", ""), tuple(c["match"].get("arch_contains", ())), factors
            )
        )
    if not classes or classes[-1].vendor or classes[-1].arch_contains:
        raise ValueError("the last class must match any device (empty vendor and arch_contains)")
    # A default side is the generic row's figure: an estimate cannot hide behind the word.
    generic = classes[-1].factors
    for cls in classes:
        for cat, f in cls.factors.items():
            for side in f.default_sides:
                if f.side(side) != generic[cat].side(side):
                    raise ValueError(
                        f"class {cls.key!r} {cat}.{side} is marked default but differs from the generic row's figures"
                    )
    return Table(cmap, tuple(classes))


@lru_cache(maxsize=1)
def table() -> Table:
    """tracekit's packaged table (tested; a failure here is a broken install)."""
    return parse(json.loads(resources.files("tracekit.specs").joinpath(DATA_FILE).read_text()))


def vendor_class(spec: GpuSpec) -> VendorClass:
    """The first class that matches ``spec`` (the last matches any device)."""
    return next(c for c in table().classes if c.matches(spec))


def factor_category(category: str) -> str:
    """The factor category a taxonomy category prices with ("rope" -> "elementwise"; "attention"
    before its phase split, see ``unit_category``)."""
    return table().category_map.get(str(category), "other")


def unit_category(category: str, phase: str) -> str:
    """The factor row a unit of ``category`` in ``phase`` prices with: attention of a decode
    step is ``attention_decode``, of any other step ``attention_prefill`` (a mixed step's
    attention holds its prefill chunks' query-key pairs, the compute-heavy part)."""
    c = factor_category(category)
    if c in PHASE_SPLIT:
        prefill, decode = PHASE_SPLIT[c]
        return decode if str(phase) == "decode" else prefill
    return c


def fractions(spec: GpuSpec, category: str, side: str) -> tuple[float, float, float]:
    """(low, central, high) fraction of ``spec``'s datasheet roof on ``side`` that kernels of
    factor ``category`` reach; a row's own measured GEMM fraction replaces the central GEMM/MoE
    compute figure (the relative spread kept, capped at 1)."""
    cls = vendor_class(spec)
    lo, c, hi = cls.factors[category].side(side)
    own = spec.achievable_compute_factor
    if side != "compute" or category not in _GEMM_LIKE or own == _NO_OWN_FACTOR:
        return lo, c, hi
    # MoE's compute figure is relative to the class's dense GEMM: both scale by the row's.
    scale = own / cls.factors["gemm"].compute[1]
    return min(lo * scale, 1.0), min(c * scale, 1.0), min(hi * scale, 1.0)


def source(spec: GpuSpec, category: str) -> str:
    return vendor_class(spec).factors[category].source
