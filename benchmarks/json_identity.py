"""Is `tracekit report --format json` byte-identical before and after a change?

A restructuring that claims "nothing else changes" proves it here: record the JSON reports of
every shared and sample trace at the old revision, then check the new one against them.

    python benchmarks/json_identity.py --save /tmp/before     # on the old revision
    python benchmarks/json_identity.py --check /tmp/before    # on the new one: exit 1 on any difference

Each report is made by the command line (`python -m tracekit report TRACE --format json`), as
a user gets it, with this checkout first on the path. A difference is shown as the first JSON
path where the two documents part, with both values. Traces: ../shared/traces/*.json.gz (skipped,
with a line saying so, where that folder is absent) and sample_traces/*.pt.trace.json.gz.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "traces"


def traces() -> list[Path]:
    found = sorted(SHARED.glob("*.json.gz")) if SHARED.is_dir() else []
    if not found:
        print(f"note: {SHARED} is absent: only the sample traces are checked", file=sys.stderr)
    return found + sorted((ROOT / "sample_traces").glob("*.pt.trace.json.gz"))


def report(trace: Path, out: Path) -> str | None:
    """Write TRACE's JSON report to OUT; None, or the command's error text."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    r = subprocess.run([sys.executable, "-m", "tracekit", "report", str(trace), "--format", "json", "-o", str(out),
                        "--force"], capture_output=True, text=True, env=env)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]


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
    p.add_argument("--jobs", type=int, default=2, help="reports made at once (default 2)")
    args = p.parse_args(argv)
    folder = args.save or args.check
    if args.check and not folder.is_dir():
        print(f"{folder}: no such folder (make it with --save on the old revision)", file=sys.stderr)
        return 2
    scratch = folder if args.save else folder / ".new"
    scratch.mkdir(parents=True, exist_ok=True)
    names = traces()

    def one(t: Path) -> tuple[str, str]:
        name = t.name.split(".json")[0] + ".json"
        error = report(t, scratch / name)
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
        results = list(pool.map(one, names))
    bad = 0
    for name, verdict in results:
        print(f"{name}: {verdict}")
        bad += not (verdict == "identical" or verdict.startswith("saved"))
    print(f"{len(results) - bad} of {len(results)} reports {'saved' if args.save else 'identical'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
