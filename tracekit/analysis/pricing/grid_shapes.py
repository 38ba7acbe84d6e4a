"""GEMM output shapes (M x N) from a kernel's launch grid and the tile its name states.

A trace recorded without shapes still names each GEMM kernel's tile (``ampere_sgemm_128x64_nn``,
``nvjet_tst_144x128_64x6_2x1_v_bz_TNN``, hipBLASLt ``Cijk_..._MT256x192x64_...``) and records its
grid. One block computes one tile of the output, so the grid counts the tiles along M (tokens) and
N (the layer's output width), and tiles x tile size give M and N to within a tile.

PyTorch calls the column-major BLAS libraries with its operands swapped (C^T = B^T A^T), so the
library's first tile dimension runs along PyTorch's N and the second along M. How a library lays
the tiles on the grid decides what the grid alone says (``GRAMMARS``, one row per family):

- ``xy``: grid.x counts the N tiles, grid.y the M tiles, grid.z split-K slices or the batch
  (cuBLAS's legacy ``volta_/turing_/ampere_..gemm`` kernels): M and N each to within a tile.
- ``swizzle``: CUTLASS 2.x kernels run a threadblock swizzle of unknown width S: grid.x = M
  tiles x S, grid.y = ceil(N tiles / S). Only a known M (the step's tokens) fixes S; N is then
  known to within S tiles.
- ``flat``: one grid dimension counts all tiles (N tiles x M tiles, rounded up to the cluster
  shape, times the split-K slices): cuBLASLt ``nvjet_*`` and hipBLASLt ``Cijk_*`` (whose ROCm
  grid is in threads: divided by the block). A known M gives N; otherwise only their product.
  A batched GEMM (``aten::bmm``) folds its batch count into the same dimension, so its N read
  this way is the batch times N: the derivation is for 2-D GEMMs, which linear layers are.
- ``persistent``: the grid is the SM count, not the tiles (Hopper ``sm90_xmma`` warp-specialised
  kernels, Marlin, stream-K): M and N are unknown, and said to be, rather than a wrong number.
- ``opaque``: the name states no tile (Triton kernels, whose BLOCK sizes live in their launch
  config; CUTLASS 3 kernels, whose tile is in mangled template arguments).

``derive`` returns each dimension as a range ``(lo, hi]`` that the true size lies in, and how
it was found. Given the model's candidate widths (``n_candidates``), it picks the one the grid
fits, which is how ``gemm_layers`` tells a QKV GEMM from a gate-up or an LM head.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

XY, SWIZZLE, FLAT, PERSISTENT, OPAQUE = "xy", "swizzle", "flat", "persistent", "opaque"
# CUTLASS threadblock swizzle widths cuBLAS uses (GemmIdentityThreadblockSwizzle<S>).
_SWIZZLES = (1, 2, 4, 8, 16, 32)
# Split-K slice counts a candidate width may imply before it is called implausible.
_MAX_SPLIT = 16

# How sure a derived dimension is.
EXACT = "exact"  # known to within one tile (the grid counts its tiles)
BOUND = "bound"  # known to lie in a range wider than one tile
GIVEN = "given"  # stated by the caller (the step's tokens), not derived
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Grammar:
    family: str
    pattern: re.Pattern
    layout: str
    note: str


def _g(family: str, pattern: str, layout: str, note: str) -> Grammar:
    return Grammar(family, re.compile(pattern, re.I), layout, note)


# First match wins. Tile groups are named n (the library's first, PyTorch's N) and m.
GRAMMARS: tuple[Grammar, ...] = (
    _g(
        "hipblaslt-streamk",
        r"^Cijk_.*_MT(?P<n>\d+)x(?P<m>\d+)x\d+_.*_SK[1-9]",
        PERSISTENT,
        "hipBLASLt stream-K kernel: its grid is the CU count, not the tiles",
    ),
    _g(
        "hipblaslt",
        r"^Cijk_.*_MT(?P<n>\d+)x(?P<m>\d+)x\d+_",
        FLAT,
        "hipBLASLt/Tensile macro tile MT<n>x<m>x<k>; grid.x = tiles x workgroup threads",
    ),
    _g(
        "cublaslt-nvjet",
        r"^nvjet_(?:sm\d+_)?[a-z]+_(?P<n>\d+)x(?P<m>\d+)_\d+x\d+_(?P<cn>\d+)x(?P<cm>\d+)_",
        FLAT,
        "cuBLASLt nvjet tile <n>x<m>, cluster <cn>x<cm>; grid.x = all tiles",
    ),
    _g(
        "cublas-sm90",
        r"^sm9\d_xmma_gemm_.*tilesize(?P<n>\d+)x(?P<m>\d+)x\d+",
        PERSISTENT,
        "Hopper cuBLAS warp-specialised kernel: persistent, its grid is at most the SM count",
    ),
    _g(
        "cublas-sm100",
        r"^sm1\d\d_xmma_gemm_.*tilesize(?P<n>\d+)x(?P<m>\d+)x\d+",
        PERSISTENT,
        "Blackwell cuBLAS kernel: persistent, its grid is at most the SM count",
    ),
    _g(
        "cublas-xmma",
        r"^sm[5-8]\d_xmma_gemm_.*tilesize(?P<n>\d+)x(?P<m>\d+)x\d+",
        XY,
        "cuBLAS xmma kernel tilesize<n>x<m>x<k>; grid x: N tiles, y: M tiles",
    ),
    _g(
        "cublas",
        r"^(?:maxwell|pascal|volta|turing|ampere|ada|sm\d+)_\w*?gemm\w*?_(?P<n>\d+)x(?P<m>\d+)_",
        XY,
        "cuBLAS kernel <n>x<m>; grid x: N tiles, y: M tiles, z: split-K or batch",
    ),
    _g(
        "cutlass",
        r"cutlass_\d+_\w*?gemm\w*?_(?P<n>\d+)x(?P<m>\d+)_",
        SWIZZLE,
        "CUTLASS 2.x kernel <n>x<m>: a threadblock swizzle of unknown width folds the tiles",
    ),
    _g(
        "cublas-splitk-reduce",
        r"splitKreduce",
        OPAQUE,
        "split-K reduction: the second stage of a split-K GEMM, whose grid covers the output, not tiles",
    ),
    _g("cublas-gemv", r"gemv|gemmSN_", OPAQUE, "cuBLAS GEMV kernel: it names no tile"),
    _g("marlin", r"marlin", PERSISTENT, "Marlin kernel: persistent, its grid is the SM count"),
    _g(
        "cutlass3",
        r"^_ZN7cutlass13device_kernel|cutlass::device_kernel|GemmUniversal",
        OPAQUE,
        "CUTLASS 3 kernel: its tile is in mangled template arguments tracekit does not parse",
    ),
    _g(
        "triton",
        r"^triton_|_matmul|matmul_kernel|_w8a8_|fused_moe_kernel|_gemm_kernel",
        OPAQUE,
        "Triton kernel: its BLOCK sizes are in its launch config, not its name",
    ),
)


@dataclass(frozen=True)
class Tile:
    family: str
    layout: str
    n: int  # tile size along PyTorch's N (0 where the name states none)
    m: int  # tile size along M
    cluster_n: int = 1
    cluster_m: int = 1
    split_k_in_grid: bool = False  # split-K slices folded into a flat grid
    threads: int = 0  # hipBLASLt workgroup threads stated in the name (WG<x>_<y>_<z>)
    note: str = ""


@lru_cache(maxsize=1 << 14)
def tile_of(name: str) -> Tile | None:
    """The tile grammar a GEMM kernel's name follows; None when no grammar knows the name."""
    base = name[5:] if name.startswith("void ") else name
    for g in GRAMMARS:
        m = g.pattern.search(base)
        if not m:
            continue
        d = m.groupdict()
        if any(d.get(k) is not None and int(d[k]) <= 0 for k in ("n", "m")):
            return None  # a tile 0 wide is none a library writes: no shape can be read from it
        # A cluster is at least one block: a name stating 0 (not one a library writes) reads as 1.
        cn, cm = max(1, int(d.get("cn") or 1)), max(1, int(d.get("cm") or 1))
        wg = re.search(r"_WG(\d+)_(\d+)_(\d+)", base) if g.family.startswith("hipblaslt") else None
        return Tile(
            g.family,
            g.layout,
            int(d.get("n") or 0),
            int(d.get("m") or 0),
            cn,
            cm,
            bool(re.search(r"splitk", base, re.I)) and g.layout == FLAT,
            math.prod(int(x) for x in wg.groups()) if wg else 0,
            g.note,
        )
    return None


