#!/usr/bin/env bash
# Check tracekit on a CUDA or ROCm GPU: collect the tiny and the 8B-shaped Llama presets (random
# weights, no download) at batch 1 and 16, eager, with CUDA graphs (--cuda-graphs) and compiled
# (--compile); check each run's measured ceilings against the GPU's spec database row
# (benchmarks/gpu_check.py ceilings); report and summarise each trace and check the report's
# figures (benchmarks/gpu_check.py report); print a table of every check: PASS/FAIL and its figure.
#
#   benchmarks/gpu_check.sh [--dry-run] [OUT_DIR]      # OUT_DIR defaults to ./gpu-check-out
#
# OUT_DIR gets, per run NAME (e.g. tiny-bs1-eager): NAME.pt.trace.json.gz and NAME.tracekit.json
# (the trace and its sidecar), NAME.command (the exact command that collected them, so a small
# trace can go to sample_traces/ with it), NAME.html, NAME.report.json, NAME.summary.txt, and
# NAME.<step>.log (each step's output); results.tsv and table.txt hold the table.
#
# Without a GPU it says so in one sentence, prints the plan it would run and exits 0. On a GPU
# every step runs under a time limit, a failed step is a FAIL row and the run goes on; the exit
# status is 1 if any check failed. --dry-run prints the plan and runs nothing, GPU or not.
#
# Environment: TRACEKIT (default: the checkout's .venv/bin/tracekit, else tracekit on PATH),
# PYTHON (default: the checkout's .venv/bin/python, else python3; must import torch and
# tracekit), GPU_CHECK_PRESETS ("tiny 8b"), GPU_CHECK_BATCHES ("1 16"),
# GPU_CHECK_MODES ("eager graphs compiled"), GPU_CHECK_COLLECT_TIMEOUT (1800 s per collect),
# GPU_CHECK_STEP_TIMEOUT (600 s per report or summary), GPU_CHECK_ASSUME_GPU=1 (skip the
# detection; for testing this script with a stand-in TRACEKIT).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"

DRY_RUN=0
OUT=""
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "gpu_check: unknown option $arg (see --help)" >&2
      exit 2
      ;;
    *)
      if [ -n "$OUT" ]; then
        echo "gpu_check: one output folder, not '$OUT' and '$arg'" >&2
        exit 2
      fi
      OUT="$arg"
      ;;
  esac
done
OUT="${OUT:-./gpu-check-out}"

if [ -z "${TRACEKIT:-}" ]; then
  if [ -x "$ROOT/.venv/bin/tracekit" ]; then TRACEKIT="$ROOT/.venv/bin/tracekit"; else TRACEKIT=tracekit; fi
fi
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
PRESETS="${GPU_CHECK_PRESETS:-tiny 8b}"
BATCHES="${GPU_CHECK_BATCHES:-1 16}"
MODES="${GPU_CHECK_MODES:-eager graphs compiled}"
COLLECT_TIMEOUT="${GPU_CHECK_COLLECT_TIMEOUT:-1800}"
STEP_TIMEOUT="${GPU_CHECK_STEP_TIMEOUT:-600}"

# --- the plan -----------------------------------------------------------------------------------

# The workload of each preset: the tiny one as sample_traces/ has it, the 8B shapes with a prompt
# and a decode long enough to be decode-bound but a trace small enough to report in minutes.
preset_args() {
  case "$1" in
    tiny) echo "--preset tiny --prompt-len 64 --new-tokens 16" ;;
    8b) echo "--preset 8b --prompt-len 512 --new-tokens 32" ;;
    *) echo "--preset $1" ;;
  esac
}

mode_args() {
  case "$1" in
    eager) echo "" ;;
    graphs) echo "--cuda-graphs" ;;
    compiled) echo "--compile" ;;
    *)
      echo "gpu_check: unknown mode '$1' (eager, graphs, compiled)" >&2
      return 1
      ;;
  esac
}

RUNS=()
for preset in $PRESETS; do
  for batch in $BATCHES; do
    for mode in $MODES; do
      mode_args "$mode" >/dev/null
      RUNS+=("$preset $batch $mode")
    done
  done
done

