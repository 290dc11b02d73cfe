#!/usr/bin/env bash
# One call on the GPU machine: build timings, every generated GPU test, every benchmark.
# Usage (from the repo root there): bash bench/device_run.sh ; logs and results land in $OUT.
set -uo pipefail
FINAL=${OUT:-/tmp/k3out}; OUT=$(mktemp -d); mkdir -p "$FINAL"
export PYTHONPATH=$PWD:$PWD/generated PYTHONUNBUFFERED=1 K3GEN_CACHE_DIR=/tmp/k3cache-$$
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for fam in $(python3 -c "import k3kernels; print(' '.join(k3kernels.FAMILIES))"); do
  for what in "first build" "cached load (new process)"; do
    python3 - "$fam" "$what" <<'PY' 2>&1 | tee -a "$OUT/build_times.txt"
import importlib, sys, time
import torch
torch.cuda.init()
m = importlib.import_module(f"k3kernels.{sys.argv[1]}")
t = time.perf_counter(); m.build(); dt = time.perf_counter() - t
print(f"{sys.argv[1]}: {sys.argv[2]} {dt * 1e3:.0f} ms ({len(m.VARIANTS)} variants)")
PY
  done
done
timeout "${TEST_TIMEOUT:-400}" python3 -m pytest generated/tests -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | tail -5
# Benchmarks: every family, or those named in BENCH (space-separated).
timeout "${BENCH_TIMEOUT:-400}" python3 bench/bench.py --out "$OUT" $(for f in ${BENCH:-}; do echo --family "$f"; done) \
  2>&1 | grep -v Warning | tee "$OUT/bench.log"
# compute-sanitizer memcheck over a slice of the generated tests (small shapes of every family).
if [ -n "${SANITIZE:-}" ] && command -v compute-sanitizer >/dev/null; then
  timeout "${SANITIZE_TIMEOUT:-150}" compute-sanitizer --tool memcheck --error-exitcode 99 python3 -m pytest \
    generated/tests -p no:cacheprovider -x -k "$SANITIZE" 2>&1 | tee "$OUT/memcheck.log" | tail -6
fi
# The device tool returns at most 8 files: pack everything into one archive.
tar -czf "$FINAL/k3results.tgz" -C "$OUT" .
