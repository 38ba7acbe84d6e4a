"""The GPU spec database and its lookup: real device names, matching pitfalls, data agreement, CLI."""

from __future__ import annotations

import csv
import gzip
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, real_trace_path

from tracekit.errors import TracekitError
from tracekit.specs import (
    all_specs,
    cpu_lookup,
    cpu_spec_from_sidecar,
    load_spec_file,
    lookup,
    match_device,
    normalise_dtype,
    normalise_name,
    spec_by_name,
    with_calibration,
)
from tracekit.specs.lookup import GENERIC_NAMES, NORMALISED, PROPERTIES

RESEARCH_CSV = ROOT.parent / "shared" / "gpu-specs" / "gpus.csv"
T = 1e12
GIB = 1 << 30


def spec(key: str):
    return next(s for s in all_specs() if s.key == key)


def props(key: str, name: str | None = None, **overrides) -> dict:
    """deviceProperties as a trace would carry them for a database row."""
    s = spec(key)
    p = {
        "name": s.device_names[0] if name is None else name,
        "computeMajor": s.compute_capability[0],
        "computeMinor": s.compute_capability[1],
        "numSms": s.num_sms,
        "totalGlobalMem": s.total_global_mem,
    }
    return {**p, **overrides}


def device_properties(path: Path) -> list[dict]:
    """The top-level deviceProperties of a trace, without parsing its (large) event list."""
    decoder = json.JSONDecoder()
    text = ""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        while chunk := f.read(1 << 20):
            text += chunk
            at = text.find('"deviceProperties"')
            if at < 0:
                continue
            try:
                value, _ = decoder.raw_decode(text, text.index("[", at))
                return value
            except (ValueError, json.JSONDecodeError):
                continue  # the array runs past what has been read so far
    return []


# --- every device name in the real traces -------------------------------------------------------

REAL_EXPECTED = {
    "h100_hf": "h100-sxm",
    "mi300x_extend": "mi300x",
    "mi300x_decode": "mi300x",
    "mi300x_capture": "mi300x",
    "a100_particle": "a100-pcie-40gb",
    "a100_torchrec": "a100-sxm4-80gb",
    "a100_dlrm": "a100-sxm4-40gb",
    "a100_nccl": "a100-sxm4-40gb",
    "a100_triton": "a100-sxm4-40gb",
    "v100_ddp": "v100-sxm2-32gb",
    "v100_pt19": "v100-sxm2-32gb",
    "v100_ns": "v100-sxm2-32gb",
    # Not in the research table; added to the database from public tables (see each row's sources).
    "b300_moe": "b300",
    "b300_qwen3_moe": "b300",
    "rtx4080_nanovllm": "rtx-4080-laptop",
    "gb10_vllm": "gb10",
    "b200_vllm": "b200",
    "mi300x_qwen3_moe": "mi300x",
}


@pytest.mark.parametrize("trace,key", sorted(REAL_EXPECTED.items()))
def test_real_trace_devices_resolve_to_their_row(trace, key):
    devices = device_properties(real_trace_path(trace))
    assert devices
    for dev in devices:
        match = lookup(dev)
        assert match.spec is not None, match.reason
        assert match.spec.key == key
        assert match.how == "exact name"


@pytest.mark.parametrize(
    "trace,why",
    [
        ("mi250_toy", "which tracekit will not guess between"),
    ],
)
def test_real_trace_devices_not_in_database_are_unknown_with_reason(trace, why):
    for dev in device_properties(real_trace_path(trace)):
        match = lookup(dev)
        assert match.spec is None and match.how == "unknown"
        assert why in match.reason


def test_laptop_gpu_is_not_mapped_to_a_datacenter_part():
    # RTX 4080 Laptop: (8.9, 58 SMs) like an L4, but 11.6 GiB: its own row, never the L4's.
    dev = {
        "name": "NVIDIA GeForce RTX 4080 Laptop GPU",
        "computeMajor": 8,
        "computeMinor": 9,
        "numSms": 58,
        "totalGlobalMem": 12450922496,
    }
    assert lookup(dev).spec.key == "rtx-4080-laptop"
    # A laptop part the database lacks stays unknown, even where its properties resemble a row.
    other = {**dev, "name": "NVIDIA GeForce RTX 4070 Laptop GPU", "numSms": 36, "totalGlobalMem": 8585216000}
    match = lookup(other)
    assert match.spec is None and "not in tracekit's GPU database" in match.reason
    assert "L4" not in match.reason