# The collect command of one run, one word per line (read into an array by the caller).
collect_command() {
  local preset=$1 batch=$2 mode=$3 name=$4
  local words preset_words mode_words
  read -ra preset_words <<<"$(preset_args "$preset")"
  read -ra mode_words <<<"$(mode_args "$mode")"
  words=(
    "$TRACEKIT" collect "${preset_words[@]}" --batch-size "$batch" "${mode_words[@]}"
    --device cuda --dtype bf16 --seed 0 --no-progress --force --output "$OUT/$name"
  )
  printf '%s\n' "${words[@]}"
}

# A command as one line of shell words, quoted where a word needs it.
quoted() {
  local line
  line=$(printf '%q ' "$@")
  echo "${line% }"
}

print_plan() {
  local run preset batch mode name cmd
  echo "Plan: ${#RUNS[@]} runs into $OUT/, each NAME collected by the command below (limit ${COLLECT_TIMEOUT} s), then"
  echo "  $PYTHON $HERE/gpu_check.py ceilings NAME.tracekit.json (measured ceilings vs the spec row),"
  echo "  $TRACEKIT report NAME.pt.trace.json.gz (-o NAME.html; --format json -o NAME.report.json),"
  echo "  $PYTHON $HERE/gpu_check.py report NAME.report.json NAME.tracekit.json MODE (steps, batch, graphs, MFU/MBU),"
  echo "  $TRACEKIT summary NAME.pt.trace.json.gz (limit ${STEP_TIMEOUT} s each):"
  for run in "${RUNS[@]}"; do
    read -r preset batch mode <<<"$run"
    name="$preset-bs$batch-$mode"
    mapfile -t cmd < <(collect_command "$preset" "$batch" "$mode" "$name")
    printf '  %-18s %s\n' "$name" "$(quoted "${cmd[@]}")"
  done
}

# --- finding the GPU ----------------------------------------------------------------------------