@dataclass(frozen=True)
class GridShape:
    """What a GEMM kernel's grid says about its output: each of M and N as a range (lo, hi]
    in elements (None: unknown) with how sure it is, and the split-K slices where known."""

    tile: Tile
    m_lo: int | None
    m_hi: int | None
    m_how: str
    n_lo: int | None
    n_hi: int | None
    n_how: str
    split: int | None = None
    n_match: int | None = None  # the one candidate width the grid fits (``n_candidates``)
    n_fits: tuple[int, ...] = ()  # every candidate width the grid fits, fewest split-K slices first
    reason: str = ""

    @property
    def m(self) -> int | None:
        """M rounded up to whole tiles (an upper bound within a tile), or the stated M."""
        return self.m_hi

    @property
    def n(self) -> int | None:
        return self.n_match if self.n_match is not None else self.n_hi


def _range(tiles: int, size: int, granule: int = 1) -> tuple[int, int]:
    """(lo, hi] of a dimension covered by ``tiles`` tiles, the count rounded up to ``granule``."""
    return (tiles - granule) * size, tiles * size


def derive(
    name: str,
    grid: tuple[int, int, int],
    block: tuple[int, int, int] | None = None,
    m: int | None = None,
    n_candidates: tuple[int, ...] = (),
) -> GridShape | None:
    """M and N of a GEMM kernel's output from its grid and its name's tile; None when no
    grammar knows the name. ``m``: the GEMM's M when known otherwise (the step's tokens), which
    a flat or swizzled grid needs to tell M from N; ``n_candidates``: output widths it may have
    (the model's layers), of which the one the grid fits is returned as ``n_match``."""
    tile = tile_of(name)
    if tile is None:
        return None
    gx, gy, gz = grid
    none = GridShape(tile, None, None, UNKNOWN, None, None, UNKNOWN)
    if tile.layout == OPAQUE:
        return _with(none, reason=tile.note)
    if tile.layout == PERSISTENT:
        return _with(none, reason=tile.note)
    if min(gx, gy, gz) <= 0:
        return _with(none, reason="the trace records no grid for this kernel (graph-replayed kernels on ROCm)")
    if tile.layout == FLAT and tile.family.startswith("hipblaslt"):
        threads = math.prod(block) if block and min(block) > 0 else tile.threads
        if not threads or gx % threads:
            return _with(none, reason="its grid (in threads) is not a whole number of workgroups")
        gx //= threads
    if tile.layout == XY:
        n_rng, m_rng = _range(gx, tile.n), _range(gy, tile.m)
        out = GridShape(tile, *m_rng, EXACT, *n_rng, EXACT, split=gz, reason=tile.note)
        return _match(out, n_candidates)
    if tile.layout == SWIZZLE:
        if not m:
            return _with(none, reason="a swizzled CUTLASS grid tells M from N only with M known (the step's tokens)")
        mt = math.ceil(m / tile.m)
        s = gx // mt if gx % mt == 0 else 0
        if s not in _SWIZZLES:
            return _with(
                none, m_lo=m, m_hi=m, m_how=GIVEN, reason=f"its grid.x ({gx}) is not {mt} M tiles times a swizzle width"
            )
        lo, hi = (gy - 1) * s * tile.n, gy * s * tile.n
        out = GridShape(tile, m, m, GIVEN, lo, hi, EXACT if s == 1 else BOUND, split=gz, reason=tile.note)
        return _match(out, n_candidates)
    # FLAT: grid.x * grid.y = N tiles x M tiles (each rounded up to its cluster) x split-K.
    total = gx * gy
    if not m:
        return _with(none, n_how=UNKNOWN, reason=f"a flat grid gives only N tiles x M tiles ({total}): M must be known")
    mt = _round_up(math.ceil(m / tile.m), tile.cluster_m)
    if total % mt:
        return _with(
            none,
            m_lo=m,
            m_hi=m,
            m_how=GIVEN,
            reason=f"its grid ({total} tiles) is not a multiple of the {mt} M tiles of M={m}",
        )
    nt = total // mt
    if tile.split_k_in_grid:
        out = GridShape(tile, m, m, GIVEN, 0, nt * tile.n, BOUND, reason=tile.note + "; split-K slices folded in")
    else:
        out = GridShape(
            tile,
            m,
            m,
            GIVEN,
            *_range(nt, tile.n, tile.cluster_n),
            EXACT if tile.cluster_n == 1 else BOUND,
            split=1,
            reason=tile.note,
        )
    return _match(out, n_candidates, folded=tile.split_k_in_grid)


