"""GPU spec lookup edge cases that survivors of the mutation campaign (benchmarks/mutation.py)
showed untested: zero peaks in spec files, garbled deviceProperties fields, MIG slices
claiming more memory than their parent, architecture tags in kernel names, and the labels
of CPU peaks given as options; later, the unknown-key sentence's wording, zero bandwidths,
the wider-dtype pricing note, and which calibrations are a CPU's. Expected values are format facts (sm90 is compute capability
9.0, an H100 has 132 SMs and 80 GB) or hand arithmetic, never the code's own output."""

from __future__ import annotations

import json

import pytest
from conftest import read_real

from tracekit.errors import TracekitError
from tracekit.specs import cpu_entry, cpu_lookup, load_spec_file, lookup, measured_spec, spec_by_name, with_calibration
from tracekit.specs.identify import architecture, identify
from tracekit.specs.measured import MEASURED

GIB = 1 << 30
# The H100 SXM as a trace's deviceProperties carry it (h100_hf in ../shared/traces).
H100 = {
    "name": "NVIDIA H100 80GB HBM3",
    "computeMajor": 9,
    "computeMinor": 0,
    "numSms": 132,
    "totalGlobalMem": 85018279936,
}
SPEC = {
    "name": "My Accelerator",
    "vendor": "Acme",
    "memory_bandwidth_GBps": 1000,
    "matrix_tflops": {"bf16": 200},
    "vector_tflops": {"fp32": 20},
}


# --- user spec files --------------------------------------------------------------------------


@pytest.mark.parametrize("unit", ["matrix_tflops", "vector_tflops"])
def test_zero_peak_in_a_spec_file_is_rejected(tmp_path, unit):
    """catches: a zero peak accepted in a user spec file (every kernel would then be 'infinitely slow')."""
    path = tmp_path / "zero.json"
    path.write_text(json.dumps({**SPEC, unit: {"bf16": 0}}))
    with pytest.raises(TracekitError) as e:
        load_spec_file(path)
    assert f"{unit}.bf16 must be positive" in e.value.message


# --- garbled deviceProperties fields ------------------------------------------------------------


@pytest.mark.parametrize(
    "field,garbled",
    [("computeMajor", "9"), ("computeMinor", 0.5), ("numSms", "132"), ("totalGlobalMem", "85018279936")],
)
def test_non_integer_property_counts_as_absent_and_the_name_decides(field, garbled):
    """catches: deviceProperties values that are not whole numbers (strings, floats) taken as
    identifying fields, which makes an H100 'disagree' with its own row or crashes the lookup."""
    match = lookup({**H100, field: garbled})
    assert match.spec is not None and match.spec.key == "h100-sxm"


@pytest.mark.parametrize("field", ["numSms", "multiProcessorCount"])
def test_zero_sm_count_is_ignored_as_garbled(field):
    """catches: 0 SMs treated as a plausible SM count, so a real H100 looks like another SKU."""
    dev = {k: v for k, v in H100.items() if k != "numSms"}
    match = lookup({**dev, field: 0})
    assert match.spec is not None and match.spec.key == "h100-sxm"
    assert any(f"{field} 0 is no GPU's SM count" in n for n in match.notes)


def test_zero_num_sms_beside_a_good_multiprocessor_count_lets_that_count_stand():
    """catches: numSms 0 taken as a value that contradicts multiProcessorCount 132 (then neither counts)."""
    match = lookup({**H100, "numSms": 0, "multiProcessorCount": 132})
    assert match.spec.key == "h100-sxm"
    assert any("multiProcessorCount's 132 stands" in n for n in match.notes)
    assert not any("contradict" in n for n in match.notes)


# --- MIG slices ---------------------------------------------------------------------------------


def test_mig_slice_with_more_memory_than_its_parent_is_not_trusted():
    """catches: a loose 'slice fits its parent' memory check: a MIG slice of an 80 GB H100 that
    claims 160 GiB is no slice of that part."""
    dev = {
        "name": "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
        "computeMajor": 9,
        "computeMinor": 0,
        "numSms": 60,
        "totalGlobalMem": 160 * GIB,
    }
    match = lookup(dev)
    assert match.spec is None and "160.0 GiB of memory" in match.reason


