"""User spec files (--spec-file): a `tracekit gpus --json` row as is, CSV, and one-sentence errors."""

from __future__ import annotations

import copy
import csv
import json

import pytest
from click.testing import CliRunner
from conftest import real_trace_path

from tracekit.cli import main
from tracekit.errors import TracekitError
from tracekit.specs import load_spec_file, spec_by_name


@pytest.fixture(scope="module")
def printed_rows() -> list[dict]:
    """What `tracekit gpus --json` prints, as a user would copy it."""
    result = CliRunner().invoke(main, ["gpus", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def printed_row(rows: list[dict], key: str) -> dict:
    # A copy: tests edit the row as a user would, and the fixture is shared.
    return copy.deepcopy(next(r for r in rows if r["key"] == key))


def comparable(spec) -> dict:
    """Everything a spec says but where it came from; empty provenance notes mean nothing."""
    view = spec.to_dict()
    view.pop("peak_basis")
    view["provenance"] = {k: v for k, v in view["provenance"].items() if v}
    return view


def flat_cells(row: dict, prefix: str = "") -> dict[str, str]:
    """A printed row as CSV cells, by the documented scheme: dotted keys, '; ' lists, 9.0."""
    cells = {}
    for key, value in row.items():
        if isinstance(value, dict):
            cells.update(flat_cells(value, f"{prefix}{key}."))
        elif key == "compute_capability" and value:
            cells[prefix + key] = f"{value[0]}.{value[1]}"
        elif isinstance(value, list):
            cells[prefix + key] = "; ".join(value)
        else:
            cells[prefix + key] = "" if value is None else repr(value) if isinstance(value, float) else str(value)
    return cells


def write_csv(path, cells: dict[str, str], *, key_value: bool = False) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        if key_value:
            writer.writerow(["key", "value"])
            writer.writerows(cells.items())
        else:
            writer.writerow(cells)
            writer.writerow(cells.values())


def load_error(path) -> str:
    with pytest.raises(TracekitError) as e:
        load_spec_file(path)
    message = e.value.message
    assert str(path) in message and "\n" not in message
    return message


# --- a row of `tracekit gpus --json`, as is ------------------------------------------------------


def test_printed_row_round_trips(tmp_path, printed_rows):
    path = tmp_path / "my-h100.json"
    path.write_text(json.dumps(printed_row(printed_rows, "h100-sxm"), indent=2))
    mine, ref = load_spec_file(path), spec_by_name("h100-sxm")
    # Printed in FLOP/s and bytes/s, stored in TFLOP/s and GB/s: the numbers must come back exact.
    assert dict(mine.matrix_flops) == dict(ref.matrix_flops) and dict(mine.vector_flops) == dict(ref.vector_flops)
    assert mine.peak_bandwidth == ref.peak_bandwidth == 3.35e12
    assert (mine.interconnect, mine.interconnect_bandwidth) == (ref.interconnect, ref.interconnect_bandwidth)
    assert mine.achievable_compute_factor == ref.achievable_compute_factor
    assert mine.achievable_bandwidth_factor == ref.achievable_bandwidth_factor
    assert mine.peak_basis == "user spec file my-h100.json"
    assert comparable(mine) == comparable(ref)


def test_every_printed_row_round_trips(tmp_path, printed_rows):
    path = tmp_path / "row.json"
    for row in printed_rows:
        path.write_text(json.dumps(row))
        assert comparable(load_spec_file(path)) == comparable(spec_by_name(row["key"])), row["key"]


def test_whole_output_of_one_row_is_accepted(tmp_path, printed_rows):
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps([printed_row(printed_rows, "mi300x")]))
    assert comparable(load_spec_file(path)) == comparable(spec_by_name("mi300x"))


def test_edited_printed_row_keeps_si_units(tmp_path, printed_rows):
    row = printed_row(printed_rows, "h100-sxm")
    row["peak_flops"]["matrix"]["bf16"] = 500e12
    row["peak_bandwidth"] = 2e12
    row["achievable"]["compute_factor"] = 0.5
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(row))
    spec = load_spec_file(path)
    assert spec.peak_flops("bf16") == 500e12 and spec.peak_bandwidth == 2e12
    assert spec.achievable_flops("bf16") == pytest.approx(250e12)


def test_whole_output_of_many_rows_is_refused(tmp_path, printed_rows):
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(printed_rows))
    assert f"a list of {len(printed_rows)} GPUs" in load_error(path)


def test_measured_ceilings_cannot_be_claimed(tmp_path, printed_rows):
    row = printed_row(printed_rows, "h100-sxm")
    row["achievable"]["measured_bandwidth"] = 3e12
    path = tmp_path / "measured.json"
    path.write_text(json.dumps(row))
    assert "'achievable.measured_bandwidth' cannot be set" in load_error(path)


# --- CSV -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("key_value", [False, True], ids=["header-row", "key-value"])
def test_csv_from_printed_row_round_trips(tmp_path, printed_rows, key_value):
    path = tmp_path / "h100.csv"
    write_csv(path, flat_cells(printed_row(printed_rows, "h100-sxm")), key_value=key_value)
    assert comparable(load_spec_file(path)) == comparable(spec_by_name("h100-sxm"))


