"""`tracekit mcp`: the MCP server, driven by the SDK's own client over stdio, against the report.

Expected figures come from `tracekit report/compare/project --format json` run through the CLI
(the documented JSON contract), never from the tool code under test. One server process answers
every SDK test (spawned once per module); the confinement and cache tests need no SDK.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from conftest import ROOT, SHARED_TRACES, real_trace_path

TOOLS = {"summary", "steps", "kernels", "idle", "explain", "compare", "project", "whatif"}
REL = 1e-3  # the tools round to 5 significant digits (or 3 decimals of a ms)


def _cli_json(*args: str) -> dict:
    """A tracekit command's --format json on stdout, through the CLI (the contract the tools must match)."""
    from tracekit.cli import main

    result = CliRunner().invoke(main, [*args, "-f", "json", "-o", "-"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _pythonpath() -> str:
    """The server's module path: this checkout first, then whatever the tests run with (the SDK
    the client uses is the server's too)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def _close(a, b) -> bool:
    return a == pytest.approx(b, rel=REL, abs=1e-6)


# --- confinement and cache: plain Python, no SDK -----------------------------------------


def test_confinement_refuses_paths_that_leave_the_allowed_folders(tmp_path):
    """Fails if a path outside --allow, a `..` walk out of it, a symlink (file or folder) from
    inside to outside, or a folder of ranks holding such a link is accepted: the realpath check is
    what keeps an agent in its folders."""
    from tracekit.errors import TracekitError
    from tracekit.serve.cache import Confinement

    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "in.json").write_text("{}")
    (outside / "secret.json").write_text("{}")
    (allowed / "link.json").symlink_to(outside / "secret.json")
    (allowed / "dirlink").symlink_to(outside, target_is_directory=True)
    (allowed / "ranks").mkdir()  # a folder of ranks inside, one of whose files links out
    (allowed / "ranks" / "rank0.json").write_text("{}")
    (allowed / "ranks" / "rank1.json").symlink_to(outside / "secret.json")
    (tmp_path / "allowed-sibling").mkdir()  # a prefix of the allowed name is not inside it
    (tmp_path / "allowed-sibling" / "x.json").write_text("{}")
    c = Confinement([str(allowed)], base=str(tmp_path))
    assert c.resolve("allowed/in.json") == str((allowed / "in.json").resolve())
    assert c.resolve(str(allowed / "in.json")) == str((allowed / "in.json").resolve())
    for bad in (
        str(outside / "secret.json"),
        "allowed/../outside/secret.json",
        "allowed/link.json",
        "allowed/dirlink/secret.json",
        "allowed-sibling/x.json",
        "/etc/passwd",
    ):
        with pytest.raises(TracekitError, match="outside the folders this server may read"):
            c.resolve(bad)
    with pytest.raises(TracekitError, match="rank1.json, a link to outside"):
        c.resolve("allowed/ranks")
    with pytest.raises(TracekitError, match="no such file"):
        c.resolve("allowed/absent.json")


def test_confinement_defaults_to_the_current_folder(tmp_path):
    """Fails if a server started without --allow reads anywhere instead of only its own folder."""
    from tracekit.errors import TracekitError
    from tracekit.serve.cache import Confinement

    (tmp_path / "t.json").write_text("{}")
    c = Confinement([], base=str(tmp_path))
    assert c.roots == [str(tmp_path.resolve())]
    assert c.resolve("t.json") == str((tmp_path / "t.json").resolve())
    with pytest.raises(TracekitError, match="outside"):
        c.resolve(str(tmp_path.parent))


def test_cache_reads_once_and_again_when_the_file_changes(tmp_path):
    """Fails if a second question about an unchanged trace re-analyses it (the < 100 ms answers
    depend on it), or if a rewritten trace (new mtime) is answered from the stale analysis."""
    from tracekit.serve.cache import AnalysisCache, Confinement

    src = real_trace_path("mi300x_decode")
    copy = tmp_path / "t.json.gz"
    copy.write_bytes(src.read_bytes())
    cache = AnalysisCache(Confinement([str(tmp_path)]), size=2)
    first = cache.get(str(copy))
    assert cache.get(str(copy)) is first and cache.misses == 1
    st = copy.stat()
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert cache.get(str(copy)) is not first and cache.misses == 2
    # Other options are another analysis, and the LRU keeps only `size` of them.
    cache.get(str(copy), gpu="mi300x")
    cache.get(str(copy), gpu="h100-sxm")
    assert cache.misses == 4 and len(cache) == 2


# --- the server over stdio, through the SDK's client ---------------------------------------


@pytest.fixture(scope="module")
def session_results(tmp_path_factory):
    """Start `python -m tracekit mcp --allow <shared traces> --allow <tmp>` once, make every call
    the tests check through the SDK's ClientSession, and return what came back."""
    pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'tracekit[mcp]')")
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    rtx = str(real_trace_path("rtx3090_vllm"))
    b300, mi300x = str(real_trace_path("b300_qwen3_moe")), str(real_trace_path("mi300x_qwen3_moe"))
    tmp = tmp_path_factory.mktemp("mcp")
    allowed, outside = tmp / "allowed", tmp / "outside"
    allowed.mkdir()
    outside.mkdir()
    (outside / "secret.json").write_text('{"traceEvents": []}')
    (allowed / "escape.json").symlink_to(outside / "secret.json")
    (allowed / "garbage.json").write_text("this is not a trace")
    calls = {
        "outside": ("summary", {"path": str(outside / "secret.json")}),
        "symlink": ("summary", {"path": str(allowed / "escape.json")}),
        "dotdot": ("summary", {"path": str(allowed / ".." / "outside" / "secret.json")}),
        "garbage": ("summary", {"path": str(allowed / "garbage.json")}),
        "missing": ("summary", {"path": str(allowed / "absent.json.gz")}),
        "summary": ("summary", {"path": rtx, "model": "gpt-oss-20b"}),
        "steps": ("steps", {"path": rtx, "model": "gpt-oss-20b", "start": 2, "stop": 5}),
        "kernels": ("kernels", {"path": rtx, "model": "gpt-oss-20b", "phase": "decode", "limit": 15}),
        "kernels_gemm": ("kernels", {"path": rtx, "model": "gpt-oss-20b", "category": "gemm", "limit": 2}),
        "kernels_name": ("kernels", {"path": rtx, "model": "gpt-oss-20b", "name": "MARLIN", "limit": 50}),
        "kernels_bad_phase": ("kernels", {"path": rtx, "model": "gpt-oss-20b", "phase": "training"}),
        "idle": ("idle", {"path": rtx, "model": "gpt-oss-20b", "phase": "prefill", "limit": 3}),
        "explain_0": ("explain", {"path": rtx, "model": "gpt-oss-20b", "finding": 0}),
        "explain_host": ("explain", {"path": rtx, "model": "gpt-oss-20b", "finding": "host-bound"}),
        "explain_bad": ("explain", {"path": rtx, "model": "gpt-oss-20b", "finding": "99"}),
        "compare": ("compare", {"before": b300, "after": mi300x}),
        "project": ("project", {"path": b300, "model": "qwen3-30b-a3b", "to": "mi300x"}),
        "project_outside": ("project", {"path": rtx, "to": str(outside / "secret.json")}),
    }
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tracekit", "mcp", "--allow", str(SHARED_TRACES), "--allow", str(allowed)],
        env={"PYTHONPATH": _pythonpath(), "TRACEKIT_STRICT_BOOKS": "1"},
        cwd=str(tmp),
    )
    out: dict = {}

    async def run():
        with open(tmp / "server.stderr", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    out["tools"] = (await session.list_tools()).tools
                    for key, (name, args) in calls.items():
                        r = await session.call_tool(name, args)
                        text = "".join(getattr(c, "text", "") for c in r.content)
                        error = getattr(r, "is_error", None) or getattr(r, "isError", None)
                        out[key] = (bool(error), text if error else json.loads(text))

    anyio.run(run)
    out["stderr"] = (tmp / "server.stderr").read_text()
    out["report"] = _cli_json("report", rtx, "--model", "gpt-oss-20b")
    out["comparison"] = _cli_json("compare", b300, mi300x)
    out["projection"] = _cli_json("project", b300, "--to", "mi300x", "--model", "qwen3-30b-a3b")
    return out


def _ok(results, key):
    error, value = results[key]
    assert not error, f"{key}: {value}"
    return value


def test_lists_the_eight_tools_read_only(session_results):
    """Fails if a tool is missing or renamed, a single-trace tool does not require `path`, or
    the tools stop saying they only read (agents ask before running tools that write)."""
    tools = {t.name: t for t in session_results["tools"]}
    assert set(tools) == TOOLS
    for name in TOOLS - {"compare"}:
        schema = getattr(tools[name], "input_schema", None) or tools[name].inputSchema
        assert "path" in schema["required"], name
    ann = tools["summary"].annotations
    assert (getattr(ann, "read_only_hint", None) or getattr(ann, "readOnlyHint", None)) is True


@pytest.mark.parametrize(
    "key,words",
    [
        ("outside", "outside the folders"),
        ("symlink", "outside the folders"),
        ("dotdot", "outside the folders"),
        ("project_outside", "outside the folders"),
        ("missing", "no such file"),
        ("garbage", "garbage.json"),
    ],
)
def test_bad_paths_are_one_sentence_tool_errors(session_results, key, words):
    """Fails if a path outside --allow (directly, by `..`, or through a symlink from inside) is
    read, or if a bad path or an unreadable file comes back as a traceback instead of one
    sentence; the later calls in the same session passing shows the server kept running."""
    error, text = session_results[key]
    assert error, f"{key} was answered: {text}"
    assert words in text and "Traceback" not in text and text.count("\n") == 0
    assert "secret" not in str(session_results.get("summary"))


def test_summary_gives_the_reports_figures(session_results):
    """Fails if summary's headline, step counts or findings drift from `tracekit report --format json`."""
    s, d = _ok(session_results, "summary"), session_results["report"]
    m = d["metrics"]
    assert _close(s["headline"]["decode_step_ms_p50"], m["decode_step_ms"]["p50"])
    assert _close(s["headline"]["decode_tokens_per_s"], m["decode_tokens_per_s"])
    assert _close(s["headline"]["decode_mbu"], m["decode_mbu"])  # priced by --model, so not null
    assert "ttft_ms" not in s["headline"] and s["null_because"]["ttft_ms"] == d["provenance"]["reasons"]["ttft_ms"]
    assert s["steps"]["total"] == len(d["steps"])
    assert s["steps"]["by_phase"]["decode"] == sum(1 for x in d["steps"] if x["phase"] == "decode")
    assert _close(s["phases"]["decode"]["gpu_idle_ms"], d["phases"]["decode"]["gpu_idle_ms"])
    assert [f["id"] for f in s["findings"]["items"]] == [f["id"] for f in d["findings"]][:10]
    assert s["findings"]["total"] == len(d["findings"]) and s["model"] == d["model"]["name"]


def test_steps_returns_the_asked_range(session_results):
    """Fails if start/stop select other steps than start <= index < stop, or their figures drift."""
    s, d = _ok(session_results, "steps"), session_results["report"]
    col = {c: i for i, c in enumerate(s["columns"])}
    assert [r[col["index"]] for r in s["rows"]] == [2, 3, 4] and s["total"] == len(d["steps"])
    for r in s["rows"]:
        step = d["steps"][r[col["index"]]]
        assert _close(r[col["duration_ms"]], step["duration_ms"]) and r[col["phase"]] == step["phase"]
        assert _close(sum(r[col["idle_by_cause"]].values()), step["gpu_idle_ms"])


def test_kernels_top_and_filters(session_results):
    """Fails if the top kernels differ from the report's table, if the uncut table does not sum to
    the phase's kernel time, or if the category and name filters keep the wrong kernels."""
    k, d = _ok(session_results, "kernels"), session_results["report"]
    col = {c: i for i, c in enumerate(k["columns"])}
    top = d["top_kernels"]["decode"]
    assert [r[col["name"]] for r in k["rows"]] == [t["short_name"] for t in top]
    assert all(_close(r[col["total_ms"]], t["total_ms"]) for r, t in zip(k["rows"], top))
    assert _close(k["matched_ms"], d["phases"]["decode"]["kernel_ms"])  # every kernel name, not only 15
    g = _ok(session_results, "kernels_gemm")
    assert _close(g["matched_ms"], d["overall"]["by_category"]["gemm"]) and g["returned"] == 2
    assert g["matched"] > 2  # the limit cuts the rows, not the count
    n = _ok(session_results, "kernels_name")
    assert n["matched"] >= 1 and all("marlin" in r[0].lower() for r in n["rows"])
    error, text = session_results["kernels_bad_phase"]
    assert error and "training" in text and "decode" in text


def test_idle_causes_with_calls_and_frames(session_results):
    """Fails if idle's causes or its largest intervals (call, op, frames) differ from the report's."""
    i, d = _ok(session_results, "idle"), session_results["report"]
    p, want = i["phases"]["prefill"], d["phases"]["prefill"]
    assert set(i["phases"]) == {"prefill"}
    assert all(_close(p["by_cause_ms"][c], ms) for c, ms in want["idle_by_cause"].items() if ms)
    assert _close(sum(p["by_cause_ms"].values()), want["gpu_idle_ms"])
    col = {c: n for n, c in enumerate(p["top"]["columns"])}
    assert p["top"]["total"] == len(want["idle_top"]) and len(p["top"]["rows"]) == 3
    for r, w in zip(p["top"]["rows"], want["idle_top"]):
        assert r[col["cause"]] == w["cause"] and r[col["stack"]] == w["stack"] and _close(r[col["ms"]], w["ms"])


def test_explain_a_finding_with_its_evidence(session_results):
    """Fails if explain returns another finding than the report's at that index or id, or the
    idle finding's evidence lists intervals of other causes."""
    d = session_results["report"]
    e0 = _ok(session_results, "explain_0")
    assert {k: e0["finding"][k] for k in ("id", "text", "phase")} == {
        k: d["findings"][0][k] for k in ("id", "text", "phase")
    }
    host = _ok(session_results, "explain_host")
    want = next(i for i, f in enumerate(d["findings"]) if f["id"] == "host-bound")
    assert (
        host["finding"]["index"] == want and host["fires_when"] == d["provenance"]["finding_thresholds"]["host-bound"]
    )
    rows = host["evidence"]["idle_intervals"]["rows"]
    assert rows and all(r[0] == "host" for r in rows)
    error, text = session_results["explain_bad"]
    assert error and "99" in text


def test_compare_and_project_give_the_cli_figures(session_results):
    """Fails if compare's verdicts and deltas or project's projected times drift from
    `tracekit compare/project --format json`."""
    c, want = _ok(session_results, "compare"), session_results["comparison"]
    got = {h["key"]: h for h in c["headline"]}
    for h in want["headline"]:
        if h["before"] is not None:
            assert got[h["key"]]["verdict"] == h["verdict"] and _close(got[h["key"]]["after"], h["after"])
    assert c["suggested_gate"] == want["suggested_gate"] and c["summary"] == want["summary"]
    p, pw = _ok(session_results, "project"), session_results["projection"]
    assert p["target"]["key"] == "mi300x"
    for phase, v in pw["phases"].items():
        assert _close(p["phases"][phase]["projected_gpu_busy_ms"], v["projected_gpu_busy_ms"])
        assert _close(p["phases"][phase]["projected_gpu_busy_ms_range"][0], v["projected_gpu_busy_ms_range"][0])


def test_server_logged_no_traceback(session_results):
    """Fails if an expected failure (refused path, unreadable trace) logged a traceback."""
    assert "Traceback" not in session_results["stderr"]


# --- the process: clean end of input, and the missing extra --------------------------------


def test_session_ends_cleanly_when_stdin_closes(tmp_path):
    """Fails if the server hangs, exits non-zero or prints a traceback when its client closes stdin
    (after an initialize, and without one)."""
    pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'tracekit[mcp]')")
    env = {**os.environ, "PYTHONPATH": _pythonpath()}
    hello = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        }
    )
    for stdin in (hello + "\n", ""):
        t0 = time.monotonic()
        p = subprocess.run(
            [sys.executable, "-m", "tracekit", "mcp", "--allow", str(tmp_path)],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=60,
        )
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
        assert time.monotonic() - t0 < 30
        if stdin:
            assert json.loads(p.stdout.splitlines()[0])["result"]["serverInfo"]["name"] == "tracekit"


def test_without_the_sdk_one_sentence_and_help_still_works(tmp_path):
    """Fails if `tracekit mcp` without the SDK shows a traceback or exits 0, or if `tracekit --help`
    needs the SDK (the base install must not)."""
    fake = tmp_path / "mcp"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('no mcp here (test)')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    p = subprocess.run(
        [sys.executable, "-m", "tracekit", "mcp"],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
        timeout=60,
    )
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "pip install 'tracekit[mcp]'" in p.stderr and p.stderr.strip().count("\n") == 0
    h = subprocess.run(
        [sys.executable, "-m", "tracekit", "--help"], capture_output=True, text=True, env=env, timeout=60
    )
    assert h.returncode == 0 and "mcp" in h.stdout