def test_mig_slice_a_little_over_its_parent_memory_within_driver_tolerance_fits():
    """catches: the slice memory check losing its driver tolerance (reported memory varies ~2%)."""
    dev = {
        "name": "NVIDIA H100 80GB HBM3 MIG 7g.80gb",
        "computeMajor": 9,
        "computeMinor": 0,
        "numSms": 132,
        "totalGlobalMem": int(85018279936 * 1.02),
    }
    assert lookup(dev).spec.key == "h100-sxm-mig-7g.80gb"


# --- architecture tags in kernel names ----------------------------------------------------------


@pytest.mark.parametrize(
    "names,expected",
    [
        (["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"], ("NVIDIA", "sm_90", (9, 0))),
        (["cutlass_80_tensorop_s16816gemm_bf16_128x128_32x4_nn_align8"], ("NVIDIA", "sm_80", (8, 0))),
        (["nvjet_sm100_tst_128x8", "sm90_xmma_gemm"], ("NVIDIA", "sm_100", (10, 0))),
        (["kernel_sm_20_legacy"], None),  # below any architecture tracekit knows: unrelated digits
    ],
)
def test_architecture_tags(names, expected):
    """catches: NVIDIA sm/cutlass tags of real architectures skipped (or tiny numbers read as one)."""
    assert architecture(names) == expected


def test_unidentified_h100_trace_is_narrowed_by_its_kernels_architecture():
    """catches: the sm90 tags of a real H100 trace's kernels ignored, so the reason cannot name
    the Hopper parts to choose from."""
    trace = read_real("h100_hf")
    names = [str(n) for n in trace.kernels["name"].unique()]
    match = identify(None, None, names)
    assert match.spec is None
    # The trace's own deviceProperties say compute capability 9.0: an H100 SXM part.
    assert "built for sm_90" in match.reason and "--gpu h100-sxm" in match.reason
    assert "--gpu a100-sxm4-80gb" not in match.reason  # an Ampere part cannot run sm90 code


@pytest.mark.parametrize(
    "kernel,key",
    [
        ("sm75_xmma_gemm_f16f16_f16f32_f32_tn_n", "t4"),  # Turing 7.5: T4
        ("nvjet_sm121_tst_64x8_kernel", "gb10"),
    ],
)  # DGX Spark's GB10 is 12.1
def test_generic_name_is_identified_by_the_only_part_of_its_architecture(kernel, key):
    """catches: the kernel-name fallback dead for NVIDIA: an architecture with one database row is that row."""
    match = identify({"name": ""}, None, [kernel])
    assert match.spec is not None and match.spec.key == key
    assert "architecture tag sm_" in match.how


# --- CPU peaks given as options -----------------------------------------------------------------


def test_cpu_peaks_given_as_options_are_not_labelled_measured():
    """catches: peaks the user typed (--cpu-flops / --cpu-bandwidth) labelled 'measured on this
    machine' in the achievable-ceiling basis."""
    spec = cpu_lookup(None, matmul_flops={"fp32": 5e10}, bandwidth=2e10).spec
    assert spec.achievable_flops_basis("fp32", "vector") == "1 x peak (peaks given as options)"
    assert spec.achievable_bandwidth_basis == "1 x peak (peaks given as options)"
    assert "measured" not in spec.compute_factor_source and "measured" not in spec.bandwidth_factor_source


# --- a CPU's measured ceilings written as a spec file -------------------------------------------


