"""Is `tracekit report --format json` byte-identical before and after a change?

A restructuring that claims "nothing else changes" proves it here: record the JSON reports of
every shared and sample trace at the old revision, then check the new one against them.

    python benchmarks/json_identity.py --save /tmp/before     # on the old revision
    python benchmarks/json_identity.py --check /tmp/before    # on the new one: exit 1 on any difference
    python benchmarks/json_identity.py --save /tmp/before --code ../old-checkout   # the old code, these traces

Each document is made by the command line (`python -m tracekit ... --format json`), as a user
gets it, with the checkout of ``--code`` (default: this one) first on the path and the traces
always read from this checkout's paths (a report holds its trace's path). A difference is shown
as the first JSON path where the two documents part, with both values. Documents: the report of
every trace in ../shared/traces/*.json.gz (skipped, with a line saying so, where that folder is
absent) and sample_traces/*.pt.trace.json.gz; and the documents that build on whole analyses:
``compare`` of two runs (with gates), ``project`` onto another GPU and ``plan`` of a deployment,
on the sample traces and, where present, shared serving traces.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "traces"


def traces() -> list[Path]:
    found = sorted(SHARED.glob("*.json.gz")) if SHARED.is_dir() else []
    if not found:
        print(f"note: {SHARED} is absent: only the sample traces are checked", file=sys.stderr)
    return found + sorted((ROOT / "sample_traces").glob("*.pt.trace.json.gz"))


def documents() -> list[tuple[str, list[str]]]:
    """(file name, tracekit arguments before ``--format json -o FILE --force``) of every document."""
    docs = [(t.name.split(".json")[0] + ".json", ["report", str(t)]) for t in traces()]
    samples = ROOT / "sample_traces"
    bs1, bs8 = samples / "tiny-bs1.pt.trace.json.gz", samples / "tiny-bs8.pt.trace.json.gz"
    if bs1.exists() and bs8.exists():
        docs += [
            (
                "compare-tiny-bs1-bs8.json",
                ["compare", str(bs1), str(bs8), "--fail-if", "tpot_mean>+5%", "--fail-if", "decode_tokens_per_s<-5%"],
            ),
        ]
    served = {
        k: SHARED / f
        for k, f in (
            ("sglang-8b", "mi300x_sglang-qwen3-8b_decode-step_hipgraph.json.gz"),
            ("sglang-8b-extend", "mi300x_sglang-qwen3-8b_extend-step.json.gz"),
            ("vllm-20b", "rtx3090_vllm-gpt-oss-20b_decode-new-cached.pt.trace.json.gz"),
            ("sglang-30b-mi300x", "mi300x_sglang-qwen3-30b-a3b_decode-bs16_graph.json.gz"),
            ("sglang-30b-b300", "b300_sglang-qwen3-30b-a3b_decode-bs16_graph.json.gz"),
        )
        if (SHARED / f).exists()
    }
    if {"sglang-8b", "sglang-8b-extend"} <= set(served):
        docs += [
            (
                "project-mi300x-extend-h100.json",
                ["project", str(served["sglang-8b-extend"]), "--to", "h100-sxm", "--model", "qwen3-8b"],
            ),
            (
                "plan-mi300x-qwen3-8b.json",
                [
                    "plan",
                    str(served["sglang-8b-extend"]),
                    str(served["sglang-8b"]),
                    "--model",
                    "qwen3-8b",
                    "--isl",
                    "2048",
                    "--osl",
                    "256",
                    "--rate",
                    "4",
                    "--ttft-slo",
                    "500ms",
                    "--tpot-slo",
                    "50ms",
                    "--kv-link",
                    "50",
                ],
            ),
        ]
    if {"sglang-30b-mi300x", "sglang-30b-b300"} <= set(served):
        docs.append(
            (
                "compare-mi300x-b300-decode.json",
                [
                    "compare",
                    str(served["sglang-30b-mi300x"]),
                    str(served["sglang-30b-b300"]),
                    "--fail-if",
                    "itl>+1%",
                    "--fail-if",
                    "decode_tokens_per_s<-1%",
                ],
            )
        )
    if "vllm-20b" in served:
        docs.append(
            (
                "project-rtx3090-b200.json",
                ["project", str(served["vllm-20b"]), "--to", "b200", "--model", "gpt-oss-20b"],
            )
        )
    return docs


def make(args: list[str], out: Path, code: Path) -> str | None:
    """Write the JSON document of ``tracekit ARGS`` to OUT, with CODE's tracekit; None, or the error text."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    r = subprocess.run(
        [sys.executable, "-m", "tracekit", *args, "--format", "json", "-o", str(out), "--force"],
        capture_output=True,
        text=True,
        env=env,
        cwd=code,
    )
    # compare exits 1 when a gate fails, and writes its document all the same.
    ok = r.returncode == 0 or (args[0] == "compare" and r.returncode == 1 and out.exists())
    return None if ok else (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]


