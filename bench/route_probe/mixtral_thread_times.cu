// Where route_mixtral's thread strategy (strategy 4: one thread per token) spends a call: the library's
// kernel beside variants of it, launched from C++ (k3::launch, PDL on), CUDA graph of 20 calls, median of
// 30 replays, at M = 1, 128, 1024, 8192; with block 0's clock64() over the work of one launch. The exact
// variants' outputs are hashed against the library kernel's. Results: bench/trials/mixtral_thread_probe.log.
// Build and run on the GPU machine, from the repo root:
//   nvcc -std=c++17 -O3 -arch=sm_90a -DK3_PDL=1 -Igenerated/k3kernels/csrc \
//     -Igenerated/k3kernels/csrc/route_mixtral bench/route_probe/mixtral_thread_times.cu -o /tmp/t && /tmp/t
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>
#include "route_mixtral.cuh"
namespace f = k3_route_mixtral;
constexpr int E = 8, K = 2;

// floor: same loads and stores, trivial math (max and argmax of the 8 scores).
template <int BT>
__global__ void __launch_bounds__(BT) floor_kernel(const __nv_bfloat16* s, float* w, int32_t* ids, int64_t M) {
  k3::pdl_wait();
  k3::pdl_launch_dependents();
  const int64_t row = int64_t(blockIdx.x) * BT + threadIdx.x;
  if (row >= M) return;
  float m = -INFINITY; int a = 0;
#pragma unroll
  for (int e = 0; e < E; ++e) { float x = __bfloat162float(s[row * E + e]); if (x > m) { m = x; a = e; } }
  w[row * K] = m; w[row * K + 1] = m * 0.5f; ids[row * K] = a; ids[row * K + 1] = a ^ 1;
}
// vec: route_thread fed from one 16-byte load of the row (dense rows).
template <int BT>
__global__ void __launch_bounds__(BT) vec_kernel(const __nv_bfloat16* s, float* w, int32_t* ids, int64_t M) {
  k3::pdl_wait();
  k3::pdl_launch_dependents();
  const int64_t row = int64_t(blockIdx.x) * BT + threadIdx.x;
  if (row >= M) return;
  uint4 v = *reinterpret_cast<const uint4*>(s + row * E);
  __nv_bfloat16 r[8];
  *reinterpret_cast<uint4*>(r) = v;
  f::route_thread<__nv_bfloat16, float, E, K>(r, nullptr, w + row * K, ids + row * K, true, 1.0f);
}
// late: launch_dependents at the end instead of the start.
template <int BT>
__global__ void __launch_bounds__(BT) late_kernel(const __nv_bfloat16* s, float* w, int32_t* ids, int64_t M) {
  k3::pdl_wait();
  const int64_t row = int64_t(blockIdx.x) * BT + threadIdx.x;
  if (row < M) f::route_thread<__nv_bfloat16, float, E, K>(s + row * E, nullptr, w + row * K, ids + row * K, true, 1.0f);
  k3::pdl_launch_dependents();
}

// route_thread as Mixtral renders it (softmax first, no bias, divide late), MODE bits changing one part:
// 1 a tournament select (exact), 2 __fdividef for the divisions, 4 no expf (2 and 4: timing only);
// var_kernel's 8: block 0 thread 0 records its clock64() from after the PDL wait to after its stores.
template <int MODE>
__device__ __forceinline__ void thread_variant(const __nv_bfloat16* __restrict__ scores, float* __restrict__ weights,
                                               int32_t* __restrict__ ids) {
  float x[E];
#pragma unroll
  for (int e = 0; e < E; ++e) x[e] = __bfloat162float(scores[e]);
  float weight[E];
  float m = -INFINITY;
#pragma unroll
  for (int e = 0; e < E; ++e) m = fmaxf(m, x[e]);
#pragma unroll
  for (int e = 0; e < E; ++e) weight[e] = (MODE & 4) ? x[e] - m : expf(x[e] - m);
  const float total = f::thread_butterfly_sum<E>(weight);
  uint64_t key[E];
#pragma unroll
  for (int e = 0; e < E; ++e) key[e] = f::warp_key(x[e], e);
  float pw[K];
  int pid[K];
#pragma unroll
  for (int r = 0; r < K; ++r) {
    uint64_t best = 0;
    float w = 0.0f;
    if constexpr (MODE & 1) {
      uint64_t k[E];
      float ww[E];
#pragma unroll
      for (int e = 0; e < E; ++e) { k[e] = key[e]; ww[e] = weight[e]; }
#pragma unroll
      for (int d = 1; d < E; d <<= 1)
#pragma unroll
        for (int e = 0; e + d < E; e += 2 * d) {
          const bool t = k[e + d] > k[e];
          k[e] = t ? k[e + d] : k[e];
          ww[e] = t ? ww[e + d] : ww[e];
        }
      best = k[0];
      w = ww[0];
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e)
        if (key[e] > best) { best = key[e]; w = weight[e]; }
    }
#pragma unroll
    for (int e = 0; e < E; ++e) key[e] = key[e] == best ? 0 : key[e];
    pw[r] = (MODE & 2) ? __fdividef(w, total) : w / total;
    pid[r] = int(best & 0x7fffu);
  }
  float sum = 0.0f;