def test_small_csv_in_entry_units(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text(
        "name,memory_bandwidth_GBps,matrix_tflops.bf16,vector_tflops.fp32,achievable.compute,num_sms,tdp_w\n"
        "My Accelerator,1000,200,20,0.7,132,\n"
    )
    spec = load_spec_file(path)
    assert spec.name == "My Accelerator" and spec.peak_bandwidth == 1e12 and spec.num_sms == 132
    assert spec.peak_flops("bf16") == 200e12 and spec.peak_flops("fp32", "vector") == 20e12
    assert spec.achievable_compute_factor == 0.7 and spec.tdp_w is None  # an empty cell is absent


@pytest.mark.parametrize(
    "content,message",
    [
        ('name,memory_bandwidth_GBps\n"H100,3350\n', "is not valid CSV"),
        ("name,memory_bandwidth_GBps\nA,1000\nB,2000\n", "2 data rows"),
        ("name,memory_bandwidth_GBps\nA,1000,7\n", "has 3 cells but the header has 2"),
        ("name,memory_bandwidth_GBps\n", "0 data rows"),
        ("key,value\nname,A\nmemory_bandwidth_GBps,1000,7\n", "row 3 is not two cells"),
        ("name,memory_bandwidth_GBps\nA,fast\n", "'memory_bandwidth_GBps' must be a finite number"),
        ("name,compute_capability,memory_bandwidth_GBps\nA,nine,1\n", "MAJOR.MINOR"),
        ("name,name,memory_bandwidth_GBps\nA,B,1\n", "gives name twice"),
    ],
)
def test_malformed_csv_is_one_clear_error(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    assert message in load_error(path)


# --- keys ----------------------------------------------------------------------------------------


def test_unknown_key_is_named_with_a_suggestion_and_the_accepted_keys(tmp_path):
    path = tmp_path / "my.json"
    path.write_text(json.dumps({"name": "Mine", "bandwith_gbps": 1000, "matrix_tflops": {"bf16": 1}}))
    message = load_error(path)
    assert "unknown key 'bandwith_gbps' (did you mean 'memory_bandwidth_GBps'?)" in message
    assert "accepted keys: name, key, vendor" in message and "peak_flops.matrix.<dtype>" in message


def test_unknown_csv_column_is_named_even_when_empty(tmp_path):
    path = tmp_path / "my.csv"
    path.write_text("name,memory_bandwidth_GBps,peak_flop.matrix.bf16\nMine,1000,\n")
    assert "unknown key 'peak_flop.matrix.bf16' (did you mean 'peak_flops.matrix.bf16'?)" in load_error(path)


def test_keys_ignore_case(tmp_path):
    path = tmp_path / "case.json"
    path.write_text(json.dumps({"Name": "Mine", "MEMORY_BANDWIDTH_GBPS": 1000, "boost_clock_mhz": 1500}))
    spec = load_spec_file(path)
    assert spec.peak_bandwidth == 1e12 and spec.boost_clock_mhz == 1500


@pytest.mark.parametrize(
    "doc,message",
    [
        ({"memory_bandwidth_GBps": 1000}, "lacks the required key 'name'"),
        ({"name": "Mine", "vendor": "Acme"}, "gives no peak"),
    ],
)
def test_missing_required_key_names_what_is_required(tmp_path, doc, message):
    path = tmp_path / "short.json"
    path.write_text(json.dumps(doc))
    error = load_error(path)
    assert message in error and "required: name and at least one peak" in error and "peak_bandwidth" in error


def test_quantity_given_twice_is_refused(tmp_path):
    path = tmp_path / "twice.json"
    path.write_text(json.dumps({"name": "Mine", "memory_bandwidth_GBps": 1000, "peak_bandwidth": 2e12}))
    assert "gives memory_bandwidth_GBps twice" in load_error(path)


def test_table_given_as_a_number_says_so(tmp_path):
    path = tmp_path / "flat.json"
    path.write_text(json.dumps({"name": "Mine", "matrix_tflops": 100}))
    assert "unknown key 'matrix_tflops' (a table" in load_error(path)


# --- the CLI -------------------------------------------------------------------------------------


def test_report_with_spec_file_matches_the_database_row(tmp_path, printed_rows):
    trace = real_trace_path("h100_hf")
    spec_file = tmp_path / "h100.csv"
    write_csv(spec_file, flat_cells(printed_row(printed_rows, "h100-sxm")), key_value=True)
    mfu = {}
    for how, args in (("gpu", ["--gpu", "h100-sxm"]), ("file", ["--spec-file", str(spec_file)])):
        out = tmp_path / f"{how}.json"
        result = CliRunner().invoke(main, ["report", str(trace), *args, "-o", str(out)])
        assert result.exit_code == 0, result.output
        mfu[how] = json.loads(out.read_text())["phases"]["prefill"]["mfu"]
    assert mfu["gpu"] is not None and mfu["file"] == pytest.approx(mfu["gpu"], rel=1e-12)


def test_bad_spec_file_on_the_cli_is_one_sentence(tmp_path):
    trace = real_trace_path("h100_hf")
    spec_file = tmp_path / "my.json"
    spec_file.write_text(json.dumps({"name": "Mine", "bandwith_gbps": 1000}))
    result = CliRunner().invoke(main, ["summary", str(trace), "--spec-file", str(spec_file)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "unknown key 'bandwith_gbps' (did you mean 'memory_bandwidth_GBps'?)" in result.output
