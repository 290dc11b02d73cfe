#!/usr/bin/env bash
# Same-run decode times and phase clocks of route_topk's block strategy (and times of its warp strategy)
# for generated trees (issue 22).
# Usage: bench/route_probe/select_times.sh OUT_DIR LABEL=CSRC [LABEL=CSRC ...]; CSRC is a generated
# k3kernels/csrc tree (e.g. build/before/generated/k3kernels/csrc). Needs nvcc and a GPU.
# Each tree is built twice (timed; -DK3_PROBE_ON for clocks) and the builds run alternately, twice.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$1
shift
mkdir -p "$out"
for pair in "$@"; do
  label=${pair%%=*}
  csrc=$(cd "${pair#*=}" && pwd)
  mkdir -p "$out/$label"
  for fam in route_topk route_topk_unsorted; do
    python3 "$here/make_probe.py" "$out/$label/${fam}_probe.cuh" "$fam" "$csrc"
  done
  nvcc -std=c++17 -O3 -arch=sm_90a -DK3_PDL=1 -I"$out/$label" "$here/select_times.cu" -o "$out/$label/times" &
  nvcc -std=c++17 -O3 -arch=sm_90a -DK3_PDL=1 -DK3_PROBE_ON -I"$out/$label" "$here/select_times.cu" -o "$out/$label/clocks" &
done
wait
for round in 1 2; do
  for pair in "$@"; do
    label=${pair%%=*}
    "$out/$label/times" | sed "s/^/$label round$round /"
  done
done
for pair in "$@"; do
  label=${pair%%=*}
  "$out/$label/clocks" | sed "s/^/$label /"
done