#pragma unroll
  for (int r = 0; r < K; ++r) sum += pw[r];
  const float denom = f::renorm_denominator(sum, true);
#pragma unroll
  for (int r = 0; r < K; ++r) {
    weights[r] = ((MODE & 2) ? __fdividef(pw[r], denom) : pw[r] / denom) * 1.0f;
    ids[r] = pid[r];
  }
}
__device__ long long probe[8];
template <int BT, int MODE>
__global__ void __launch_bounds__(BT) var_kernel(const __nv_bfloat16* s, float* w, int32_t* ids, int64_t M) {
  long long t0 = clock64();
  k3::pdl_wait();
  long long t1 = clock64();
  k3::pdl_launch_dependents();
  const int64_t row = int64_t(blockIdx.x) * BT + threadIdx.x;
  if (row >= M) return;
  thread_variant<MODE & 7>(s + row * E, w + row * K, ids + row * K);
  if constexpr (MODE & 8) {
    __threadfence_block();
    long long t2 = clock64();
    if (blockIdx.x == 0 && threadIdx.x == 0) { probe[0] = t1 - t0; probe[1] = t2 - t1; }
  }
}

f::Args args(int64_t M, const __nv_bfloat16* s, float* w, int32_t* ids) {
  f::Args a{};
  a.scores = s; a.scores_stride0 = E; a.out_weights = w; a.out_ids = ids; a.M = M;
  a.topk = K; a.num_expert_group = 1; a.topk_group = 1; a.renormalize = 1; a.routed_scaling_factor = 1.0f;
  return a;
}
template <typename L>
float graph_us(L&& launch, cudaStream_t st) {
  for (int i = 0; i < 3; ++i) launch();
  cudaStreamSynchronize(st);
  cudaGraph_t g; cudaGraphExec_t ge;
  cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
  for (int i = 0; i < 20; ++i) launch();
  cudaStreamEndCapture(st, &g);
  cudaGraphInstantiate(&ge, g, 0);
  cudaGraphLaunch(ge, st); cudaStreamSynchronize(st);
  cudaEvent_t a, z; cudaEventCreate(&a); cudaEventCreate(&z);
  std::vector<float> ts;
  for (int r = 0; r < 30; ++r) {
    cudaEventRecord(a, st); cudaGraphLaunch(ge, st); cudaEventRecord(z, st); cudaEventSynchronize(z);
    float ms; cudaEventElapsedTime(&ms, a, z); ts.push_back(ms * 1e3f / 20);
  }
  std::sort(ts.begin(), ts.end());
  cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
  return ts[15];
}
template <typename Kern, typename... A>
void lx(Kern k, int64_t M, int bt, bool pdl, cudaStream_t st, A... a) {
  k3::launch(k, dim3(unsigned((M + bt - 1) / bt)), dim3(bt), 0, st, pdl, a...);
}
uint64_t fnv(uint64_t h, const void* p, size_t n) {
  auto* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}
