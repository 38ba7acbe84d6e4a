"""Re-apply the six bugs issue #27 found surviving the suite, one at a time, run the tests that
now catch each, and restore the file: ``python benchmarks/issue27_bugs.py`` prints CAUGHT or
SURVIVED per bug with the first failure line, and exits non-zero if any survives. Edits the
working tree in place (restored in a ``finally``): run it on a clean checkout, not beside edits."""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PY = sys.executable
MUTANTS = [
    (
        "mixed share swapped",
        "tracekit/analysis/pricing/model_costs.py",
        "tok_share = sides[PREFILL].tokens / (sides[PREFILL].tokens + sides[DECODE].tokens)",
        "tok_share = sides[DECODE].tokens / (sides[PREFILL].tokens + sides[DECODE].tokens)",
        ["tests/test_models.py::test_mixed_steps_split_by_the_model"],
    ),
    (
        "attention drops Dv",
        "tracekit/models/costs.py",
        "            flops += n * 2 * hq * pairs * (m.head_dim + m.v_head_dim)\n            nbytes += n * (keys * hkv",
        "            flops += n * 2 * hq * pairs * m.head_dim\n            nbytes += n * (keys * hkv",
        ["tests/test_models.py::test_analytic_flops_match_flop_counter_on_long_sequences"],
    ),
    (
        "TF32 priced as FP32",
        "tracekit/analysis/pricing/dtypes.py",
        'out[fp32_matrix[tf32]] = "tf32"',
        'out[fp32_matrix[tf32]] = "fp32"',
        ["tests/test_roofline.py::test_dtype_refinement_prices_each_precision_at_its_own_peak"],
    ),
    (
        "vLLM rank names lose world size",
        "tracekit/frameworks/vllm.py",
        "return (int(m[1]), basename[: m.start()]) if m else None",
        "return (int(m[1]), basename) if m else None",
        [
            "tests/test_frameworks.py::test_every_per_rank_name_form_gives_rank_and_world_size",
            "tests/test_frameworks.py::test_world_size_from_vllm_file_names_when_the_traces_do_not_state_it",
        ],
    ),
    (
        "step boundary searchsorted side",
        "tracekit/analysis/steps/work.py",
        'pos = np.searchsorted(starts, t, side="right") - 1\n    ok = (pos >= 0) & (t <= ends',
        'pos = np.searchsorted(starts, t, side="left") - 1\n    ok = (pos >= 0) & (t <= ends',
        ["tests/test_segment.py::test_launches_on_a_steps_first_and_last_instant_belong_to_it"],
    ),
    (
        "compute/memory threshold halved",
        "tracekit/analysis/pricing/roofline.py",
        "bound[ok] = np.where(t_compute[ok] >= t_memory[ok], COMPUTE, MEMORY)",
        "bound[ok] = np.where(t_compute[ok] >= t_memory[ok] / 2, COMPUTE, MEMORY)",
        [
            "tests/test_roofline.py::test_roofline_bound_and_fraction_of_hand_built_gemms",
            "tests/test_roofline.py::test_per_kernel_figures_are_consistent",
        ],
    ),
]
ok = True
for label, rel, old, new, tests in MUTANTS:
    path = ROOT / rel
    src = path.read_text()
    assert src.count(old) == 1, (label, src.count(old))
    path.write_text(src.replace(old, new))
    try:
        r = subprocess.run(
            [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "TRACEKIT_STRICT_BOOKS": "1"},
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        path.write_text(src)
    lines = r.stdout.splitlines()
    first_e = next((line for line in lines if line.startswith("E ")), "")
    summary = lines[-1] if lines else ""
    caught = r.returncode != 0
    ok &= caught
    print(f"{label}: {'CAUGHT' if caught else 'SURVIVED'} | {summary} | {first_e.strip()[:160]}")
    for line in lines:
        if line.startswith("FAILED"):
            print("   ", line[:160])
print("all caught" if ok else "SOME SURVIVED")
sys.exit(0 if ok else 1)