def first_difference(a, b, path: str = "$") -> str | None:
    """The first JSON path where ``a`` and ``b`` differ, with both values (shortened)."""
    if type(a) is not type(b):
        return f"{path}: {_short(a)} != {_short(b)}"
    if isinstance(a, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                return f"{path}.{k}: {'absent' if k not in a else _short(a[k])} != {'absent' if k not in b else _short(b[k])}"
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None if list(a) == list(b) else f"{path}: the keys are in another order"
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None if len(a) == len(b) else f"{path}: {len(a)} items != {len(b)}"
    return None if a == b else f"{path}: {_short(a)} != {_short(b)}"


def _short(v) -> str:
    text = json.dumps(v)
    return text if len(text) <= 80 else text[:77] + "..."


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--save", metavar="DIR", type=Path, help="write every trace's JSON report into DIR")
    mode.add_argument("--check", metavar="DIR", type=Path, help="compare every trace's JSON report with DIR's")
    p.add_argument(
        "--code",
        metavar="CHECKOUT",
        type=Path,
        default=ROOT,
        help="the checkout whose tracekit makes the documents (default: this one)",
    )
    p.add_argument("--jobs", type=int, default=2, help="documents made at once (default 2)")
    args = p.parse_args(argv)
    folder = args.save or args.check
    if args.check and not folder.is_dir():
        print(f"{folder}: no such folder (make it with --save on the old revision)", file=sys.stderr)
        return 2
    if not (args.code / "tracekit" / "__init__.py").exists():
        print(f"{args.code}: not a tracekit checkout (no tracekit/__init__.py)", file=sys.stderr)
        return 2
    if args.save:
        folder.mkdir(parents=True, exist_ok=True)
    # A check writes its documents apart from the saved ones (two checks at once never share files).
    scratch = folder if args.save else Path(tempfile.mkdtemp(prefix="json-identity-"))
    code = args.code.resolve()

    def one(doc: tuple[str, list[str]]) -> tuple[str, str]:
        name, command = doc
        error = make(command, scratch / name, code)
        if error:
            return name, f"report failed: {error}"
        if args.save:
            return name, "saved " + hashlib.sha256((scratch / name).read_bytes()).hexdigest()[:12]
        old, new = (folder / name).read_bytes() if (folder / name).exists() else None, (scratch / name).read_bytes()
        if old is None:
            return name, f"not in {folder}"
        if old == new:
            return name, "identical"
        return name, "DIFFERS at " + (first_difference(json.loads(old), json.loads(new)) or "the bytes (same values)")

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(one, documents()))
    bad = 0
    for name, verdict in results:
        print(f"{name}: {verdict}")
        bad += not (verdict == "identical" or verdict.startswith("saved"))
    print(f"{len(results) - bad} of {len(results)} documents {'saved' if args.save else 'identical'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