def test_mi250_die_with_generic_name_is_ambiguous_not_mi210():
    dev = {
        "name": "AMD Radeon Graphics",
        "computeMajor": 9,
        "computeMinor": 0,
        "numSms": 104,
        "totalGlobalMem": 68702699520,
    }
    match = lookup(dev)
    assert match.spec is None
    assert "'MI210'" in match.reason and "'MI250 (per GCD)'" in match.reason
    assert "--gpu mi210" in match.reason and "--gpu mi250-gcd" in match.reason


def test_mi250x_die_with_generic_name_is_separated_by_sm_count():
    match = lookup(props("mi250x-gcd", name="AMD Radeon Graphics"))
    assert match.spec.key == "mi250x-gcd" and match.how == PROPERTIES


def test_shared_mi250_name_is_settled_by_sm_count():
    assert lookup(props("mi250x-gcd", name="AMD Instinct MI250X/MI250")).spec.key == "mi250x-gcd"
    assert lookup(props("mi250-gcd", name="AMD Instinct MI250X/MI250")).spec.key == "mi250-gcd"


# --- matching pitfalls --------------------------------------------------------------------------


@pytest.mark.parametrize("name,key", [("NVIDIA L4", "l4"), ("NVIDIA L40", "l40"), ("NVIDIA L40S", "l40s")])
def test_l4_l40_l40s_never_cross(name, key):
    assert lookup({"name": name}).spec.key == key
    assert lookup({"name": name.lower()}).spec.key == key
    assert spec_by_name(name).key == key


def test_l4_normalised_name_is_not_a_prefix_match():
    assert lookup({"name": "NVIDIA L4 Foo"}).spec is None
    assert lookup({"name": "NVIDIA L"}).spec is None


def test_h200_matches_without_sxm_suffix():
    assert lookup(props("h200-sxm", name="NVIDIA H200")).spec.key == "h200-sxm"
    assert lookup({"name": "nvidia  h200"}).how == NORMALISED
    # The NVL part is a different SKU with lower peaks: its own row, never the SXM's.
    nvl = lookup(props("h200-sxm", name="NVIDIA H200 NVL"))
    assert nvl.spec.key == "h200-nvl"
    assert nvl.spec.peak_flops("bf16") < spec("h200-sxm").peak_flops("bf16")


def test_gh200_names_map_to_gh200_not_h100():
    assert lookup(props("gh200-96gb", name="NVIDIA GH200 480GB")).spec.key == "gh200-96gb"
    assert lookup(props("gh200-144gb", name="NVIDIA GH200 144G HBM3e")).spec.key == "gh200-144gb"
    shared = lookup(props("gh200-96gb", name="NVIDIA GH200 120GB"))
    assert shared.spec.key == "gh200-96gb" and "memory" in shared.how
    # Without properties the shared name cannot be settled.
    assert lookup({"name": "NVIDIA GH200 120GB"}).spec is None


def test_mig_slice_matches_parent_and_scales_compute_and_bandwidth():
    parent = spec("a100-sxm4-80gb")
    dev = {
        "name": "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
        "computeMajor": 8,
        "computeMinor": 0,
        "numSms": 42,
        "totalGlobalMem": 42144366592,
    }
    match = lookup(dev)
    s = match.spec
    assert "MIG slice 3g.40gb" in match.how and "42/108 SMs" in match.how
    assert s.peak_flops("bf16") == pytest.approx(parent.peak_flops("bf16") * 42 / 108)
    assert s.peak_flops("fp32", "vector") == pytest.approx(19.5 * T * 42 / 108)
    assert s.peak_bandwidth == pytest.approx(parent.peak_bandwidth * 42144366592 / parent.total_global_mem)
    assert s.num_sms == 42 and s.name == "A100 80GB SXM MIG 3g.40gb"