GPU_NAME=""
NO_GPU=""
detect_gpu() {
  if [ "${GPU_CHECK_ASSUME_GPU:-0}" = 1 ]; then
    GPU_NAME="(assumed: GPU_CHECK_ASSUME_GPU=1)"
    return 0
  fi
  local out rc=0
  # torch.cuda covers ROCm too (HIP builds answer through the same API).
  out=$(timeout 120 "$PYTHON" -c '
import sys
import torch
if not torch.cuda.is_available():
    print(torch.__version__)
    sys.exit(3)
print(torch.cuda.get_device_name(0))
' 2>/dev/null) || rc=$?
  if [ $rc -eq 0 ]; then
    GPU_NAME="$out"
    return 0
  fi
  if [ $rc -eq 3 ]; then
    NO_GPU="torch $out sees no CUDA or ROCm device"
    return 1
  fi
  # torch did not answer: without nvidia-smi and rocm-smi there is no GPU to miss.
  if command -v nvidia-smi >/dev/null 2>&1 || command -v rocm-smi >/dev/null 2>&1; then
    NO_GPU=""
    return 2
  fi
  NO_GPU="$PYTHON cannot import torch and neither nvidia-smi nor rocm-smi is on PATH"
  return 1
}

if [ $DRY_RUN -eq 1 ]; then
  echo "gpu_check: dry run, nothing is run."
  print_plan
  exit 0
fi

detect_rc=0
detect_gpu || detect_rc=$?
if [ $detect_rc -eq 1 ]; then
  echo "gpu_check: found no GPU ($NO_GPU), so nothing was run."
  print_plan
  exit 0
elif [ $detect_rc -eq 2 ]; then
  smi=$(command -v nvidia-smi || command -v rocm-smi)
  echo "gpu_check: $smi is present but $PYTHON cannot import torch with a GPU (install the torch build for this GPU), so nothing could be checked." >&2
  exit 1
fi

# --- running the checks -------------------------------------------------------------------------

mkdir -p "$OUT"
RESULTS="$OUT/results.tsv"
printf 'run\tcheck\tresult\tfigure\n' >"$RESULTS"
FAILED=0

row() { # run check result figure
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$RESULTS"
  if [ "$3" = FAIL ]; then FAILED=$((FAILED + 1)); fi
  printf '  %-22s %-26s %-5s %s\n' "$1" "$2" "$3" "$4"
}

# step NAME LABEL LIMIT LOG CMD...: runs CMD under LIMIT seconds with its output in LOG; a row.
step() {
  local name=$1 label=$2 limit=$3 log=$4
  shift 4
  local rc=0 t0 t1
  t0=$(date +%s)
  timeout --kill-after=30 "$limit" "$@" >"$log" 2>&1 || rc=$?
  t1=$(date +%s)
  if [ $rc -eq 0 ]; then
    row "$name" "$label" PASS "$((t1 - t0)) s"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    row "$name" "$label" FAIL "timed out after $limit s (log: $log)"
  else
    row "$name" "$label" FAIL "exit $rc after $((t1 - t0)) s: $(tail -n 1 "$log" | cut -c1-120) (log: $log)"
  fi
  return $rc
}

# helper NAME LOG ARGS...: gpu_check.py's rows for one run (a crash is a FAIL row).
helper() {
  local name=$1 log=$2 line check result figure rc=0
  shift 2
  timeout --kill-after=30 "$STEP_TIMEOUT" "$PYTHON" "$HERE/gpu_check.py" "$@" >"$log" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then
    row "$name" "gpu_check.py $1" FAIL "exit $rc: $(tail -n 1 "$log" | cut -c1-120) (log: $log)"
    return 0
  fi
  while IFS=$'\t' read -r check result figure; do
    if [ -n "$check" ]; then row "$name" "$check" "$result" "$figure"; fi
  done <"$log"
}

version=$("$TRACEKIT" --version 2>/dev/null || echo "tracekit (version unknown)")
echo "gpu_check: GPU $GPU_NAME; $version; ${#RUNS[@]} runs into $OUT/"
for run in "${RUNS[@]}"; do
  read -r preset batch mode <<<"$run"
  name="$preset-bs$batch-$mode"
  trace="$OUT/$name.pt.trace.json.gz"
  sidecar="$OUT/$name.tracekit.json"
  mapfile -t cmd < <(collect_command "$preset" "$batch" "$mode" "$name")
  {
    echo "# $name: collected by benchmarks/gpu_check.sh on $GPU_NAME, $(date -u +%Y-%m-%dT%H:%M:%SZ), $version"
    quoted "${cmd[@]}"
  } >"$OUT/$name.command"
  echo "$name"
  rm -f "$trace" "$sidecar"
  if ! step "$name" collect "$COLLECT_TIMEOUT" "$OUT/$name.collect.log" "${cmd[@]}"; then
    continue
  fi
  if [ ! -f "$trace" ]; then
    row "$name" "trace written" FAIL "collect exited 0 but wrote no $trace"
    continue
  fi
  if [ -f "$sidecar" ]; then
    helper "$name" "$OUT/$name.ceilings.log" ceilings "$sidecar"
  else
    row "$name" "sidecar written" FAIL "no $sidecar"
  fi
  step "$name" "report html" "$STEP_TIMEOUT" "$OUT/$name.report-html.log" \
    "$TRACEKIT" report "$trace" -o "$OUT/$name.html" --force || true
  if step "$name" "report json" "$STEP_TIMEOUT" "$OUT/$name.report-json.log" \
    "$TRACEKIT" report "$trace" --format json -o "$OUT/$name.report.json" --force && [ -f "$sidecar" ]; then
    helper "$name" "$OUT/$name.report-checks.log" report "$OUT/$name.report.json" "$sidecar" "$mode"
  fi
  if step "$name" summary "$STEP_TIMEOUT" "$OUT/$name.summary.log" "$TRACEKIT" summary "$trace"; then
    cp "$OUT/$name.summary.log" "$OUT/$name.summary.txt"
  fi
done

{
  echo
  echo "gpu_check: $GPU_NAME, $version"
  if command -v column >/dev/null 2>&1; then
    column -t -s $'\t' "$RESULTS"
  else
    cat "$RESULTS"
  fi
  checks=$(($(wc -l <"$RESULTS") - 1))
  echo
  if [ $FAILED -eq 0 ]; then
    echo "gpu_check: all $checks checks held."
  else
    echo "gpu_check: $FAILED of $checks checks failed (logs in $OUT/)."
  fi
} | tee "$OUT/table.txt"
[ $FAILED -eq 0 ]
