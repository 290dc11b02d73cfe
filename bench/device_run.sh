#!/usr/bin/env bash
# One call on the GPU machine: build timings, the generated GPU tests, and the benchmarks.
# Usage (device tool): bash bench/device_run.sh [pytest -k expr] ; results land in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/k3out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:$PWD/generated PYTHONUNBUFFERED=1 K3GEN_CACHE_DIR=/tmp/k3cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
for fam in $(python3 -c "import k3kernels; print(' '.join(k3kernels.FAMILIES))"); do
  python3 - "$fam" <<'PY' 2>&1 | tee -a "$OUT/build_times.txt"
import importlib, sys, time
t = time.perf_counter(); m = importlib.import_module(f"k3kernels.{sys.argv[1]}"); m.build()
print(f"{sys.argv[1]}: first build {time.perf_counter() - t:.1f} s")
PY
  python3 - "$fam" <<'PY' 2>&1 | tee -a "$OUT/build_times.txt"
import importlib, sys, time
t = time.perf_counter(); m = importlib.import_module(f"k3kernels.{sys.argv[1]}"); m.build()
print(f"{sys.argv[1]}: cached load (new process) {(time.perf_counter() - t) * 1e3:.0f} ms")
PY
done
python3 -m pytest generated/tests -q -p no:cacheprovider -x ${1:+-k "$1"} 2>&1 | tee "$OUT/gpu_tests.log" | tail -15
python3 bench/bench.py --out "$OUT" 2>&1 | tee "$OUT/bench.log"