def test_h100_mig_slice():
    dev = {
        "name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
        "computeMajor": 9,
        "computeMinor": 0,
        "numSms": 16,
        "totalGlobalMem": 10 * GIB,
    }
    s = lookup(dev).spec
    assert s.peak_flops("c10::BFloat16") == pytest.approx(989.4 * T * 16 / 132)


def test_mig_slice_without_sm_count_is_unknown():
    match = lookup({"name": "NVIDIA A100-SXM4-80GB MIG 3g.40gb"})
    assert match.spec is None and "numSms" in match.reason


def test_empty_name_uses_property_fallback():
    match = lookup(props("mi300x", name=""))
    assert match.spec.key == "mi300x" and match.how == PROPERTIES
    # MI325X shares (9.4, 304 SMs): only memory tells them apart.
    assert lookup(props("mi300x", name="", totalGlobalMem=256 * GIB)).spec.key == "mi325x"
    assert lookup(props("mi300x", name="", totalGlobalMem=128 * GIB)).spec is None


def test_mi300x_virtual_function_name():
    assert lookup(props("mi300x", name="AMD Instinct MI300X VF", totalGlobalMem=205571227648)).spec.key == "mi300x"


def test_generic_name_without_properties_is_unknown():
    match = lookup({"name": "AMD Radeon Graphics"})
    assert match.spec is None and "numSms" in match.reason


def test_generic_name_matching_nothing_is_unknown():
    dev = {"name": "", "computeMajor": 11, "computeMinor": 0, "numSms": 40, "totalGlobalMem": 16 * GIB}
    assert "no GPU in tracekit's database" in lookup(dev).reason


def test_row_with_unknown_memory_keeps_fallback_ambiguous():
    # L40 has no observed totalGlobalMem, so an L40S-like generic device cannot be called L40S.
    match = match_device(props("l40s", name=""), all_specs())
    assert match.spec is None and "'L40'" in match.reason and "'L40S'" in match.reason


def test_named_gpu_missing_from_database_is_not_guessed_from_properties():
    # A V100 PCIe has the V100 SXM2's key but 112, not 125, TFLOP/s: suggest, never map.
    match = lookup(props("v100-sxm2-32gb", name="Tesla V100-PCIE-32GB"))
    assert match.spec is None
    assert "--gpu v100-sxm2-32gb" in match.reason


def test_name_whose_properties_disagree_is_not_trusted():
    match = lookup(props("h100-sxm", name="NVIDIA H100", totalGlobalMem=99961274368))
    assert match.spec is None and "different SKU" in match.reason


def test_driver_memory_variation_is_tolerated():
    assert lookup(props("h100-sxm", totalGlobalMem=84929216512)).spec.key == "h100-sxm"
    assert lookup(props("rtx-4090", totalGlobalMem=25756696576)).spec.key == "rtx-4090"


def test_malformed_properties_do_not_crash():
    dev = {"name": "", "computeMajor": "9", "computeMinor": None, "numSms": 304.5, "totalGlobalMem": True}
    assert lookup(dev).spec is None
    assert lookup({"name": 42}).spec is None


def test_no_device_properties_is_unknown_with_reason():
    match = lookup(None)
    assert match.spec is None and "deviceProperties" in match.reason


# --- round trips over the whole database --------------------------------------------------------


@pytest.mark.parametrize("s", all_specs(), ids=lambda s: s.key)
def test_each_row_is_found_by_its_own_device_names_and_properties(s):
    for name in s.device_names:
        p = {"name": name}
        if s.compute_capability:
            p.update(computeMajor=s.compute_capability[0], computeMinor=s.compute_capability[1])
        if s.num_sms:
            p["numSms"] = s.num_sms
        if s.total_global_mem:
            p["totalGlobalMem"] = s.total_global_mem
        assert lookup(p).spec == s, name


