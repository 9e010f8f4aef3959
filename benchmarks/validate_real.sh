#!/usr/bin/env bash
# The simulator against the real executor on this machine, the full matrix (72 cells: 3
# eviction policies x 3 cache sizes x prefetch none/top-k x 2 link bandwidths x decode and
# chunked prefill), 3 executor runs per cell: calibrate, then validate. Writes the backend's
# real-execution section of docs/validation.md (or --out). BACKEND=cpu (the default; ~15 min on
# 2 cores) or BACKEND=cuda (torch with a CUDA GPU: the GPU's PCIe link and a 4 GB/s throttle;
# ~5 min on an H200). Run it on a quiet machine (the calibration reports a noisy one).
set -euo pipefail
cd "$(dirname "$0")/.."
backend="${BACKEND:-cpu}"
folder="${FOLDER:-runs/calibration-$backend}"
specmd="${SPECMD:-.venv/bin/specmd}"
$specmd calibrate --backend "$backend" --folder "$folder"
$specmd validate real --backend "$backend" --folder "$folder" --repeats "${REPEATS:-3}" "$@"
