#!/usr/bin/env bash
# The SpecMD study's quick mode against its target: under two minutes on 2 cores (issue "The
# SpecMD study, made robust"). Whole-process wall time, real Mixtral trace included when
# ../shared/traces is present. Prints the figure, the target and the verdict; exit 1 if missed.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
shared=()
[ -d ../shared/traces ] && shared=(--shared ../shared/traces)
start=$(date +%s.%N)
specmd reproduce specmd --quick --workers 2 --out "$out" "${shared[@]}" > /dev/null 2>&1
seconds=$(echo "$(date +%s.%N) - $start" | bc)
runs=$(($(wc -l < "$out/runs.csv") - 1))
verdict=$(echo "$seconds < 120" | bc)
printf 'quick study: %d rows, %.1f s wall on 2 workers; target < 120 s: %s\n' "$runs" "$seconds" \
    "$([ "$verdict" = 1 ] && echo met || echo MISSED)"
[ "$verdict" = 1 ]
