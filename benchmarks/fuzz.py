"""A fuzz campaign: real traces mutated structurally, run through read -> analyse -> every
renderer, and through ``tracekit split``, for a time budget. Any exception other than tracekit's own one-sentence error is a
crash (an analysis whose books do not balance raises one), and a case still running past its time limit (LIMIT_BASE_S + LIMIT_PER_EVENT_S per
event) is a hang: either is printed with the mutations that caused it, the input is kept,
and the exit status is 1.

    python benchmarks/fuzz.py [--seconds 60] [--seed 1] [--jobs 2] [--keep DIR]

Inputs: the small shared traces (../shared/traces) and the committed sample traces, each
iteration a random window of a base's events (so links dangle) with one to three mutations:
wrong types, missing keys, negative / huge / non-finite numbers, duplicate or dangling ids,
unknown phase letters, odd shapes, grids and device properties, numbers inside names zeroed or
huge, byte flips, and truncation (of the JSON and of its gzip stream). A share of the cases
(MODEL_SHARE) is priced by a model, and a share (GROWTH_SHARE) grows structure instead, as real
runs do (``growth.py``: steps repeated, kernel kinds alternating on one
stream, many threads, deep nesting, many Python frames, many tiny steps, kernels without
launches, every stream overlapping), at a random size, sometimes mutated after. Prints
mutations per second and a count per outcome.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing as mp
import os
import random
import signal
import sys
import tempfile
import time
import traceback

# Every analysis checks its books (tracekit.analysis.books); here an unbalanced one raises,
# and the campaign counts it as a crash. Set before tracekit is imported, in the workers too.
os.environ["TRACEKIT_STRICT_BOOKS"] = "1"

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.path.join(ROOT, "..", "shared", "traces")
BASES = [
    "a100_triton_tiny.json.gz",
    "mi250_rocm6.2_toy_train.json.gz",
    "b300_moe-microbench.json.gz",
    "mi300x_sglang-qwen3-8b_decode-step_hipgraph.json.gz",
    "rtx4080laptop_nano-vllm_decode.json.gz",
    "b300_sglang-qwen3-30b-a3b_decode-bs16_graph.json.gz",
    "h100_hf-qwen1.5-0.5b_forward_bs16.json.gz",
]
SAMPLES = [os.path.join(ROOT, "sample_traces", "tiny-bs1.pt.trace.json.gz")]
WINDOW = 600  # events per iteration, at most
# A case's time limit grows with its events: reading and analysing cost tens of microseconds
# an event here (benchmarks/bench_analysis.py --stress), the renderers and split about as much
# again; the base allows for a loaded machine and the fixed costs.
LIMIT_BASE_S = 30.0
LIMIT_PER_EVENT_S = 0.002
GROWTH_SHARE = 0.2  # of the cases, grown rather than only mutated
GROWN_MAX_EVENTS = 30_000  # a grown case bigger than this is drawn again, smaller
FORMATS = ("json", "md", "text", "html")
# A share of the cases is priced by a model (``--model``), which reads kernel names and grids
# (GEMM layers from tiles, experts, attention): the models of the shared serving traces, and a
# dense one that fits none of them (its figures withheld, the rest still analysed).
MODEL_SHARE = 0.3
MODELS = ("qwen3-8b", "qwen3-30b-a3b", "llama-3.1-8b-instruct")

_ODD = [None, True, -1, 0, 2**63, 2**70, -(2**63), 1e308, -1e-300, "", "x", "123", [], [1, [2]], {}, {"a": 1}]
_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id")
_ARGS = (
    "External id",
    "correlation",
    "device",
    "stream",
    "Input Dims",
    "Input type",
    "grid",
    "Concrete Inputs",
    "kernel",
    "external id",
)


def _load_bases() -> list[dict]:
    docs = []
    for path in [os.path.join(SHARED, b) for b in BASES] + SAMPLES:
        if os.path.exists(path):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                docs.append(json.load(f))
    return docs


# --- mutations of the decoded document ----------------------------------------------------


def _event(rng, doc):
    ev = doc["traceEvents"]
    return ev[rng.randrange(len(ev))] if ev else None


def m_wrong_type(rng, doc):
    e = _event(rng, doc)
    if isinstance(e, dict):
        e[rng.choice(_FIELDS)] = rng.choice(_ODD)
    return "a field of an event got a wrong type"


def m_missing_key(rng, doc):
    e = _event(rng, doc)
    if isinstance(e, dict) and e:
        e.pop(rng.choice(list(e)), None)
    return "an event lost a key"


def m_numbers(rng, doc):
    for _ in range(rng.randint(1, 20)):
        e = _event(rng, doc)
        if isinstance(e, dict):
            e[rng.choice(("ts", "dur"))] = rng.choice([-1, -1e9, 0, 2**62, 1e300, 1.5e15, 0.0001])
    return "timestamps and durations negative, zero or huge"


def m_ids(rng, doc):
    ids = [rng.randint(-5, 10) for _ in range(3)]
    for _ in range(rng.randint(1, 50)):
        e = _event(rng, doc)
        if isinstance(e, dict) and isinstance(e.get("args"), dict):
            e["args"][rng.choice(("External id", "correlation"))] = rng.choice(ids + [rng.randint(0, 2**40)])
    return "duplicate and dangling ids"


def m_phase(rng, doc):
    for _ in range(rng.randint(1, 10)):
        e = _event(rng, doc)
        if isinstance(e, dict):
            e["ph"] = rng.choice(["Z", "XX", "", "x", "s", "f", "i", "M", 7, None])
    return "unknown phase letters"


def m_args(rng, doc):
    for _ in range(rng.randint(1, 10)):
        e = _event(rng, doc)
        if isinstance(e, dict):
            args = e.setdefault("args", {}) if isinstance(e.get("args"), dict) else {}
            e["args"] = args
            args[rng.choice(_ARGS)] = rng.choice(
                _ODD + [[[-1, 4]], [[2**40, 2**40]], [[]], [[1, 2], "x"], [1, 2, 3], [[0, 0, 0]], "[[1]]"]
            )
    return "odd shapes, grids and ids in args"


def m_categories(rng, doc):
    cats = [
        "kernel",
        "gpu_memcpy",
        "gpu_memset",
        "cuda_runtime",
        "cpu_op",
        "user_annotation",
        "gpu_user_annotation",
        "python_function",
        "Kernel",
        "ac2g",
        "",
        None,
        5,
    ]
    for _ in range(rng.randint(1, 30)):
        e = _event(rng, doc)
        if isinstance(e, dict):
            e["cat"] = rng.choice(cats)
    return "events moved between categories"


def m_names(rng, doc):
    names = [
        "tracekit::decode#x bs=?",
        "tracekit::prefill bs=-1 tokens=999999999999",
        "ProfilerStep#",
        "execute_1_context_1(1)_generation_0",
        "step[DECODE bs=-3]",
        "aten::linear",
        "<script>",
        "",
        "execute_model",
        "nccl:all_reduce",
        "sm90_xmma_gemm",
        "x" * 5000,
    ]
    for _ in range(rng.randint(1, 20)):
        e = _event(rng, doc)
        if isinstance(e, dict):
            e["name"] = rng.choice(names)
    return "names from every grammar, wrong"


def m_name_numbers(rng, doc):
    """Numbers inside names (GEMM tiles and clusters, annotation counts, grid-like suffixes) read as
    0 or as huge: tracekit parses sizes out of names, and a name is trace content."""
    import re

    named = [
        e
        for e in doc["traceEvents"]
        if isinstance(e, dict)
        and isinstance(e.get("name"), str)
        and e.get("cat") in ("kernel", "user_annotation", "gpu_user_annotation")
    ]
    for e in rng.sample(named, min(len(named), rng.randint(1, 20))):
        e["name"] = re.sub(r"\d+", lambda m: rng.choice(["0", "0", "1", str(2**40), m.group(0)]), e["name"])
    return "numbers in names zeroed or huge"


def m_top(rng, doc):
    key = rng.choice(["deviceProperties", "distributedInfo", "baseTimeNanoseconds", "traceEvents"])
    if key == "traceEvents":
        doc[key] = rng.choice([[], doc[key][:1], [1, "x", None]])
    elif key == "deviceProperties":
        doc[key] = rng.choice(
            [
                [],
                [{}],
                [{"name": 5, "id": "x"}],
                [{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": -1}],
                "x",
                None,
                [{"id": 9, "name": "AMD Instinct MI300X", "computeMajor": 99}],
            ]
        )
    elif key == "distributedInfo":
        doc[key] = rng.choice(
            [{}, {"rank": -1, "world_size": 0}, {"rank": "x"}, [], None, {"rank": 5, "world_size": 2}]
        )
    else:
        doc[key] = rng.choice([-1, "x", 2**70, None, 1.5])
    return f"top-level {key} malformed"


DOC_MUTATIONS = [
    m_wrong_type,
    m_missing_key,
    m_numbers,
    m_ids,
    m_phase,
    m_args,
    m_categories,
    m_names,
    m_name_numbers,
    m_top,
]


# --- mutations of the bytes ---------------------------------------------------------------


def b_flip(rng, data: bytes) -> tuple[bytes, str]:
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if b:
            b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b), "bytes flipped"


def b_truncate(rng, data: bytes) -> tuple[bytes, str]:
    return data[: rng.randrange(1, max(2, len(data)))], "truncated"


def _window(rng, base: dict) -> dict:
    doc = {k: v for k, v in base.items() if k != "traceEvents"}
    events = base.get("traceEvents") or []
    start = rng.randrange(max(1, len(events) - WINDOW))
    doc["traceEvents"] = json.loads(json.dumps(events[start : start + rng.randint(1, WINDOW)]))
    return json.loads(json.dumps(doc))  # a deep copy the mutations may wreck


def _grown(rng, base: dict) -> tuple[dict, list[str]] | None:
    """A base (or a window of it) grown by one of ``growth.CASES`` at a random size; None when
    that growth needs what the base lacks (no kernels, no annotation, ...)."""
    import growth

    name = rng.choice(sorted(growth.CASES))
    src = base if len(base.get("traceEvents") or []) <= 5 * WINDOW else _window(rng, base)
    scale = rng.choice([0.0005, 0.002, 0.005, 0.01, 0.03])
    for _ in range(4):
        try:
            doc = growth.grow(src, name, scale)
        except (ValueError, KeyError, TypeError):
            return None
        if growth.n_events(doc) <= GROWN_MAX_EVENTS:
            return json.loads(json.dumps(doc)), [f"grown: {name} at scale {scale:g} ({growth.n_events(doc):,} events)"]
        scale /= 4
    return None


def make_case(rng, bases) -> tuple[bytes, list[str], str, int, str | None]:
    """(file bytes, what was done, suffix, events, the model to price it with or None)."""
    grown = _grown(rng, rng.choice(bases)) if rng.random() < GROWTH_SHARE else None
    if grown is not None:
        doc, done = grown
        # Half the grown cases are mutated too: odd values in an odd structure.
        done += [m(rng, doc) for m in rng.sample(DOC_MUTATIONS, rng.randint(0, 1) if rng.random() < 0.5 else 0)]
    else:
        doc = _window(rng, rng.choice(bases))
        done = [m(rng, doc) for m in rng.sample(DOC_MUTATIONS, rng.randint(1, 3))]
    events = len(doc["traceEvents"]) if isinstance(doc.get("traceEvents"), list) else 1
    data = json.dumps(doc).encode()
    if rng.random() < 0.15:
        data, what = rng.choice([b_flip, b_truncate])(rng, data)
        done.append(what + " (JSON)")
    suffix = ".json"
    if rng.random() < 0.5:
        data, suffix = gzip.compress(data, compresslevel=1), ".json.gz"
        if rng.random() < 0.1:
            data, what = rng.choice([b_flip, b_truncate])(rng, data)
            done.append(what + " (gzip)")
    model = rng.choice(MODELS) if rng.random() < MODEL_SHARE else None
    if model:
        done.append(f"priced with --model {model}")
    return data, done, suffix, events, model


def limit_s(events: int) -> float:
    return LIMIT_BASE_S + LIMIT_PER_EVENT_S * events


class CaseTimeout(BaseException):
    """A case ran past its limit (a BaseException: no ``except Exception`` in tracekit takes it)."""


def _alarm(signum, frame):
    raise CaseTimeout


def run_limited(path: str, seconds: float, model: str | None = None) -> str:
    """``run_case`` under a wall-clock limit: 'timeout' when it runs past it. SIGALRM interrupts
    Python code; a stage stuck inside one C call is caught by the campaign's own backstop."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return run_case(path, model)
    except CaseTimeout:
        return "timeout"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# --- running ------------------------------------------------------------------------------