def test_cpu_entry_written_and_loaded_gives_the_measured_rates_as_peaks(tmp_path):
    """catches: the sidecar's FLOP/s turned into the spec file's TFLOP/s wrongly (anything but
    a division by 10^12), so a CPU projected onto another CPU's file gets peaks off by orders
    of magnitude (or negative ones the loader rejects)."""
    # A tracekit collect calibration: 250 GFLOP/s fp32 matmul, 15 GB/s copy.
    cal = {"matmul_flops": {"fp32": 2.5e11}, "copy_bandwidth": 1.5e10, "device": "cpu"}
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(cpu_entry(cal, "CPU 2 threads")))
    spec = load_spec_file(path)
    assert spec.name == "CPU 2 threads"
    # 2.5e11 FLOP/s = 0.25 TFLOP/s in the file, read back as 2.5e11 FLOP/s, both units.
    assert spec.peak_flops("fp32", "matrix") == pytest.approx(2.5e11)
    assert spec.peak_flops("fp32", "vector") == pytest.approx(2.5e11)
    assert spec.peak_bandwidth == pytest.approx(1.5e10)


# --- measured matmul rates on a GPU: matrix work only -------------------------------------------


def test_measured_matmul_rate_is_no_ceiling_for_vector_work(tmp_path):
    """catches: a GPU's measured matmul FLOP/s (tracekit collect) used as the achievable ceiling
    of vector (elementwise) work too, which runs on other units at another peak; the label
    would still say '0.5 x peak' while the figure is the measured matmul rate."""
    path = tmp_path / "acc.json"
    path.write_text(json.dumps({**SPEC, "matrix_tflops": {"bf16": 200, "fp32": 40}, "achievable": {"compute": 0.5}}))
    sidecar = {
        "calibration": {"matmul_flops": {"fp32": 15e12, "bf16": 150e12}, "copy_bandwidth": 8e11, "device": "cuda:0"}
    }
    spec = with_calibration(load_spec_file(path), sidecar)
    # Matrix work: the measured rates.
    assert spec.achievable_flops("bf16") == pytest.approx(150e12)
    assert spec.achievable_flops("fp32", "matrix") == pytest.approx(15e12)
    # Vector fp32: the file's 20 TFLOP/s vector peak x 0.5 = 10 TFLOP/s, not the measured 15.
    assert spec.achievable_flops("fp32", "vector") == pytest.approx(10e12)
    assert spec.achievable_flops_basis("fp32", "vector").startswith("0.5 x peak")


# --- --gpu NAME suggestions -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,suggested",
    [
        # "sxm4" is in these rows' keys (a100-sxm4-40gb, ...), not in their display names.
        ("sxm4", "did you mean 'A100 40GB SXM', 'A100 80GB SXM', 'A800 80GB SXM'?"),
        # "DGX Spark" is in the GB10's display name, not in its key (gb10).
        ("DGX Spark", "did you mean 'GB10 (DGX Spark)'?"),
    ],
)
def test_unknown_gpu_option_suggests_rows_matching_key_or_name(name, suggested):
    """catches: --gpu suggestions requiring the text in both a row's key and its display name,
    so a key fragment (sxm4) or a name fragment (DGX Spark) suggests nothing."""
    with pytest.raises(TracekitError) as e:
        spec_by_name(name)
    assert "is not in tracekit's GPU database" in e.value.message
    assert suggested in e.value.message


# --- spec file keys and limits the error sentence names -------------------------------------------


def _load_error(path) -> str:
    with pytest.raises(TracekitError) as e:
        load_spec_file(path)
    return e.value.message


@pytest.mark.parametrize(
    "keys,opening",
    [
        (["bandwith"], "unknown key 'bandwith'"),
        (["bandwith", "clock"], "unknown keys 'bandwith'"),
    ],
)
def test_unknown_keys_are_counted_in_the_sentence(tmp_path, keys, opening):
    """catches: the error sentence saying 'unknown key' of two unknown keys (or 'keys' of one)."""
    path = tmp_path / "typos.json"
    path.write_text(json.dumps({**SPEC, **{k: 1 for k in keys}}))
    message = _load_error(path)
    assert opening in message
    assert ("unknown keys" in message) == (len(keys) > 1)


