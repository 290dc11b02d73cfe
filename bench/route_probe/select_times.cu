// Decode-size times of route_topk's block strategy, one generated tree per build (issue 22): the
// kernels of route_topk (sorted) and route_topk_unsorted at each block size, launched as the library
// launches them (k3::launch, PDL on), CUDA graph of 20 calls, median of 30 replays, at M = 1/16/128;
// the warp strategy ("warp bt128": four tokens a block) at M = 1/128/1024. With -DK3_PROBE_ON, block
// 0's clock64() per phase of the block select at M = 1 (headers instrumented by make_probe.py).
// Prints a checksum of both families' outputs over rows of random scores, ties and NaNs, so two
// trees' builds can be compared bit for bit. Built and run by bench/route_probe/select_times.sh.
#include <cuda_bf16.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#ifdef K3_PROBE_ON
// Written by block 0's thread 0 alone: the clocks, and the next clock's index (the probes lie in
// route_row and the helpers it calls, so the index is a global, not a local of one of them).
__device__ long long k3_probe[32];
__device__ int k3_probe_n;
#define K3_PROBE_ME (threadIdx.x == 0 && blockIdx.x == 0)
#define K3_PROBE_AT(i) do { if (K3_PROBE_ME) k3_probe[i] = clock64(); } while (0)
#define K3_PROBE_START(i) do { if (K3_PROBE_ME) { k3_probe[i] = clock64(); k3_probe_n = i + 1; } } while (0)
#define K3_PROBE() do { if (K3_PROBE_ME && k3_probe_n < 32) k3_probe[k3_probe_n++] = clock64(); } while (0)
#else
#define K3_PROBE_AT(i) do { } while (0)
#define K3_PROBE_START(i) do { } while (0)
#define K3_PROBE() do { } while (0)
#endif
#include "route_topk_probe.cuh"
#include "route_topk_unsorted_probe.cuh"

constexpr int E = 896, K = 16, MMAX = 1024;

template <typename Args>
Args make_args(int M, const __nv_bfloat16* s, const float* b, float* w, int32_t* ids) {
  Args a{};
  a.scores = s;
  a.scores_stride0 = E;
  a.bias = b;
  a.out_weights = w;
  a.out_ids = ids;
  a.M = M;
  a.topk = K;
  a.num_expert_group = 1;
  a.topk_group = 1;
  a.renormalize = 1;
  a.routed_scaling_factor = 2.5f;
  return a;
}

template <bool SORTED, int BT, int STRATEGY>
void launch(int M, const __nv_bfloat16* s, const float* b, float* w, int32_t* ids, cudaStream_t st) {
  if constexpr (SORTED) {
    namespace f = k3_route_topk;
    f::launch<__nv_bfloat16, float, false, 1, STRATEGY, BT>(make_args<f::Args>(M, s, b, w, ids), st);
  } else {
    namespace f = k3_route_topk_unsorted;
    f::launch<__nv_bfloat16, float, false, 1, STRATEGY, BT>(make_args<f::Args>(M, s, b, w, ids), st);
  }
}

uint64_t fnv(uint64_t h, const void* p, size_t n) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