def run_case(path: str, model: str | None = None) -> str:
    """'ok', 'refused' (a TracekitError), or raises. The case is also split into windows
    (``tracekit split``), and every window read: that may refuse too, never crash."""
    from tracekit import read_trace
    from tracekit.analysis import analyze
    from tracekit.errors import TracekitError
    from tracekit.report import get_renderer

    _split_case(path)
    try:
        a = analyze(read_trace(path), model=model)
    except TracekitError:
        return "refused"
    for fmt in FORMATS:
        r = get_renderer(fmt)
        if fmt == "html":
            r.include_js = False  # the 1.3 MB bundle adds nothing to find
        r.render(a)
    return "ok"


def _split_case(path: str) -> None:
    import shutil

    from tracekit import read_trace
    from tracekit.errors import TracekitError
    from tracekit.trace import windows

    out = tempfile.mkdtemp(prefix="tracekit-fuzz-windows-")
    try:
        for w in windows.split(path, out, max_events=WINDOW // 3):
            try:
                read_trace(w)
            except TracekitError:
                pass
    except TracekitError:
        pass
    finally:
        shutil.rmtree(out, ignore_errors=True)


OUTCOMES = ("ok", "refused", "crash", "timeout")


def worker(seed: int, seconds: float, keep: str, queue) -> None:
    sys.path.insert(0, HERE)  # growth.py, beside this file (a spawned process starts afresh)
    rng = random.Random(seed)
    bases = _load_bases()
    counts = dict.fromkeys(OUTCOMES, 0)
    counts["grown"] = 0
    crashes = []
    deadline = time.monotonic() + seconds
    folder = tempfile.mkdtemp(prefix="tracekit-fuzz-")
    i = 0
    while time.monotonic() < deadline and bases:
        data, done, suffix, events, model = make_case(rng, bases)
        counts["grown"] += done[0].startswith("grown")
        path = os.path.join(folder, f"case{suffix}")
        with open(path, "wb") as f:
            f.write(data)
        limit = limit_s(events)
        t = time.monotonic()
        try:
            outcome = run_limited(path, limit, model)
            tb = f"still running after {time.monotonic() - t:.0f} s (its limit: {limit:.0f} s for {events:,} events)\n"
        except Exception:  # noqa: BLE001 - a crash is what the campaign looks for
            outcome, tb = "crash", traceback.format_exc(limit=6)
        counts[outcome] += 1
        if outcome in ("crash", "timeout"):
            kept = os.path.join(keep, f"{outcome}-{seed}-{i}{suffix}")
            os.makedirs(keep, exist_ok=True)
            with open(kept, "wb") as f:
                f.write(data)
            crashes.append({"file": kept, "mutations": done, "outcome": outcome, "traceback": tb})
        i += 1
    queue.put((counts, crashes))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    ap.add_argument("--keep", default=os.path.join(tempfile.gettempdir(), "tracekit-fuzz-crashes"))
    args = ap.parse_args(argv)
    if not _load_bases():
        print("fuzz: no base traces found (../shared/traces and sample_traces/ are absent)")
        return 0
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    t0 = time.monotonic()
    procs = [
        ctx.Process(target=worker, args=(args.seed * 1000 + j, args.seconds, args.keep, queue))
        for j in range(args.jobs)
    ]
    for p in procs:
        p.start()
    # The backstop: a worker stuck where its alarm cannot reach (inside one C call) reports
    # nothing; past the budget and the largest case's limit, it is a hang, and is stopped.
    results, hung = [], 0
    wait_until = t0 + args.seconds + limit_s(GROWN_MAX_EVENTS) + 60
    for _ in procs:
        try:
            results.append(queue.get(timeout=max(1.0, wait_until - time.monotonic())))
        except Exception:  # noqa: BLE001 - queue.Empty: a worker never came back
            hung += 1
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.terminate()
            p.join()
    elapsed = time.monotonic() - t0
    total = dict.fromkeys(OUTCOMES, 0)
    total["grown"] = 0
    crashes = []
    for counts, found in results:
        for k, v in counts.items():
            total[k] += v
        crashes += found
    total["timeout"] += hung
    n = sum(total[k] for k in OUTCOMES)
    print(
        f"fuzz: {n:,} mutated traces ({total['grown']:,} of them grown) in {elapsed:.0f} s on {args.jobs} "
        f"process(es): {n / elapsed:.1f} per second; {total['ok']:,} analysed and rendered, "
        f"{total['refused']:,} refused with a sentence, {total['crash']:,} crashed, "
        f"{total['timeout']:,} over their time limit"
    )
    if hung:
        print(f"\nHANG {hung} worker(s) never reported: stuck past every case's limit where the alarm cannot reach")
    for c in crashes[:20]:
        print(f"\n{c['outcome'].upper()} {c['file']}  ({'; '.join(c['mutations'])})\n{c['traceback']}")
    return 1 if crashes or hung else 0


if __name__ == "__main__":
    sys.exit(main())