def test_accepted_keys_say_peak_tables_take_dtypes_and_provenance_takes_text(tmp_path):
    """catches: the accepted-keys list swapping its placeholders, telling the user that
    matrix_tflops takes free text and provenance takes a dtype (the reverse of what loads)."""
    path = tmp_path / "typo.json"
    path.write_text(json.dumps({**SPEC, "bandwith": 1}))
    message = _load_error(path)
    assert "matrix_tflops.<dtype>, vector_tflops.<dtype>" in message
    assert "provenance.<text>" in message
    assert "matrix_tflops.<text>" not in message and "provenance.<dtype>" not in message
    # What the placeholders promise: a provenance note under any name loads; a peak needs a dtype.
    path.write_text(json.dumps({**SPEC, "provenance": {"where I read it": "vendor datasheet"}}))
    assert load_spec_file(path).name == "My Accelerator"


@pytest.mark.parametrize("key", ["memory_bandwidth_GBps", "interconnect_GBps"])
def test_zero_bandwidth_in_a_spec_file_is_rejected(tmp_path, key):
    """catches: a zero memory or interconnect bandwidth accepted in a user spec file (a
    zero-bandwidth device: every byte moved would take forever)."""
    path = tmp_path / "zero.json"
    path.write_text(json.dumps({**SPEC, key: 0}))
    assert f"{key} must be positive" in _load_error(path)


def test_spec_file_with_compute_peaks_only_loads(tmp_path):
    """catches: a spec file without memory_bandwidth_GBps (it is optional: compute peaks alone
    suffice) refused or crashing in the bandwidth check."""
    path = tmp_path / "compute.json"
    path.write_text(json.dumps({"name": "Compute Only", "matrix_tflops": {"bf16": 200}}))
    spec = load_spec_file(path)
    assert spec.peak_bandwidth is None
    assert spec.peak_flops("bf16") == pytest.approx(200e12)  # 200 TFLOP/s


# --- work priced at a wider dtype's peak --------------------------------------------------------


@pytest.mark.parametrize("dtype,used", [("fp8", "bf16"), ("fp4", "bf16")])
def test_a100_fp8_and_fp4_work_carries_the_wider_peak_it_was_priced_at(dtype, used):
    """catches: the 'priced at bf16 peak' note dropped for fp8 work on an A100 (Ampere tensor
    cores have no FP8 or FP4: the next wider dtype it has is bf16), so a figure divides by the bf16
    peak without saying so."""
    a100 = spec_by_name("a100-sxm4-80gb")
    assert a100.runs_as(dtype) == used
    assert a100.runs_as_note(dtype) == f"priced at {used} peak: A100 80GB SXM has no {dtype} matrix peak"
    assert a100.runs_as_note("bf16") is None and a100.runs_as_note("int8") is None  # own peaks (624 TOPS int8)


# --- architecture tags: boundaries and vendors ---------------------------------------------------


@pytest.mark.parametrize(
    "names,expected",
    [
        (["gemm_kernel_sm_29_x"], None),  # no GPU is compute capability 2.9 (Fermi ended at 2.1)
        (["gemm_kernel_sm_30_x"], ("NVIDIA", "sm_30", (3, 0))),  # Kepler GK104 is 3.0
    ],
)
def test_architecture_tag_boundary(names, expected):
    """catches: the lower bound of NVIDIA tags moved, so sm_29 digits read as an architecture."""
    assert architecture(names) == expected


class _Placed(str):
    """A kernel name with a fixed hash: architecture() reads names from a set, and small distinct
    hashes put them in a fresh set in hash order, so a test can pin which name comes first."""

    def __new__(cls, text: str, place: int):
        name = super().__new__(cls, text)
        name.place = place
        return name

    def __hash__(self) -> int:
        return self.place


# A hipBLASLt GEMM of the MI300X extend trace (ISA942 = gfx942), shortened.
_MI300X_GEMM = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_ISA942_IU1_K1"