template <bool SORTED, int BT, int STRATEGY = 1>
void run(const char* name, const __nv_bfloat16* s, const float* b, float* w, int32_t* ids) {
  cudaStream_t st;
  cudaStreamCreate(&st);
  // Outputs of MMAX rows (random, ties and NaN rows: see main), hashed.
  launch<SORTED, BT, STRATEGY>(MMAX, s, b, w, ids, st);
  cudaStreamSynchronize(st);
  std::vector<float> hw(MMAX * K);
  std::vector<int32_t> hi(MMAX * K);
  cudaMemcpy(hw.data(), w, hw.size() * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(hi.data(), ids, hi.size() * 4, cudaMemcpyDeviceToHost);
  const uint64_t h = fnv(fnv(1469598103934665603ull, hw.data(), hw.size() * 4), hi.data(), hi.size() * 4);
  printf("%s bt%d outputs %016llx\n", name, BT, (unsigned long long)h);
#ifdef K3_PROBE_ON
  long long p[32] = {0};
  cudaMemcpyToSymbol(k3_probe, p, sizeof(p));
  launch<SORTED, BT, STRATEGY>(1, s, b, w, ids, st);
  cudaStreamSynchronize(st);
  cudaMemcpyFromSymbol(p, k3_probe, sizeof(p));
  printf("%s bt%d M=1 cycles from entry:", name, BT);
  for (int i = 1; i < 32; ++i)
    if (p[i]) printf(" [%d]%lld", i, p[i] - p[0]);
  printf("\n");
#else
  for (int M : STRATEGY == 1 ? std::vector<int>{1, 16, 128} : std::vector<int>{1, 128, 1024}) {
    for (int i = 0; i < 3; ++i) launch<SORTED, BT, STRATEGY>(M, s, b, w, ids, st);
    cudaStreamSynchronize(st);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
    for (int i = 0; i < 20; ++i) launch<SORTED, BT, STRATEGY>(M, s, b, w, ids, st);
    cudaStreamEndCapture(st, &g);
    cudaGraphInstantiate(&ge, g, 0);
    cudaGraphLaunch(ge, st);
    cudaStreamSynchronize(st);
    std::vector<float> ts;
    cudaEvent_t a, z;
    cudaEventCreate(&a);
    cudaEventCreate(&z);
    for (int r = 0; r < 30; ++r) {
      cudaEventRecord(a, st);
      cudaGraphLaunch(ge, st);
      cudaEventRecord(z, st);
      cudaEventSynchronize(z);
      float ms;
      cudaEventElapsedTime(&ms, a, z);
      ts.push_back(ms * 1e3f / 20);
    }
    std::sort(ts.begin(), ts.end());
    printf("%s bt%d M=%d us %.3f\n", name, BT, M, ts[15]);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  }
#endif
  if (cudaGetLastError() != cudaSuccess) printf("CUDA error\n");
  cudaStreamDestroy(st);
}

int main() {
  std::vector<__nv_bfloat16> hs(MMAX * E);
  std::vector<float> hb(E);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (auto& x : hs) x = __float2bfloat16(nd(rng));
  for (auto& x : hb) x = 0.1f * nd(rng);
  // Rows 1..7 of the hashed outputs: all equal, a tie straddling K, NaNs, huge negative scores.
  for (int e = 0; e < E; ++e) hs[1 * E + e] = __float2bfloat16(0.5f);
  for (int e = 0; e < E; ++e) hs[2 * E + e] = __float2bfloat16(e % 40 == 0 ? 3.0f : e % 7 == 0 ? 2.0f : -1.0f);
  for (int e = 0; e < E; e += 9) hs[3 * E + e] = __float2bfloat16(NAN);
  for (int e = 0; e < E; ++e) hs[4 * E + e] = __float2bfloat16(-100.0f - float(e % 5));
  for (int e = 0; e < E; ++e) hs[5 * E + e] = __float2bfloat16(float(e % 3));
  __nv_bfloat16* s;
  float *b, *w;
  int32_t* ids;
  cudaMalloc(&s, hs.size() * 2);
  cudaMalloc(&b, E * 4);
  cudaMalloc(&w, MMAX * K * 4);
  cudaMalloc(&ids, MMAX * K * 4);
  cudaMemcpy(s, hs.data(), hs.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(b, hb.data(), E * 4, cudaMemcpyHostToDevice);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  printf("SM clock %d kHz\n", clock_khz);
  run<true, 256>("sorted", s, b, w, ids);
  run<true, 448>("sorted", s, b, w, ids);
  run<true, 512>("sorted", s, b, w, ids);
  run<false, 256>("unsorted", s, b, w, ids);
  run<false, 448>("unsorted", s, b, w, ids);
  run<false, 512>("unsorted", s, b, w, ids);
#ifndef K3_PROBE_ON  // the probes lie in the block select
  run<true, 128, 2>("sorted warp", s, b, w, ids);
  run<false, 128, 2>("unsorted warp", s, b, w, ids);
#endif
  return 0;
}
