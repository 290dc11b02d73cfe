#!/usr/bin/env bash
# Issue 23, item 4, on the GPU machine: a wheel built elsewhere (another torch, another Python; e.g.
# the CPU machine's torch 2.13.0+cpu and CPython 3.11) serves here through the stable-ABI C++ call
# path, with no compiler, at the host cost of a JIT-built tree. From the repo root there:
#
#   bash bench/abi_check.sh [WHEEL]          # default: the one wheel in dist/
#   STEPS="path tests" / STEPS="path host"   # the default is all three; as two calls each fits 10 minutes
#                                            # (the generated GPU tests took 270 s through a wheel before)
#
#  1. the wheel into a fresh venv (torch from the system site-packages, pip --no-deps --no-index);
#     nvcc off PATH, CXX and CUDA_HOME pointing nowhere, K3GEN_NO_JIT=1, an empty cache;
#  2. which call path serves (must be "stable", the wheel's library) and what it was built with;
#  3. every family's generated GPU tests and tests/test_fastpath.py against the installed package
#     (the per-torch path's tests skip there: nothing can build it);
#  4. host cost per eager call (bench/host.py, decode shapes), each call over torch.sigmoid timed in
#     the same process: the installed wheel (stable, prebuilt) against this checkout with its call
#     path JIT-built (per-torch, K3GEN_HOST_PATH=torch, and stable), the kernels of both from the
#     wheel's libraries so only the call path differs, and the wheel's Python path for scale; REPS
#     rounds, interleaved, medians; target: wheel <= 1.10 x the JIT-built per-torch tree.
# Logs: $OUT/abi/*.log; summary: $OUT/abi/summary.txt (also printed).
set -uo pipefail
ROOT=$PWD
LOGS=${OUT:-/tmp/k3abi-out}/abi; mkdir -p "$LOGS"
W=$(mktemp -d /tmp/k3abi.XXXXXX)
export PYTHONUNBUFFERED=1
S="$LOGS/summary.txt"; : > "$S"
say() { echo "$*" | tee -a "$S"; }
WHEEL=${1:-$(ls "$ROOT"/dist/k3kernels-*.whl 2>/dev/null | head -1)}
[ -f "$WHEEL" ] || { say "no wheel (pass one, or put it in dist/)"; exit 1; }
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
say "here: $(python3 -c 'import platform, torch; print(f"torch {torch.__version__}, CPython {platform.python_version()}")')"
say "wheel: $(basename "$WHEEL")"

# 1. the wheel in a clean environment (as bench/ship_check.sh does it)
if python3 -m venv --system-site-packages --without-pip "$W/venv" > "$LOGS/install.log" 2>&1 \
    && "$W/venv/bin/python" -c "import torch, pytest" >> "$LOGS/install.log" 2>&1; then
  VPY=$W/venv/bin/python; SERVE_PYTHONPATH=
  SITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  python3 -m pip --python "$VPY" install -q --no-deps --no-index "$WHEEL" >> "$LOGS/install.log" 2>&1 \
    || python3 -m pip install -q --no-deps --no-index --target "$SITE" "$WHEEL" >> "$LOGS/install.log" 2>&1
else
  VPY=python3; SITE=$W/site; SERVE_PYTHONPATH=$SITE
  python3 -m pip install -q --no-deps --no-index --target "$SITE" "$WHEEL" >> "$LOGS/install.log" 2>&1
fi
cp -r "$ROOT/k3gen/oracles" "$SITE/k3gen/oracles"  # test support the wheel does not ship
mkdir -p "$W/run/tests" "$W/cache"
cp -r "$ROOT/generated/tests/." "$W/run/tests/"; cp "$ROOT/tests/test_fastpath.py" "$W/run/tests/"
NOCC_PATH=$(echo "$PATH" | tr ':' '\n' | while read -r d; do [ -x "$d/nvcc" ] || echo "$d"; done | paste -sd:)
serve() {  # "$@" as a serving machine runs it: no compiler, no JIT, nothing cached
  (cd "$W/run" && env -u K3GEN_AOT_DIR -u K3GEN_NVCC -u CUDA_PATH -u K3GEN_RECORD -u K3GEN_HOST_PATH \
     PYTHONPATH="$SERVE_PYTHONPATH" PATH="$NOCC_PATH" CUDA_HOME=/nonexistent CXX=/nonexistent/c++ \
     K3GEN_NO_JIT=1 K3GEN_CACHE_DIR="$W/cache" "$@")
}

# 2. the call path that serves
say "== call path of the installed wheel (no compiler, K3GEN_NO_JIT=1)"
serve "$VPY" - <<'PY' 2>&1 | tee -a "$S"
import json, logging, platform, torch
logging.basicConfig(level=logging.INFO, format="  log: %(message)s")
from k3gen.runtime import hostext
torch.cuda.init()  # as in serving: the library loads after a call ran on the GPU
ext = hostext.load()
print(f"  served: {hostext.served()} ({ext.__file__ if ext else 'none'})")
print(f"  GPU outputs allocated by: {ext.allocation() if hasattr(ext, 'allocation') else 'its own torch build'}")
record = json.load(open(ext.__file__ + ".json")) if ext else {}
built = record.get("built_with", {})
print(f"  built with torch {built.get('torch')}, CPython {built.get('python')}; "
      f"serving torch {torch.__version__}, CPython {platform.python_version()}")