@pytest.mark.parametrize("amd_first", [True, False])
def test_amd_tag_outranks_nvidia_looking_digits_in_any_order(amd_first):
    """catches: an NVIDIA-looking 'sm100' in one name replacing the AMD gfx942 tag already
    found when that name happens to be read after the AMD one (set order): an MI300X trace
    then reads as Blackwell."""
    amd, nvidia = (1, 2) if amd_first else (2, 1)
    names = [_Placed(_MI300X_GEMM, amd), _Placed("my_fused_kernel_sm100_variant", nvidia)]
    assert [str(n) for n in set(names)][0] == (_MI300X_GEMM if amd_first else "my_fused_kernel_sm100_variant")
    assert architecture(names) == ("AMD", "gfx942", (9, 4))


# --- measured ceilings ---------------------------------------------------------------------------


def test_calibration_without_a_device_is_no_cpu_measurement():
    """catches: a calibration block that does not say it ran on the CPU (device absent) taken
    as the CPU's measured peaks; only device 'cpu' is a CPU's."""
    cal = {"matmul_flops": {"fp32": 2.5e11}, "copy_bandwidth": 1.5e10}
    match = cpu_lookup({"calibration": cal})
    assert match.spec is None and "--cpu-flops" in match.reason
    assert cpu_lookup({"calibration": {**cal, "device": "CPU"}}).spec is not None  # the case is free


def test_measured_spec_with_another_basis_labels_both_ceilings_with_it():
    """catches: a caller's own basis (measured_spec basis=...) replaced by 'measured on this
    machine' in the bandwidth ceiling's label while the compute label keeps it."""
    basis = "from the vendor's stream benchmark"
    spec = measured_spec("My CPU", {"fp32": 1e11}, 2e10, basis=basis)
    assert spec.compute_factor_source == basis and spec.bandwidth_factor_source == basis
    assert spec.achievable_bandwidth_basis == f"1 x peak ({basis})"


# --- seed 30 (r5s) ---------------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["compute", "bandwidth"])
def test_zero_achievable_fraction_in_a_spec_file_is_rejected(tmp_path, what):
    """catches: an achievable fraction of 0 accepted in a user spec file (its ceiling would be
    0 FLOP/s or 0 B/s: every kernel infinitely far from it); the valid range is (0, 1]."""
    path = tmp_path / "zero_achievable.json"
    path.write_text(json.dumps({**SPEC, "achievable": {what: 0}}))
    assert f"achievable.{what} must be in (0, 1]" in _load_error(path)
    # 1 (the datasheet peak itself) is the top of the range and loads.
    path.write_text(json.dumps({**SPEC, "achievable": {what: 1}}))
    assert load_spec_file(path).name == "My Accelerator"


def test_unreadable_spec_file_sentence_gives_the_os_reason_only(tmp_path):
    """catches: the unreadable-file sentence giving the whole OSError text ("[Errno 2] No such
    file or directory: '...'", the path twice) instead of the OS's reason after the path."""
    import errno
    import os

    path = tmp_path / "missing.json"
    assert _load_error(path) == f"GPU spec file {path} cannot be read: {os.strerror(errno.ENOENT)}"


# --- seed 31 ---------------------------------------------------------------------------------------


def test_disagreeing_memory_names_the_rows_memory_in_gib():
    """catches: the row's memory in the 'deviceProperties disagree' sentence multiplied, not divided,
    by 2^30 bytes, so the user reads an absurd GiB figure for the part the name points at."""
    match = lookup({**H100, "totalGlobalMem": 40 * GIB})
    assert match.spec is None
    # The H100 SXM row's totalGlobalMem 85018279936 B / 2^30 = 79.18 GiB, one decimal: 79.2.
    assert "40.0 GiB of memory, not 79.2 GiB" in match.reason


def test_measured_basis_equal_to_the_default_gives_the_defaults_spec():
    """catches: measured_spec telling its basis apart from 'measured on this machine' by identity
    (`is`) instead of equality: a caller's equal basis built at run time (read from a file, joined)
    then gets the bare basis as its bandwidth label while the compute label says collect measured it."""
    basis = " ".join(["measured", "on", "this", "machine"])
    assert basis == MEASURED and basis is not MEASURED
    spec = measured_spec("My CPU", {"fp32": 1e11}, 2e10, basis=basis)
    # The same words as the default basis: the same spec, both labels included.
    assert spec == measured_spec("My CPU", {"fp32": 1e11}, 2e10)
    assert spec.bandwidth_factor_source == spec.compute_factor_source


