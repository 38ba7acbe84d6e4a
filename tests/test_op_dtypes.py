"""The profiler's dtype strings and scalar-type codes, as torch itself writes them.

``tracekit.analysis.pricing.op_args`` prices an op's tensors from the ``Input type`` strings a
trace records (``c10::BFloat16``, ``long int``) and reads dtype arguments from the ``Concrete
Inputs`` codes (``15`` for bf16). Both tables are checked here against a trace torch.profiler
writes in the test: each dtype's tensor cloned (its type string) and a tensor converted to it
(its code), with each dtype's bytes per element from torch itself. The names tracekit gives
the dtypes are written out by hand below."""

from __future__ import annotations

import json

import pytest

from tracekit.analysis.pricing.op_args import DTYPES, SCALAR_TYPE_CODES

torch = pytest.importorskip("torch", reason="the collect extra (torch) writes the trace these tables are read against")

# tracekit's name of each dtype (the spec table's and the cost models' vocabulary).
NAMES = {
    "float16": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "float64": "fp64",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "float8_e4m3fnuz": "fp8",
    "float8_e5m2fnuz": "fp8",
    "float8_e8m0fnu": "fp8",
    "float4_e2m1fn_x2": "fp4",
    "int64": "int64",
    "int32": "int32",
    "int16": "int16",
    "int8": "int8",
    "uint8": "uint8",
    "bool": "bool",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "complex32": "complex32",
    "complex64": "complex64",
    "complex128": "complex128",
}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """{dtype name: (Input type string, Concrete Inputs code)} from a trace torch writes."""
    from torch.profiler import ProfilerActivity, profile

    dtypes = [getattr(torch, n) for n in NAMES if hasattr(torch, n)]
    out: dict[str, list] = {}
    with _quiet():
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for d in dtypes:
                torch.empty(4, dtype=d).clone()
                # A copy, so that _to_copy records the dtype argument: from another dtype.
                source = torch.zeros(4, dtype=torch.float64 if d == torch.float32 else torch.float32)
                try:
                    source.to(dtype=d)
                except (RuntimeError, NotImplementedError):
                    pass  # no conversion kernel (fp4): its code is still recorded on the call
    path = tmp_path_factory.mktemp("dtypes") / "trace.json"
    prof.export_chrome_trace(str(path))
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    clones = [e["args"]["Input type"][0] for e in events if e["name"] == "aten::clone"]
    codes = [int(e["args"]["Concrete Inputs"][1]) for e in events if e["name"] == "aten::_to_copy"]
    names = [str(d).removeprefix("torch.") for d in dtypes]
    assert len(clones) == len(names) and len(codes) == len(names)
    for n, t, c, d in zip(names, clones, codes, dtypes):
        out[n] = [t, c, torch.empty(0, dtype=d).element_size()]
    return out


class _quiet:
    """Silence torch's 'ComplexHalf support is experimental' warning for the clone of complex32."""

    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc):
        self._w.__exit__(*exc)


def test_every_input_type_string_torch_writes_has_its_dtype_and_bytes(recorded):
    """catches: a dtype's bytes per element wrong in the table (fp8 at 2, complex64 at 4), or a
    type string not as the profiler writes it (the dtype's tensors would go unpriced)."""
    for name, (type_string, _, size) in recorded.items():
        assert DTYPES.get(type_string) == (NAMES[name], size), (name, type_string)
    # The table holds nothing torch does not write but two spellings other compilers give
    # int64 and int16 ("long", "short"), kept with the sizes of their "long int", "short int".
    extra = set(DTYPES) - {t for t, _, _ in recorded.values()}
    assert extra <= {"long", "short"}
    assert DTYPES.get("long") == DTYPES["long int"] and DTYPES.get("short") == DTYPES["short int"]


def test_every_scalar_type_code_torch_writes_has_its_dtype_and_bytes(recorded):
    """catches: a code off by one (bf16 is 15, not 14 or 16; the fp8 codes 23-26 and 44 in their
    order), a dtype's bytes per element wrong, or a code torch writes missing from the table."""
    for name, (_, code, size) in recorded.items():
        assert SCALAR_TYPE_CODES.get(code) == (NAMES[name], size), (name, code)
    assert set(SCALAR_TYPE_CODES) == {c for _, c, _ in recorded.values()}