assert hostext.served() == "stable" and "/k3gen/runtime/prebuilt/" in ext.__file__, "NOT the wheel's stable library"
print("  stable call path from the wheel: ok")
PY

# 3. the tests
if [[ " ${STEPS:-path tests host} " == *" tests "* ]]; then
  s=$(date +%s)
  serve timeout "${TEST_TIMEOUT:-360}" "$VPY" -m pytest tests -p no:cacheprovider -q -o addopts="" \
    --deselect tests/test_fastpath.py ${TESTS_K:+-k "$TESTS_K"} > "$LOGS/gpu_tests.log" 2>&1
  say "== generated GPU tests on the installed wheel: $(tail -1 "$LOGS/gpu_tests.log") ($(( $(date +%s) - s ))s)"
  serve timeout 120 "$VPY" -m pytest tests/test_fastpath.py -p no:cacheprovider -v -o addopts="" -rs \
    > "$LOGS/fastpath_tests.log" 2>&1
  say "== tests/test_fastpath.py on the installed wheel: $(tail -1 "$LOGS/fastpath_tests.log")"
  grep -E "\[(stable|torch|python)\] (PASSED|FAILED|SKIPPED|ERROR)" "$LOGS/fastpath_tests.log" \
    | sed -E 's/^.*::(test_[a-z_]+)\[([a-z]+)\] ([A-Z]+).*/   \2 \3 \1/' | sort | uniq -c | tee -a "$S"
  say "   JIT cache after the runs (must be empty): $(find "$W/cache" -name '*.so' | wc -l) libraries"
fi

# 4. host cost
[[ " ${STEPS:-path tests host} " == *" host "* ]] || { rm -rf "$W"; exit 0; }
say "== host cost per eager call, M=1 (us; x = over torch.sigmoid in the same process)"
AOT=$SITE/k3kernels/prebuilt  # the wheel's kernel libraries, laid out as k3gen compile leaves them
for r in $(seq "${REPS:-3}"); do
  serve "$VPY" "$ROOT/bench/host.py" --json "$W/wheel.$r.json" > "$LOGS/host_wheel.$r.log" 2>&1
  serve env K3GEN_HOST_PATH=python "$VPY" "$ROOT/bench/host.py" --json "$W/wheel_python.$r.json" \
    > "$LOGS/host_wheel_python.$r.log" 2>&1  # the fallback the stable path replaces, for scale
  for path in torch stable; do
    (cd "$W/run" && env -u K3GEN_NO_JIT -u K3GEN_RECORD PYTHONPATH="$ROOT:$ROOT/generated" K3GEN_AOT_DIR="$AOT" \
       K3GEN_CACHE_DIR="$W/jit" K3GEN_HOST_PATH=$path python3 "$ROOT/bench/host.py" --json "$W/jit_$path.$r.json") \
       > "$LOGS/host_jit_$path.$r.log" 2>&1
  done
done
grep -h "call path" "$LOGS"/host_wheel.1.log "$LOGS"/host_jit_torch.1.log "$LOGS"/host_jit_stable.1.log | tee -a "$S"
python3 - "$W" "${REPS:-3}" <<'PY' 2>&1 | tee -a "$S"
import json, os, statistics, sys
w, reps = sys.argv[1], int(sys.argv[2])
def runs(name):  # the rounds that wrote a result (a failed one is in its log)
    paths = [f"{w}/{name}.{r}.json" for r in range(1, reps + 1)]
    return [json.load(open(p)) for p in paths if os.path.exists(p)]
names = {"JIT tree, per-torch": "jit_torch", "JIT tree, stable": "jit_stable", "wheel, stable": "wheel",
         "wheel, Python path": "wheel_python"}
trees = {label: rs for label, name in names.items() if (rs := runs(name))}
if "wheel, stable" not in trees or "JIT tree, per-torch" not in trees:
    sys.exit(f"  missing runs: {sorted(set(names) - set(trees))}; see host_*.log")
def ratio(rs, call):  # median over rounds of (call / torch.sigmoid), each round's own process
    return statistics.median(r[call] / r["torch.sigmoid"] for r in rs)
calls = [c for c in trees["wheel, stable"][0] if not c.startswith("torch.")]
print(f"  {'call':24}" + "".join(f"{t:>26}" for t in trees) + "   wheel / JIT per-torch")
worst = 0.0
for c in calls:
    cells = [f"{statistics.median(r[c] for r in rs):8.2f} us ({ratio(rs, c):.2f}x)" for rs in trees.values()]
    rel = ratio(trees["wheel, stable"], c) / ratio(trees["JIT tree, per-torch"], c)
    worst = max(worst, rel)
    print(f"  {c:24}" + "".join(f"{x:>26}" for x in cells) + f"   {rel:5.3f} {'ok' if rel <= 1.10 else 'MISS'}")
print(f"  worst: {worst:.3f} (target <= 1.10)")
PY
rm -rf "$W"