# --- seed 32 ---------------------------------------------------------------------------------------


def test_amd_architecture_tag_names_only_parts_of_that_gfx_id():
    """catches: an AMD gfx tag matched to every part of an older or equal compute capability
    (`<=` for `==`), so a gfx942 (MI300-series, CDNA3) trace was offered the gfx90a MI210 and
    MI250s too, whose GPUs cannot run gfx942 code objects: AMD code runs only on its own gfx id."""
    match = identify(None, None, [_MI300X_GEMM])
    assert match.spec is None
    # gfx942 is compute capability 9.4: the MI300X, MI325X and MI300A rows, none of the 9.0 (gfx90a) ones.
    assert "built for gfx942 (MI300X, MI325X, MI300A in tracekit's database)" in match.reason
    assert "pass --gpu mi300x or --gpu mi325x or --gpu mi300a" in match.reason
    assert "MI210" not in match.reason and "MI250" not in match.reason


def test_cpu_peak_given_alone_as_an_option_is_used():
    """catches: peaks given as options used only when both --cpu-flops and --cpu-bandwidth are
    given (`and` for `or`), so a user's one option was dropped: with no sidecar the trace got no
    spec at all, and with a calibrated sidecar the measured figure replaced the one the user typed."""
    match = cpu_lookup(None, bandwidth=2e10)
    assert match.how == "peaks given as options"
    assert match.spec is not None and match.spec.peak_bandwidth == 2e10 and match.spec.matrix_flops == {}
    sidecar = {"calibration": {"device": "cpu", "matmul_flops": {"fp32": 2.5e11}, "copy_bandwidth": 1.5e10}}
    match = cpu_lookup(sidecar, matmul_flops={"fp32": 5e10})
    assert match.how == "peaks given as options"
    # The user's 5e10 FLOP/s, not the sidecar's measured 2.5e11; no bandwidth was given.
    assert match.spec.matrix_flops == {"fp32": 5e10} and match.spec.peak_bandwidth is None


# --- seed 33 ---------------------------------------------------------------------------------------


def test_a_gpu_spec_is_hashable_with_its_provenance():
    """catches: the provenance mapping taken into GpuSpec's hash (hash=True for hash=False): it is
    a read-only mappingproxy, which has no hash, so hashing any spec (a set of specs, a dict or
    cache keyed by spec) raised TypeError. Equal specs still hash alike, whatever their provenance."""
    spec = spec_by_name("h100-sxm")
    assert spec.provenance  # the database row says where its figures came from
    assert hash(spec) == hash(spec_by_name("h100-sxm"))
    assert len({spec, spec_by_name("h100-sxm"), spec_by_name("a100-sxm4-80gb")}) == 2


def test_lookup_takes_the_device_by_name_and_its_overrides_only_by_name():
    """catches: lookup's keyword-only marker turned positional-only (`/` for `*`): the documented
    `device_props=` keyword was refused (TypeError), and a second positional argument was read as
    the --gpu override, so lookup(props, "h100-sxm") silently priced against a GPU nobody chose."""
    # The H100 SXM deviceProperties (132 SMs, 80 GB, compute capability 9.0) name the h100-sxm row.
    assert lookup(device_props=H100).spec.key == "h100-sxm"
    with pytest.raises(TypeError):
        lookup(H100, "a100-sxm4-80gb")


def _factors_doc(compute) -> dict:
    from importlib import resources

    doc = json.loads(resources.files("tracekit.specs").joinpath("category_factors.json").read_text())
    doc["classes"][0]["factors"]["gemm"]["compute"] = compute
    return doc


