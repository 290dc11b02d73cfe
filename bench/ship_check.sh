#!/usr/bin/env bash
# Issue 14 on the GPU machine, from the repo root, in one call (needs torch, nvcc, ninja, pytest; no
# network, no pydantic: everything here runs from generated/ through k3gen.runtime):
#  1. build the wheel of every family for sm_90a (python -m k3gen.package, the generator-free form of
#     `k3gen package`), sizes per arch printed;
#  2. install it into a fresh venv (--system-site-packages for torch; pip --no-deps --no-index), hide
#     nvcc (PATH without it, CUDA_HOME nowhere), K3GEN_NO_JIT=1, an empty cache, and run every
#     family's generated GPU tests against the installed package (the oracles, test support only, are
#     copied beside the installed runtime: the wheel does not ship them);
#  3. record -> warm -> serve: a small workload under the JIT with K3GEN_RECORD (first-call times per
#     variant), `python -m k3gen.aot --from-record` (what `k3gen compile --from-record` runs), then
#     the workload again with no compiler, K3GEN_NO_JIT=1 and only those libraries, and one call of a
#     variant the record lacks, which must be refused naming its key and the command.
# Logs: $OUT/ship/*.log and $OUT/ship/summary.txt.
set -uo pipefail
ROOT=$PWD
LOGS=${OUT:-/tmp/k3ship-out}/ship; mkdir -p "$LOGS"
W=$(mktemp -d /tmp/k3ship.XXXXXX)
export PYTHONUNBUFFERED=1
S="$LOGS/summary.txt"; : > "$S"
say() { echo "$*" | tee -a "$S"; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$S"

# 1. the wheel
say "== 1. wheel (all families, sm_90a)"
s=$(date +%s)
PYTHONPATH=$ROOT timeout 300 python3 -m k3gen.package --root "$ROOT" --arch sm_90a --aot "$W/aot" --out "$W/dist" \
  > "$LOGS/package.log" 2>&1; rc=$?
grep -E "^k3gen (compile|package)|^  (common|sm_)" "$LOGS/package.log" | tee -a "$S"
say "package: exit $rc in $(( $(date +%s) - s ))s"
WHEEL=$(ls "$W"/dist/k3kernels-*.whl 2>/dev/null | head -1)
[ -n "$WHEEL" ] || { say "no wheel; see package.log"; exit 1; }

# 2. a clean environment without a compiler
say "== 2. installed wheel, nvcc hidden, K3GEN_NO_JIT=1: every family's generated GPU tests"
SERVE_PYTHONPATH=
# A venv sees torch and pytest only when they are the base interpreter's (not another venv's).
if python3 -m venv --system-site-packages --without-pip "$W/venv" > "$LOGS/install.log" 2>&1 \
    && "$W/venv/bin/python" -c "import torch, pytest" >> "$LOGS/install.log" 2>&1; then
  VPY=$W/venv/bin/python
  SITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # pip older than 22.3 has no --python: then install into the venv's site-packages directly.
  python3 -m pip --python "$VPY" install -q --no-deps --no-index "$WHEEL" >> "$LOGS/install.log" 2>&1 \
    || python3 -m pip install -q --no-deps --no-index --target "$SITE" "$WHEEL" >> "$LOGS/install.log" 2>&1
else  # no venv module, or torch lives in another venv: a target folder on PYTHONPATH is the clean environment
  VPY=python3; SITE=$W/site; SERVE_PYTHONPATH=$SITE
  python3 -m pip install -q --no-deps --no-index --target "$SITE" "$WHEEL" >> "$LOGS/install.log" 2>&1
fi
say "installed into $SITE: $(ls "$SITE" | grep -E '^k3' | paste -sd' ')"
cp -r "$ROOT/k3gen/oracles" "$SITE/k3gen/oracles"  # test support, which the wheel does not ship: the
# oracles and the generated tests' helpers (k3gen/oracles/testing.py), over the wheel's runtime
mkdir -p "$W/run" "$W/empty-cache"; cp -r "$ROOT/generated/tests" "$W/run/tests"
NOCC_PATH=$(echo "$PATH" | tr ':' '\n' | while read -r d; do [ -x "$d/nvcc" ] || echo "$d"; done | paste -sd:)
serve() {  # run "$@" as a serving machine would: no compiler, no JIT, nothing cached
  (cd "$W/run" && env -u K3GEN_AOT_DIR -u K3GEN_NVCC -u CUDA_PATH -u K3GEN_RECORD PYTHONPATH="$SERVE_PYTHONPATH" \
     PATH="$NOCC_PATH" CUDA_HOME=/nonexistent K3GEN_NO_JIT=1 K3GEN_CACHE_DIR="$W/empty-cache" "$@")
}
serve "$VPY" - <<'PY' 2>&1 | tee -a "$S"
import shutil, k3kernels, k3gen.runtime as rt, torch
print("nvcc on PATH:", shutil.which("nvcc"), "| k3kernels from", k3kernels.__file__)
for name in k3kernels.FAMILIES:
    fam = getattr(k3kernels, name)
    print(f"  {name}: supported_hardware={fam.supported_hardware()} available={fam.available()}")
from k3gen.runtime import hostext
print("C++ call path:", hostext.load())  # the wheel's prebuilt one: no compiler here
PY
s=$(date +%s)
serve timeout "${TEST_TIMEOUT:-240}" "$VPY" -m pytest tests -p no:cacheprovider -q -o addopts="" \
  ${WHEEL_TESTS_K:+-k "$WHEEL_TESTS_K"} > "$LOGS/wheel_gpu_tests.log" 2>&1
say "wheel GPU tests: $(tail -1 "$LOGS/wheel_gpu_tests.log") ($(( $(date +%s) - s ))s)"
say "JIT cache after the run (must be empty): $(find "$W/empty-cache" -name lib.so | wc -l) libraries"

if [ -z "${SKIP_FIRST_CALL:-}" ]; then  # SKIP_FIRST_CALL=1: a rerun that needs only steps 1-3
# 3a. a first call builds only its variant (fresh caches; entry_for(device, key) is what a launch takes)
say "== 3a. first call: one variant vs the whole family, fresh JIT caches"
PYTHONPATH=$ROOT:$ROOT/generated K3GEN_AOT_DIR="$W/none" python3 - "$W" <<'PY' 2>&1 | tee -a "$S"
import os, sys, time, torch
torch.cuda.init()
from k3kernels import per_token_group_quant as f1, situ_and_mul as f2
for fam in (f1, f2):
    key = sorted(fam.MODULE.request("sm_90a").variant_names())[0]
    os.environ["K3GEN_CACHE_DIR"] = f"{sys.argv[1]}/first-{fam.FAMILY}"
    t = time.perf_counter(); fam.MODULE.entry_for("cuda", key); one = time.perf_counter() - t
    os.environ["K3GEN_CACHE_DIR"] = f"{sys.argv[1]}/whole-{fam.FAMILY}"
    t = time.perf_counter(); fam.MODULE.build(); whole = time.perf_counter() - t
    print(f"  {fam.FAMILY}: first call (one variant) {one:.2f}s; build() of the family ({len(fam.VARIANTS)} variants) {whole:.2f}s")
PY

fi
# 3. record -> compile --from-record -> serve
say "== 3. record, warm exactly that, serve without a compiler"
cat > "$W/workload.py" <<'PY'
import sys, time, torch
from k3kernels import situ_and_mul, route_topk
torch.cuda.init()
x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16)
for label, call in [("situ_and_mul bf16", lambda: situ_and_mul.situ_and_mul(x, 1.0)),
                    ("situ_and_mul bf16 linear_beta", lambda: situ_and_mul.situ_and_mul(x, 1.0, 2.0)),
                    ("route_topk fp32", lambda: route_topk.route_topk(
                        torch.randn(4, 896, device="cuda"), torch.randn(896, device="cuda"), 16))]:
    t = time.perf_counter(); call(); torch.cuda.synchronize()
    print(f"  {label}: first call {time.perf_counter() - t:.2f}s")
