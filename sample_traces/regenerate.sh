#!/usr/bin/env bash
# Regenerate sample_traces/ with tracekit itself: the tiny Llama preset (random weights,
# no download) on the CPU, batch 1 and batch 8, prompt 64, 16 decode steps. ~20 s on 2 cores.
# One CPU thread, so the samples do not depend on the regenerating machine's core count and
# do not stall when other processes share the cores.
#
#   sample_traces/regenerate.sh            # from anywhere; uses .venv/bin/tracekit if present
#   TRACEKIT=/path/to/tracekit sample_traces/regenerate.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${TRACEKIT:-}" ]; then
  if [ -x .venv/bin/tracekit ]; then TRACEKIT=.venv/bin/tracekit; else TRACEKIT=tracekit; fi
fi
for batch in 1 8; do
  "$TRACEKIT" collect --preset tiny --device cpu --dtype fp32 \
    --threads 1 --batch-size "$batch" --prompt-len 64 --new-tokens 16 --seed 0 \
    --no-progress --force --output "sample_traces/tiny-bs$batch"
done
ls -l sample_traces/