def test_category_factor_triple_of_four_figures_is_refused_by_name():
    """catches: a factor figure accepted with three or more numbers (`>=` for `==`): four numbers
    then failed unpacking with Python's "too many values to unpack" instead of the sentence that
    names the figure and its [low, central, high] form."""
    from tracekit.specs import factors

    doc = _factors_doc([0.5, 0.6, 0.7, 0.8])
    key = doc["classes"][0]["key"]
    with pytest.raises(ValueError, match=rf"^{key}\.gemm\.compute must be \[low, central, high\]$"):
        factors.parse(doc)
    factors.parse(_factors_doc([0.5, 0.6, 0.7]))  # three figures in order: accepted


def test_category_factor_central_above_high_is_refused():
    """catches: the central <= high check lost (`c is not hi` for `c <= hi`): [0.3, 0.9, 0.6] (central
    90% above its 60% high) was accepted, a range whose central estimate lies outside it."""
    from tracekit.specs import factors

    doc = _factors_doc([0.3, 0.9, 0.6])
    with pytest.raises(ValueError, match=r"must satisfy 0 < low <= central <= high <= 1"):
        factors.parse(doc)
    factors.parse(_factors_doc([0.3, 0.6, 0.6]))  # central == high is a valid (one-sided) range


# --- seed 34 and 35 --------------------------------------------------------------------------------


def test_measured_spec_takes_its_arguments_by_name_and_the_rest_only_by_name():
    """catches: measured_spec's keyword-only marker turned positional-only (`/` for `*`): the
    public function then refused its own parameter names (TypeError for device_name=...), and a
    fourth positional argument was taken as the basis instead of being refused."""
    by_name = measured_spec(device_name="My CPU", matmul_flops={"fp32": 1e11}, bandwidth=2e10)
    assert by_name == measured_spec("My CPU", {"fp32": 1e11}, 2e10)
    with pytest.raises(TypeError):
        measured_spec("My CPU", {"fp32": 1e11}, 2e10, "from a guess")


def test_an_unknown_dtype_in_a_spec_file_is_answered_with_the_nearest_known_one(tmp_path):
    """catches: the hint's match taken past the one difflib returns (`close[1]`: an IndexError in
    place of the sentence). A matrix peak keyed 'bf61' is a transposed 'bf16'."""
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"name": "Mine", "memory_bandwidth_GBps": 1000, "peak_flops.matrix.bf61": 1e15}))
    with pytest.raises(TracekitError) as e:
        load_spec_file(path)
    assert e.value.message.endswith(
        "key 'peak_flops.matrix.bf61' has unknown dtype 'bf61' (known: fp64, tf32, "
        "fp32, fp16, bf16, fp8, int8, fp4); did you mean 'bf16'?"
    ), e.value.message


@pytest.mark.parametrize("low", [0, -0.2])
def test_a_category_factor_of_no_or_negative_low_figure_is_refused(low):
    """catches: the low figure's `0 <` test lost (`0 is not lo`: True for every float), so a
    factor range starting at 0 or below was accepted: a kernel projected at no fraction of the
    roof takes forever, and a negative one a negative time."""
    from tracekit.specs import factors

    with pytest.raises(ValueError, match=r"must satisfy 0 < low <= central <= high <= 1"):
        factors.parse(_factors_doc([low, 0.5, 0.7]))
    factors.parse(_factors_doc([0.01, 0.5, 0.7]))


def test_nominal_memory_fits_at_both_ends_of_its_observed_range():
    """catches: either end of the nominal-memory range made exclusive (`<` for `<=`). A row that
    knows only a nominal 100 GB fits a device reporting 88 GiB (0.88, the low end, as GDDR parts
    with ECC report) and 103 GiB (1.03, the high end), and not 87 or 104 GiB."""
    import dataclasses

    from tracekit.specs.lookup import GIB, NOMINAL_MEMORY_RANGE, _memory_fits

    assert NOMINAL_MEMORY_RANGE == (0.88, 1.03)
    row = dataclasses.replace(spec_by_name("h100-sxm"), total_global_mem=None, memory_gb=100)
    assert [_memory_fits(row, g * GIB) for g in (87, 88, 103, 104)] == [False, True, True, False]