if len(sys.argv) > 1:  # a variant the record lacks
    try:
        situ_and_mul.situ_and_mul(x.float(), 1.0); torch.cuda.synchronize()
        print("  unrecorded variant: ran (it should not under K3GEN_NO_JIT=1)")
    except Exception as exc:
        print(f"  unrecorded variant refused: {type(exc).__name__}: {exc}")
PY
s=$(date +%s)
(cd "$W/run" && PYTHONPATH=$ROOT:$ROOT/generated K3GEN_CACHE_DIR="$W/jit-cache" K3GEN_AOT_DIR="$W/none" \
   K3GEN_RECORD="$W/warm.jsonl" python3 "$W/workload.py") 2>&1 | tee -a "$S"
say "recorded (JIT run, fresh cache, $(( $(date +%s) - s ))s):"; cat "$W/warm.jsonl" | tee -a "$S"
[ -s "$W/warm.jsonl" ] || say "record is empty: the wrappers' fast path must pass the variant key (module.entry_for(device, key))"
PYTHONPATH=$ROOT python3 -m k3gen.aot --root "$ROOT" --from-record "$W/warm.jsonl" --out "$W/warm-aot" \
  > "$LOGS/from_record.log" 2>&1; say "compile --from-record: exit $? :: $(tail -1 "$LOGS/from_record.log")"
find "$W/warm-aot" -name lib.so | sed "s|$W/||" | tee -a "$S"
(cd "$W/run" && env -u K3GEN_RECORD PATH="$NOCC_PATH" CUDA_HOME=/nonexistent K3GEN_NO_JIT=1 \
   K3GEN_CACHE_DIR="$W/empty-cache2" K3GEN_AOT_DIR="$W/warm-aot" PYTHONPATH="$ROOT:$ROOT/generated" \
   python3 "$W/workload.py" unrecorded) 2>&1 | tee -a "$S"
say "total $(( $(date +%s) - t0 ))s"
cp "$W/warm.jsonl" "$LOGS/" 2>/dev/null
rm -rf "$W"
