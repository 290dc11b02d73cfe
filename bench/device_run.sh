#!/usr/bin/env bash
# One call on the GPU machine (from the repo root there): `MODE=tests` builds every family (first
# build and cached-load times), runs every generated GPU test, the fast-path GPU tests and, when
# build/spec_edits was prepared here (python tests/spec_edits_gpu.py), the spec-edit suite's GPU half;
# `MODE=tune` runs `k3gen tune --all`; `MODE=bench` runs bench/bench.py (every family and the host
# path, against build/before when it exists); `MODE=times` times the kernels alone in the tree at
# build/before and in this one (bench/kernel_times.py); `MODE=probe` times route_topk's block select
# (decode sizes, phase clocks) and warp select in build/before and in this tree, alternately in one
# run (bench/route_probe/select_times.sh). Several modes run in order:
# MODE="tests tune bench". TESTS (pytest paths, default every generated test and the fast-path GPU
# tests), TUNE (families, default --all), BENCH (families), KT (kernel_times families) and ROUTERS
# (the routers of `times` and `bench`, with KT=routers / BENCH=routers) narrow a mode; `rebuild`
# runs k3gen build between them (the tables `tune` wrote, compiled in). Logs and results are packed
# into $OUT/k3results-$MODE.tgz (the device tool returns 8 files).
set -uo pipefail
MODE=${MODE:-tests}
FINAL=${OUT:-/tmp/k3out}; OUT=$(mktemp -d); mkdir -p "$FINAL"
export PYTHONPATH=$PWD:$PWD/generated PYTHONUNBUFFERED=1 K3GEN_CACHE_DIR=/tmp/k3cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for MODE in $MODE; do
if [ "$MODE" = tests ]; then
  for fam in $(python3 -c "import k3kernels; print(' '.join(k3kernels.FAMILIES))"); do
    python3 - "$fam" "first build" <<'PY' 2>&1 | tee -a "$OUT/build_times.txt"
import importlib, sys, time
import torch
torch.cuda.init()
m = importlib.import_module(f"k3kernels.{sys.argv[1]}")
t = time.perf_counter(); m.build(); dt = time.perf_counter() - t
print(f"{sys.argv[1]}: {sys.argv[2]} {dt * 1e3:.0f} ms ({len(m.VARIANTS)} variants)")
PY
  done
  python3 - <<'PY' 2>&1 | tee -a "$OUT/build_times.txt"
import time
import torch
torch.cuda.init()
from k3gen.runtime import hostext
t = time.perf_counter(); m = hostext.load(); dt = time.perf_counter() - t
print(f"C++ call path (k3gen/runtime/csrc/k3host.cpp): first build {dt * 1e3:.0f} ms ({'built' if m else 'NOT built'})")
PY
  # Also straight into the returned folder: a call cut by the device tool's own limit returns no
  # tgz, and this log says how far the tests got.
  timeout "${TEST_TIMEOUT:-330}" python3 -m pytest ${TESTS:-generated/tests tests/test_fastpath.py} -p no:cacheprovider -q \
    2>&1 | tee "$OUT/gpu_tests.log" "$FINAL/gpu_tests.partial.log" | tail -8
  rm -f "$FINAL/gpu_tests.partial.log"
  if [ -f build/spec_edits/run.py ]; then
    timeout "${EDITS_TIMEOUT:-200}" python3 build/spec_edits/run.py --json "$OUT/spec_edits.json" 2>&1 \
      | tee "$OUT/spec_edits.log" | tail -40
  fi
elif [ "$MODE" = rebuild ]; then
  # k3gen build here, after `tune` wrote specs/tuning/: the tests and the bench then run the picks.
  # The generator needs pydantic, which this machine lacks: wheels carried in .whl, on the path of
  # this step alone (the generated code and its tests run without it).
  [ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
  PYTHONPATH=/tmp/site:$PYTHONPATH python3 -m k3gen build 2>&1 | grep -v "^note:" | tee "$OUT/rebuild.log" | tail -3
elif [ "$MODE" = tune ]; then
  # k3gen tune (issue 13): every family whose spec declares tuning; the tables land in $OUT/tuning
  # (copy them into specs/tuning/ on the dev machine, then `k3gen build`).
  timeout "${TUNE_TIMEOUT:-400}" python3 -m k3gen tune $(if [ -n "${TUNE:-}" ]; then echo --family "${TUNE// /,}"; else echo --all; fi) \
    --out "$OUT/tuning" 2>&1 | tee "$OUT/tune.log"
  mkdir -p "$OUT/tuning" && cp specs/tuning/*.yaml "$OUT/tuning/"  # what finished, should the timeout cut the rest
elif [ "$MODE" = probe ]; then
  bash bench/route_probe/select_times.sh "$OUT/probe" before=build/before/generated/k3kernels/csrc \
    after=generated/k3kernels/csrc 2>&1 | tee "$OUT/probe.log"
elif [ "$MODE" = times ]; then
  # The kernels alone in the tree at build/before and in this one, each in its own process, twice in
  # turn (bench/kernel_times.py): a same-run before/after without the references' compile time.
  for tag in ${TIMES_ORDER:-before after before after}; do
    tree=$PWD; [ "$tag" = before ] && tree=$PWD/build/before
    PYTHONPATH=$tree:$tree/generated timeout "${TIMES_TIMEOUT:-150}" python3 bench/kernel_times.py --tag "$tag" \
      --out "$OUT/kernel_times.jsonl" $(for f in ${KT:-}; do echo --family "$f"; done) \
      $(for r in ${ROUTERS:-}; do echo --router "$r"; done) 2>&1 | grep -v Warning | tail -2
  done
else
  if [ -n "${ROUTERS:-}" ]; then  # bench.py --router re-times those rows of the committed routers.json
    slug=$(python3 -c "import torch; from k3gen.runtime.devices import device_slug; print(device_slug(torch.cuda.get_device_name()))")
    cp "bench/results/$slug/routers.json" "$OUT/" 2>/dev/null
  fi
  timeout "${BENCH_TIMEOUT:-500}" python3 bench/bench.py --out "$OUT" $(for f in ${BENCH:-}; do echo --family "$f"; done) \
    $(for r in ${ROUTERS:-}; do echo --router "$r"; done) \
    2>&1 | grep -v Warning | tee "$OUT/bench.log" "$FINAL/bench.partial.log"  # the partial log: as gpu_tests'
  rm -f "$FINAL/bench.partial.log"
fi
tar -czf "$FINAL/k3results-$MODE.tgz" -C "$OUT" .
done
