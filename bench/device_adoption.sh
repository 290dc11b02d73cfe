#!/usr/bin/env bash
# Issue 45 on the GPU machine (torch, nvcc, ninja, pytest; no transformers, no network): the
# transformers swap and the engine hooks against the models' code and the oracles on the GPU, then
# the end-to-end routing figure. From the repo root there, in under 6 minutes on an H100:
#
#   bash bench/device_adoption.sh
#
# The wheels it installs travel with the tree in .whl/adoption/ (ignored by git: pass it as carry).
# Fetch them on the dev machine first, for the device's CPython 3.12 on x86_64 (~47 MiB: transformers
# 5.25.0 and every dependency it names: huggingface_hub, tokenizers, safetensors, regex, numpy, tqdm,
# packaging, pyyaml, filelock, fsspec, hf-xet, httpx2, httpcore2, h11, anyio, idna, typer, click,
# shellingham, rich, markdown-it-py, mdurl, pygments, annotated-doc, kernels, tomlkit, pydantic, ...):
#
#   pip download --only-binary=:all: --implementation cp --python-version 3.12 \
#     --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform any -d .whl/adoption transformers==5.25.0
#
# Then: run(command="bash bench/device_adoption.sh", carry=[".whl/adoption"]).
#  1. the wheels into /tmp/site (--no-deps --no-index), on PYTHONPATH with the checkout;
#  2. the router families prebuilt for this GPU's arch in parallel (python -m k3gen.ship.package,
#     generated/ alone), served through K3GEN_AOT_DIR: the tests then time no compile;
#  3. tests/test_integrations_transformers.py and tests/test_integrations_engines.py (their GPU tests:
#     swapped vs stock routers and MoE blocks; the hooks vs the oracles, bit for bit);
#  4. bench/e2e_routing.py: the routing step of each architecture at M = 1..8192, stock vs swapped.
# Everything lands in $OUT/adoption/ and comes back as one file: $OUT/adoption.tgz.
set -uo pipefail
ROOT=$PWD
OUT=${OUT:-/tmp/k3adoption-out}
R=$OUT/adoption
mkdir -p "$R"
export PYTHONUNBUFFERED=1
S=$R/summary.txt
: > "$S"
say() { echo "$*" | tee -a "$S"; }
finish() { tar czf "$OUT/adoption.tgz" -C "$OUT" adoption && rm -rf "$R"; }
trap finish EXIT

say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
ls .whl/adoption/*.whl > /dev/null 2>&1 || { say "no wheels in .whl/adoption (see this script's header)"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/adoption/*.whl \
  > "$R/pip.log" 2>&1 || { say "pip install failed: $(tail -2 "$R/pip.log")"; exit 1; }
export PYTHONPATH=$ROOT:$ROOT/generated:/tmp/site
say "$(python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)')"

ARCH=$(python3 -c 'import torch; M, m = torch.cuda.get_device_capability(); print(f"sm_{M}{m}a")')
FAMILIES=route_deepseek_v3,route_kimi_k2,route_glm45,route_minimax_m2,route_qwen3_moe,route_qwen3_next,route_mixtral,route_gpt_oss_120b,route_llama4_maverick,route_ernie45
export K3GEN_AOT_DIR=/tmp/k3aot K3GEN_CACHE_DIR=/tmp/k3cache
t0=$(date +%s)
timeout 200 python3 -m k3gen.ship.package --root "$ROOT" --family "$FAMILIES" --arch "$ARCH" --aot "$K3GEN_AOT_DIR" \
  --out /tmp/k3dist -j "$(nproc)" > "$R/prebuild.log" 2>&1
say "prebuild $ARCH: rc=$? in $(( $(date +%s) - t0 )) s ($(tail -1 "$R/prebuild.log" | cut -c1-120))"

t0=$(date +%s)
timeout 200 python3 -m pytest tests/test_integrations_transformers.py tests/test_integrations_engines.py \
  -p no:cacheprovider -q -rs > "$R/gpu_tests.log" 2>&1
say "gpu tests: rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E '(passed|failed|error)' "$R/gpu_tests.log" | tail -1)"

t0=$(date +%s)
timeout 150 python3 bench/e2e_routing.py --out "$R" > "$R/e2e_routing.log" 2>&1
say "e2e bench: rc=$? in $(( $(date +%s) - t0 )) s"
tail -52 "$R/e2e_routing.log" | tee -a "$S"