@pytest.mark.parametrize("s", all_specs(), ids=lambda s: s.key)
def test_each_row_is_found_by_gpu_option(s):
    assert spec_by_name(s.key) == s
    assert spec_by_name(s.name) == s
    match = lookup(None, gpu=s.key.upper())
    assert match.spec == s and match.how == "--gpu override"


def test_device_names_are_unique_unless_properties_separate_them():
    by_name: dict[str, list] = {}
    for s in all_specs():
        assert s.device_names == tuple(dict.fromkeys(s.device_names))
        for n in s.device_names:
            assert n.strip().casefold() not in GENERIC_NAMES
            by_name.setdefault(normalise_name(n), []).append(s)
    for name, rows in by_name.items():
        if len(rows) > 1:  # a shared name: each row's (cc, SMs, memory) must be known and distinct
            keys = {(r.compute_capability, r.num_sms, r.total_global_mem) for r in rows}
            assert len(keys) == len(rows) and all(None not in k for k in keys), name


def test_keys_and_display_names_are_unique():
    specs = all_specs()
    assert len({s.key for s in specs}) == len(specs)
    assert len({normalise_name(s.name) for s in specs}) == len(specs)


def test_every_row_has_sources_and_achievable_factors():
    for s in all_specs():
        assert s.sources and s.confidence, s.key
        assert 0 < s.achievable_compute_factor <= 1 and s.compute_factor_source, s.key
        assert 0 < s.achievable_bandwidth_factor <= 1 and s.bandwidth_factor_source, s.key
        assert s.peak_bandwidth and s.peak_basis == "datasheet peak", s.key


def test_unknown_gpu_option_raises_with_suggestions():
    with pytest.raises(TracekitError, match="did you mean 'GH200 \\(96GB\\)', 'GH200 \\(144GB\\)'"):
        lookup(None, gpu="GH200")
    with pytest.raises(TracekitError, match="names several GPUs"):
        spec_by_name("NVIDIA GH200 120GB")
    with pytest.raises(TracekitError, match="not both"):
        lookup(None, gpu="h100-sxm", spec_file="x.json")


# --- peaks --------------------------------------------------------------------------------------


def test_dense_not_sparse_hopper_and_blackwell_peaks():
    h100 = spec("h100-sxm")
    assert h100.peak_flops("c10::BFloat16") == pytest.approx(989.4 * T)
    assert h100.peak_flops("c10::Float8_e4m3fn") == pytest.approx(1978.9 * T)
    assert h100.peak_flops("tf32") == pytest.approx(494.7 * T)
    assert spec("b200").peak_flops("bf16") == pytest.approx(2250 * T)
    assert spec("l4").peak_flops("bf16") == pytest.approx(121 * T)


def test_v100_has_no_bf16_and_says_why():
    v100 = spec("v100-sxm2-32gb")
    assert v100.peak_flops("c10::BFloat16") is None
    assert "unsupported" in v100.no_peak_reason("c10::BFloat16")
    assert v100.peak_flops("c10::Half") == pytest.approx(125 * T)
    assert v100.no_peak_reason("c10::Half") is None


@pytest.mark.parametrize(
    "spelling,dtype",
    [
        ("c10::BFloat16", "bf16"),
        ("c10::Half", "fp16"),
        ("float", "fp32"),
        ("double", "fp64"),
        ("Double", "fp64"),
        ("c10::Float8_e4m3fn", "fp8"),
        ("c10::Float8_e5m2", "fp8"),
        ("signed char", "int8"),
        ("torch.bfloat16", "bf16"),
        ("float32", "fp32"),
        ("long int", None),
        ("unsigned char", None),
        ("Scalar", None),
        ("", None),
    ],
)
def test_dtype_spellings(spelling, dtype):
    assert normalise_dtype(spelling) == dtype


