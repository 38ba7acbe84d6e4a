# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Working with an analysis in Python
#
# This page is a notebook, executed when the site is built (and by `tests/test_docs.py`, so
# `make test` notices when it breaks). It reads one trace, analyses it, and works with the
# tables as pandas DataFrames: the steps, the phases, the top kernels, and a groupby over every
# kernel.
#
# The trace is a vLLM run of gpt-oss-20b on an RTX 3090 from the project's shared set
# (`../shared/traces/`, beside the checkout; `PROVENANCE.md` there says where it comes from):
# 18 steps, two that admit new requests, then a decode loop at batch 4. Where that folder is
# absent (a fresh clone), the notebook falls back to `sample_traces/tiny-bs8.pt.trace.json.gz`,
# a tiny Llama on a CPU, and says so below.

# %%
from pathlib import Path

import pandas as pd

import tracekit

# The repository root: the first folder, from here up, that holds sample_traces/.
root = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "sample_traces").is_dir())
shared = root.parent / "shared" / "traces" / "rtx3090_vllm-gpt-oss-20b_decode-new-cached.pt.trace.json.gz"
if shared.exists():
    path, model = shared, "gpt-oss-20b"
else:
    path, model = root / "sample_traces" / "tiny-bs8.pt.trace.json.gz", None
    print("../shared/traces is absent: using the sample trace instead")
print(path.name)

# %% [markdown]
# ## Read the trace
#
# `read_trace` returns a `Trace`: columnar tables (kernels, CPU ops, runtime calls, annotations,
# Python frames) with integer nanosecond times.

# %%
trace = tracekit.read_trace(path)
pd.Series({name: len(getattr(trace, name)) for name in ["kernels", "cpu_ops", "runtime", "annotations", "python"]})

# %%
trace.kernels[["name", "start_ns", "dur_ns", "stream", "grid_x"]].head()

# %% [markdown]
# ## Analyse it
#
# `analyze` returns one `Analysis`. `model=` prices the kernels that the trace recorded no
# shapes for from the architecture (a vLLM trace records none by default).

# %%
analysis = tracekit.analyze(trace, model=model)
print(analysis.run_kind)
print(analysis.phase_source)

# %% [markdown]
# ## The steps
#
# `analysis.steps` has one row per step. Times are integer nanoseconds; here in ms.

# %%
steps = analysis.steps
ms = steps[["duration_ns", "gpu_busy_ns", "gpu_idle_ns"]] / 1e6
ms.columns = ["duration_ms", "busy_ms", "idle_ms"]
table = pd.concat([steps[["step", "phase", "tokens", "batch"]], ms], axis=1)
table.head(6)

# %% [markdown]
# One set of books: each step's duration is its GPU busy time plus its GPU idle time.

# %%
(steps["duration_ns"] - steps["gpu_busy_ns"] - steps["gpu_idle_ns"]).abs().max()

# %% [markdown]
# ## The phases
#
# `analysis.phases` holds each phase's figures; a DataFrame with a row per phase.

# %%
columns = ["steps", "time_ms", "gpu_busy_ms", "idle_share", "mfu", "mbu", "unknown_cost_share"]
phases = pd.DataFrame({name: {c: figures.get(c) for c in columns} for name, figures in analysis.phases.items()})
phases.transpose()

# %%
pd.DataFrame({name: figures["idle_by_cause"] for name, figures in analysis.phases.items()}).transpose()

# %% [markdown]
# ## Top kernels
#
# `analysis.top_kernels` lists each phase's kernels by time, with their bound, limiter and
# where their cost came from.

# %%
phase = "decode" if "decode" in analysis.top_kernels else next(iter(analysis.top_kernels))
top = pd.DataFrame(analysis.top_kernels[phase])
top["name"] = top["name"].str.slice(0, 50)
top[["name", "category", "calls", "total_ms", "share", "bound", "limiter", "cost_source"]].head(8)

# %% [markdown]
# ## A groupby over every kernel
#
# `analysis.work` has one row per kernel (on a CPU trace, per leaf op) with its step, phase,
# category, FLOPs, bytes, bound and cost source. Kernel time per category and phase, in ms:

# %%
by_category = analysis.work.groupby(["category", "phase"])["dur_ns"].sum().unstack("phase", fill_value=0) / 1e6
by_category.sort_values(by_category.columns[0], ascending=False).round(2)

# %% [markdown]
# And how much of each phase's kernel time each cost source priced (`shapes`, `capture`,
# `model`, `none`):

# %%
analysis.work.groupby(["phase", "cost_source"])["dur_ns"].sum().unstack("cost_source", fill_value=0) / 1e6

# %% [markdown]
# ## The headline figures
#
# `analysis.metrics` holds them; `analysis.to_dict()` is the whole JSON document that
# `tracekit report --format json` writes.

# %%
{k: analysis.metrics[k] for k in ["latency_semantics", "decode_step_ms", "decode_tokens_per_s", "decode_mbu"]}