def _round_up(x: int, k: int) -> int:
    return -(-x // k) * k


def _with(shape: GridShape, **kw) -> GridShape:
    return GridShape(**{**shape.__dict__, **kw})


def _match(shape: GridShape, candidates: tuple[int, ...], folded: bool = False) -> GridShape:
    """The candidate width the grid fits: inside the derived range, or (split-K folded into the
    grid) one whose tiles divide the grid's N tiles in the fewest slices."""
    if not candidates or shape.n_lo is None or shape.n_hi is None:  # the two are known together
        return shape
    t = shape.tile
    if folded:
        tiles = shape.n_hi // t.n
        fits = []
        for c in set(candidates):
            nt = _round_up(math.ceil(c / t.n), t.cluster_n)
            if nt and tiles % nt == 0 and tiles // nt <= _MAX_SPLIT:
                fits.append((tiles // nt, c))
        fits.sort()
        if len(fits) != 1:
            return _with(shape, n_fits=tuple(c for _, c in fits))
        split, c = fits[0]
        return _with(shape, n_match=c, n_fits=(c,), split=split, n_lo=c, n_hi=c, n_how=EXACT)
    inside = tuple(sorted({c for c in candidates if shape.n_lo < c <= shape.n_hi}))
    return _with(shape, n_match=inside[0] if len(inside) == 1 else None, n_fits=inside)