def test_fp32_gemm_runs_on_vector_units_on_nvidia_and_mfma_on_amd():
    assert spec("h100-sxm").peak_flops("float", "matrix") == pytest.approx(67 * T)
    assert spec("mi300x").peak_flops("float", "matrix") == pytest.approx(163.4 * T)
    assert spec("mi210").peak_flops("float", "matrix") == pytest.approx(45.3 * T)
    assert spec("mi210").peak_flops("float", "vector") == pytest.approx(22.6 * T)
    assert spec("v100-sxm2-32gb").peak_flops("double", "matrix") == pytest.approx(7.8 * T)


def test_vector_reduced_precision_uses_fp32_rate():
    h100 = spec("h100-sxm")
    assert h100.peak_flops("c10::BFloat16", "vector") == h100.peak_flops("float", "vector")
    assert h100.peak_flops("signed char", "vector") is None


def test_unknown_dtype_and_bad_unit():
    h100 = spec("h100-sxm")
    assert h100.peak_flops("c10::complex<float>") is None
    assert "no peak rate" in h100.no_peak_reason("c10::complex<float>")
    with pytest.raises(ValueError):
        h100.peak_flops("bf16", "tensor")


def test_ridge_point_and_achievable_ceilings():
    h100 = spec("h100-sxm")
    assert h100.ridge_point("bf16") == pytest.approx(989.4e12 / 3350e9)
    assert h100.achievable_flops("bf16") == pytest.approx(989.4 * T * h100.achievable_compute_factor)
    assert h100.achievable_bandwidth == pytest.approx(3350e9 * h100.achievable_bandwidth_factor)
    assert "x peak" in h100.achievable_flops_basis("bf16")


# --- agreement with the research table -----------------------------------------------------------

PEAK_COLUMNS = {
    ("matrix", "fp64"): "fp64_tensor_tflops",
    ("matrix", "tf32"): "tf32_tflops",
    ("matrix", "fp16"): "fp16_tflops",
    ("matrix", "bf16"): "bf16_tflops",
    ("matrix", "fp8"): "fp8_tflops",
    ("matrix", "int8"): "int8_tops",
    ("matrix", "fp4"): "fp4_tflops",
    ("vector", "fp64"): "fp64_tflops",
    ("vector", "fp32"): "fp32_tflops",
}


def research_rows() -> list[dict]:
    if not RESEARCH_CSV.exists():
        pytest.skip(f"research table {RESEARCH_CSV} is absent (../shared is not beside this checkout)")
    with open(RESEARCH_CSV, newline="") as f:
        return list(csv.DictReader(f))


def test_every_research_row_is_in_the_database():
    rows = research_rows()
    assert len(rows) == 29
    names = {s.name for s in all_specs()}
    assert {r["gpu"] for r in rows} <= names


def test_database_agrees_with_research_table_on_every_number():
    by_name = {s.name: s for s in all_specs()}
    for r in research_rows():
        s = by_name[r["gpu"]]
        for (unit, dtype), column in PEAK_COLUMNS.items():
            stored = (s.matrix_flops if unit == "matrix" else s.vector_flops).get(dtype)
            expected = float(r[column]) * T if r[column] else None
            assert stored == pytest.approx(expected), (s.key, column)
        # The only peak not in the table is an FP32 GEMM's own matrix rate on AMD (MFMA).
        extra = set(s.matrix_flops) - {d for u, d in PEAK_COLUMNS if u == "matrix"}
        assert extra <= ({"fp32"} if s.vendor == "AMD" else set()), s.key
        assert set(s.vector_flops) <= {d for u, d in PEAK_COLUMNS if u == "vector"}, s.key
        assert s.peak_bandwidth == pytest.approx(float(r["mem_bw_GBps"]) * 1e9), s.key
        assert s.compute_capability == (int(r["computeMajor"]), int(r["computeMinor"])), s.key
        assert s.num_sms == (int(r["numSms"]) if r["numSms"] else None), s.key
        assert s.total_global_mem == (int(r["totalGlobalMem_bytes"]) if r["totalGlobalMem_bytes"] else None), s.key
        assert s.sources == r["spec_sources"] and s.confidence == r["confidence"], s.key
        if r["torch_device_name"] and s.key != "b100":
            assert r["torch_device_name"] in s.device_names, s.key