int main() {
  const int64_t MMAX = 65536;
  std::vector<__nv_bfloat16> hs(MMAX * E);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (auto& x : hs) x = __float2bfloat16(nd(rng));
  __nv_bfloat16* s;
  float* w;
  int32_t* ids;
  cudaMalloc(&s, hs.size() * 2);
  cudaMalloc(&w, MMAX * K * 4);
  cudaMalloc(&ids, MMAX * K * 4);
  cudaMemcpy(s, hs.data(), hs.size() * 2, cudaMemcpyHostToDevice);
  cudaStream_t st;
  cudaStreamCreate(&st);
  auto hash = [&]() {
    cudaStreamSynchronize(st);
    std::vector<float> hw(MMAX * K);
    std::vector<int32_t> hi(MMAX * K);
    cudaMemcpy(hw.data(), w, hw.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(hi.data(), ids, hi.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemset(w, 0, MMAX * K * 4);
    cudaMemset(ids, 0, MMAX * K * 4);
    return (unsigned long long)fnv(fnv(1469598103934665603ull, hw.data(), hw.size() * 4), hi.data(), hi.size() * 4);
  };
  f::launch<__nv_bfloat16, false, 1, 4, 128>(args(MMAX, s, w, ids), st);
  printf("outputs cur %016llx\n", hash());
  lx(vec_kernel<128>, MMAX, 128, true, st, s, w, ids, MMAX);
  printf("outputs vec %016llx\n", hash());
  lx(var_kernel<128, 1>, MMAX, 128, true, st, s, w, ids, MMAX);
  printf("outputs tree %016llx\n", hash());
  lx(late_kernel<128>, MMAX, 128, true, st, s, w, ids, MMAX);
  printf("outputs late %016llx\n", hash());
  for (int M : {1, 1024})
    for (int rep = 0; rep < 3; ++rep) {
      long long p[8] = {0};
      lx(var_kernel<128, 8>, M, 128, true, st, s, w, ids, (int64_t)M);
      cudaStreamSynchronize(st);
      cudaMemcpyFromSymbol(p, probe, sizeof(p));
      printf("clock cur M=%d work %lld cycles\n", M, p[1]);
      lx(var_kernel<128, 8 | 7>, M, 128, true, st, s, w, ids, (int64_t)M);
      cudaStreamSynchronize(st);
      cudaMemcpyFromSymbol(p, probe, sizeof(p));
      printf("clock bare M=%d work %lld cycles\n", M, p[1]);
    }
  auto cur = [&](auto kernel, int64_t M, int bt, bool pdl) {
    return graph_us([&] { lx(kernel, M, bt, pdl, st, s, int64_t(E), (const float*)nullptr, w, ids, M, 1, 1.0f); }, st);
  };
  for (int round = 0; round < 2; ++round)
    for (int64_t M : {1, 128, 1024, 8192}) {
      auto mine = [&](auto kernel, int bt) { return graph_us([&] { lx(kernel, M, bt, true, st, s, w, ids, M); }, st); };
      printf("M=%-5lld", (long long)M);
      printf(" floor128 %.3f", mine(floor_kernel<128>, 128));
      printf(" floor512 %.3f", mine(floor_kernel<512>, 512));
      printf(" cur32 %.3f", cur(f::route_topk_kernel<__nv_bfloat16, false, 1, 4, 32>, M, 32, true));
      printf(" cur64 %.3f", cur(f::route_topk_kernel<__nv_bfloat16, false, 1, 4, 64>, M, 64, true));
      printf(" cur128 %.3f", cur(f::route_topk_kernel<__nv_bfloat16, false, 1, 4, 128>, M, 128, true));
      printf(" cur512 %.3f", cur(f::route_topk_kernel<__nv_bfloat16, false, 1, 4, 512>, M, 512, true));
      printf(" nopdl128 %.3f", cur(f::route_topk_kernel<__nv_bfloat16, false, 1, 4, 128>, M, 128, false));
      printf(" warp128 %.3f", cur(f::route_topk_kernel<__nv_bfloat16, false, 1, 2, 128>, M, 128, true));
      printf(" vec128 %.3f", mine(vec_kernel<128>, 128));
      printf(" vec512 %.3f", mine(vec_kernel<512>, 512));
      printf(" late128 %.3f", mine(late_kernel<128>, 128));
      printf(" tree128 %.3f", mine(var_kernel<128, 1>, 128));
      printf(" fdiv128 %.3f", mine(var_kernel<128, 2>, 128));
      printf(" treefdiv128 %.3f", mine(var_kernel<128, 3>, 128));
      printf(" noexp128 %.3f", mine(var_kernel<128, 4>, 128));
      printf(" bare128 %.3f", mine(var_kernel<128, 7>, 128));
      printf("\n");
    }
  printf("CUDA: %s\n", cudaGetErrorString(cudaGetLastError()));
}
