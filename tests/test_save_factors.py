"""``project --check TARGET --save-factors FILE`` and ``project --factors FILE`` (issue 49):
what a checked pair measured, stored with the pair; used where it measured both classes; bad
files refused in one sentence."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SHARED_TRACES

from tracekit.cli import main
from tracekit.whatif.learnt import Learnt, load

HF = ("h100_hf-qwen1.5-0.5b_forward_bs16.json.gz", "mi300x_hf-qwen1.5-0.5b_forward_bs16.json.gz")
NV, AMD = "nvidia-hopper-blackwell", "amd-cdna3-cdna4"


def _pair(src, tgt, projected, measured):
    return {
        "source": {"class": src},
        "target": {"class": tgt},
        "fractions": {},
        "categories": {"gemm": {"projected_ms": projected, "measured_ms": measured}},
    }


def test_correction_is_measured_over_projected_and_inverts_for_the_other_direction():
    # Bug: a correction learnt NVIDIA -> AMD applied the same way round AMD -> NVIDIA.
    lt = Learnt((_pair(NV, AMD, 2.0, 3.0),))
    assert lt.correction(NV, AMD, "gemm") == pytest.approx(1.5)
    assert lt.correction(AMD, NV, "gemm") == pytest.approx(1 / 1.5)
    assert lt.correction(NV, NV, "gemm") is None and lt.correction(NV, AMD, "moe") is None
    # Two pairs combine as a time-weighted geometric mean: weights 5 and 5 -> sqrt(1.5 * 1/2).
    both = Learnt((_pair(NV, AMD, 2.0, 3.0), _pair(AMD, NV, 2.0, 3.0)))
    assert both.correction(NV, AMD, "gemm") == pytest.approx(np.sqrt(1.5 / 1.5))
    assert list(lt.scale(NV, AMD, np.array(["gemm", "moe", "communication"]))) == [1.5, 1.0, 1.0]


@pytest.mark.parametrize(
    "content, says",
    [
        ("not json", "is not JSON"),
        ('{"format": "other", "version": 1}', "is not a tracekit factors file"),
        ('{"format": "tracekit-learnt-factors", "version": 1, "pairs": []}', "holds no pairs"),
        (
            '{"format": "tracekit-learnt-factors", "version": 1, "pairs": [{"source": {}, "target": {}, '
            '"fractions": {"no-such-class": {}}}]}',
            "unknown vendor class",
        ),
    ],
)
def test_bad_factors_files_get_one_sentence(tmp_path, content, says):
    # Bug: a KeyError traceback from a hand-edited or foreign file.
    path = tmp_path / "f.json"
    path.write_text(content)
    from tracekit.errors import TracekitError

    with pytest.raises(TracekitError, match=says):
        load(str(path))
    r = CliRunner().invoke(main, ["project", str(path), "--to", "mi300x", "--factors", str(path), "-o", "-"])
    assert r.exit_code != 0 and "Traceback" not in r.output and says in r.output


def test_save_factors_needs_check(tmp_path):
    r = CliRunner().invoke(
        main,
        ["project", str(tmp_path / "t.json"), "--to", "mi300x", "--save-factors", str(tmp_path / "f.json"), "-o", "-"],
    )
    assert r.exit_code != 0 and "--save-factors needs --check" in r.output and "Traceback" not in r.output


def _shared():
    paths = [SHARED_TRACES / p for p in HF]
    if not all(p.exists() for p in paths):
        pytest.skip(f"the H100 / MI300X Hugging Face pair is absent under {SHARED_TRACES}")
    return [str(p) for p in paths]


def test_save_then_use(tmp_path):
    src, dst = _shared()
    out = tmp_path / "f.json"
    args = ["project", src, "--to", "mi300x", "--check", dst, "--save-factors", str(out), "-f", "json"]
    r = CliRunner().invoke(main, [*args, "-o", str(tmp_path / "a.json")])
    assert r.exit_code == 0, r.output
    pair = json.loads(out.read_text())["pairs"][0]
    assert (pair["source"]["class"], pair["target"]["class"]) == (NV, AMD)
    assert pair["source"]["trace"] == src and pair["target"]["trace"] == dst
    assert pair["categories"]["gemm"]["measured_ms"] > 0
    # Never overwritten silently: the second save is refused before any work, naming --force.
    again = CliRunner().invoke(main, [*args, "-o", str(tmp_path / "b.json")])
    assert again.exit_code != 0 and "--force" in again.output
    # Used the other way round, the report says it learnt from the pair.
    used = CliRunner().invoke(
        main, ["project", dst, "--to", "h100-sxm", "--factors", str(out), "-f", "json", "-o", str(tmp_path / "c.json")]
    )
    assert used.exit_code == 0, used.output
    doc = json.loads((tmp_path / "c.json").read_text())
    assert "learnt from 1 checked pair" in doc["factors"]["learnt"]
    assert any("learnt from 1 checked pair" in n for n in doc["notes"])