# --- user spec files ----------------------------------------------------------------------------

GOOD_SPEC = {
    "name": "My Accelerator",
    "vendor": "Acme",
    "memory_bandwidth_GBps": 1000,
    "matrix_tflops": {"bf16": 200},
    "vector_tflops": {"fp32": 20},
    "achievable": {"compute": 0.7, "compute_source": "our GEMM sweep", "bandwidth": 0.85, "bandwidth_source": "stream"},
}


def test_user_spec_file_overrides_the_trace(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(GOOD_SPEC))
    match = lookup(props("h100-sxm"), spec_file=str(path))
    assert match.how == "user spec file"
    s = match.spec
    assert s.name == "My Accelerator" and s.key == "my-accelerator"
    assert s.peak_flops("bf16") == pytest.approx(200 * T) and s.peak_bandwidth == pytest.approx(1e12)
    assert s.peak_basis == "user spec file mine.json"
    assert s.achievable_flops("bf16") == pytest.approx(140 * T)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="TOML spec files need tomllib (Python 3.11+)")
def test_user_spec_file_in_toml(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('name = "Tiny"\nmemory_bandwidth_GBps = 100\n[matrix_tflops]\nbf16 = 10.5\n')
    assert load_spec_file(path).peak_flops("bf16") == pytest.approx(10.5 * T)


@pytest.mark.parametrize(
    "content,message",
    [
        ("{not json", "is not valid JSON"),
        (json.dumps({**GOOD_SPEC, "memory_bandwidth_GBps": "fast"}), "memory_bandwidth_GBps"),
        (json.dumps({**GOOD_SPEC, "matrix_tflops": {"bf17": 1}}), "unknown dtype 'bf17'"),
        (json.dumps({**GOOD_SPEC, "peak_tflops": 1}), "peak_tflops"),
        (json.dumps({"name": "empty"}), "gives no peak"),
        (json.dumps({**GOOD_SPEC, "achievable": {"compute": 1.5}}), "achievable.compute"),
        (json.dumps([GOOD_SPEC, GOOD_SPEC]), "not a valid GPU spec"),
    ],
)
def test_bad_user_spec_file_is_one_clear_error(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(TracekitError) as e:
        load_spec_file(path)
    assert str(path) in e.value.message and message in e.value.message
    assert "\n" not in e.value.message


def test_missing_user_spec_file(tmp_path):
    with pytest.raises(TracekitError, match="cannot be read"):
        load_spec_file(tmp_path / "absent.json")


# --- measured ceilings (CPU traces, GPU calibration) -------------------------------------------

# As tracekit.collect.calibrate writes it (short dtype names, read + write copy bandwidth).
CPU_SIDECAR = {
    "calibration": {
        "device": "cpu",
        "device_name": "AMD EPYC 7B13",
        "dtype": "fp32",
        "matmul_flops": {"fp32": 1.2e11, "bfloat16": 3e10},
        "copy_bandwidth": 1.5e10,
        "method": "best of several bursts of torch.mm",
    }
}


def test_cpu_spec_from_sidecar():
    s = cpu_spec_from_sidecar(CPU_SIDECAR)
    assert s.name == "AMD EPYC 7B13" and s.peak_basis == "measured on this machine"
    assert s.sources == "best of several bursts of torch.mm"
    assert s.peak_flops("float") == pytest.approx(1.2e11)
    assert s.peak_flops("c10::BFloat16") == pytest.approx(3e10)
    assert s.peak_bandwidth == pytest.approx(1.5e10)
    assert s.achievable_flops("float") == s.peak_flops("float")
    assert s.peak_flops("double") is None and "measured on this machine" in s.no_peak_reason("double")


def test_cpu_lookup_order_and_reason():
    assert cpu_lookup(CPU_SIDECAR).spec.name == "AMD EPYC 7B13"
    from_options = cpu_lookup(CPU_SIDECAR, matmul_flops={"float32": 5e10}, bandwidth=2e10)
    assert from_options.spec.peak_flops("float") == pytest.approx(5e10)
    missing = cpu_lookup({})
    assert missing.spec is None and "tracekit collect" in missing.reason
    assert cpu_spec_from_sidecar({}) is None
    assert cpu_spec_from_sidecar({"calibration": None}) is None  # collect --no-calibrate


def test_malformed_calibration_is_one_clear_error():
    with pytest.raises(TracekitError, match="calibration"):
        cpu_spec_from_sidecar({"calibration": {"device": "cpu", "matmul_flops": {"float32": "fast"}}})


def test_gpu_calibration_becomes_the_achievable_ceiling():
    h100 = spec("h100-sxm")
    sidecar = {"calibration": {"matmul_flops": {"bf16": 7.5e14}, "copy_bandwidth": 3.0e12, "device": "cuda"}}
    measured = with_calibration(h100, sidecar)
    assert measured.peak_flops("bf16") == h100.peak_flops("bf16")
    assert measured.achievable_flops("c10::BFloat16") == pytest.approx(7.5e14)
    assert measured.achievable_bandwidth == pytest.approx(3.0e12)
    assert "measured on this machine" in measured.achievable_flops_basis("bf16")
    assert measured.achievable_flops("fp16") == pytest.approx(989.4 * T * h100.achievable_compute_factor)
    assert with_calibration(h100, CPU_SIDECAR) == h100


# --- CLI ----------------------------------------------------------------------------------------


def test_cli_lists_every_row():
    from tracekit.cli.gpus import command

    result = CliRunner().invoke(command, [])
    assert result.exit_code == 0, result.output
    for s in all_specs():
        assert s.name in result.output and s.key in result.output
    assert "989.4" in result.output  # H100 dense bf16


def test_cli_json_lists_every_row_in_si_units():
    from tracekit.cli.gpus import command

    result = CliRunner().invoke(command, ["--json"])
    assert result.exit_code == 0
    rows = json.loads(result.output)
    assert [r["key"] for r in rows] == [s.key for s in all_specs()]
    h100 = next(r for r in rows if r["key"] == "h100-sxm")
    assert h100["peak_flops"]["matrix"]["bf16"] == pytest.approx(989.4 * T)


def test_cli_match():
    from tracekit.cli.gpus import command

    found = CliRunner().invoke(command, ["--match", "NVIDIA L4"])
    assert found.exit_code == 0 and "-> L4 (l4), by exact name" in found.output
    unknown = CliRunner().invoke(command, ["--match", "NVIDIA Z900 Imaginary", "--json"])
    view = json.loads(unknown.output)
    assert view["known"] is False and "not in tracekit's GPU database" in view["reason"]


def test_low_precision_peaks_where_the_architecture_has_them():
    """FP8 tensor cores since Ada/Hopper (8.9) and CDNA3; FP4 since Blackwell (10.0) and CDNA4:
    every such row gives the dense peak, so quantised GEMMs are priced at their own rate."""
    for s in all_specs():
        cc = s.compute_capability
        if cc is None:
            continue
        if s.vendor == "NVIDIA":
            fp8, fp4 = cc >= (8, 9), cc >= (10, 0)
        else:
            fp8, fp4 = cc >= (9, 4), cc >= (9, 5)
        if fp8:
            assert "fp8" in s.matrix_flops, s.key
        if fp4:
            assert "fp4" in s.matrix_flops, s.key
        if "fp4" in s.matrix_flops and "fp8" in s.matrix_flops:
            assert s.matrix_flops["fp4"] >= s.matrix_flops["fp8"], s.key


def test_interconnect_bandwidth_is_per_direction_with_a_source():
    for s in all_specs():
        if s.interconnect_bandwidth is not None:
            assert s.interconnect and s.provenance.get("interconnect_source"), s.key
            # NVIDIA quotes both directions added; the row stores one: below 1 TB/s up to NVLink 5.
            assert 0 < s.interconnect_bandwidth <= 1.0e12, s.key
    assert spec("h100-sxm").interconnect_bandwidth == pytest.approx(450e9)
    assert spec("b200").interconnect_bandwidth == pytest.approx(900e9)
