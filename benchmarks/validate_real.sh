#!/usr/bin/env bash
# The simulator against the real executor on this machine, the full matrix (72 cells: 3
# eviction policies x 3 cache sizes x prefetch none/top-k x 2 link bandwidths x decode and
# chunked prefill), 3 executor runs per cell: calibrate, then validate. Writes the
# real-execution section of docs/validation.md (or --out). Takes ~15 min on 2 cores; run it on a
# quiet machine (the calibration reports a noisy one).
set -euo pipefail
cd "$(dirname "$0")/.."
folder="${FOLDER:-runs/calibration}"
specmd="${SPECMD:-.venv/bin/specmd}"
"$specmd" calibrate --backend cpu --folder "$folder"
"$specmd" validate real --backend cpu --folder "$folder" --repeats "${REPEATS:-3}" "$@"
