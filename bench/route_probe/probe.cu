// Where route_topk's time goes at decode sizes (issue 13): the generated kernel, instrumented by
// make_probe.py, at 128/256/512 threads. Prints block 0's clock64() per phase at M = 1 and the
// CUDA-graph time per call (20 launches, median of 30 replays) at M = 1/128/1024, beside a kernel that
// only writes the outputs (the launch floor), for bias = 0.1 randn and bias = |0.1 randn|.
//   python3 bench/route_probe/make_probe.py /tmp/probe/route_topk_probe.cuh
//   nvcc -std=c++17 -O3 -arch=sm_90a -DK3_PDL=0 -I/tmp/probe bench/route_probe/probe.cu -o /tmp/probe/probe
#include <cuda_bf16.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

__device__ long long k3_probe[32];
#define K3_PROBE_AT(i) do { if (threadIdx.x == 0 && blockIdx.x == 0) k3_probe[i] = clock64(); } while (0)
#define K3_PROBE() do { if (threadIdx.x == 0 && blockIdx.x == 0 && k3_probe_n < 32) k3_probe[k3_probe_n] = clock64(); ++k3_probe_n; } while (0)
#include "route_topk_probe.cuh"

using namespace k3_route_topk;
constexpr int E = 896, K = 16, MMAX = 1024;

__global__ void floor_kernel(float* w, int32_t* ids) {
  if (threadIdx.x < K) {
    w[blockIdx.x * K + threadIdx.x] = 1.0f;
    ids[blockIdx.x * K + threadIdx.x] = threadIdx.x;
  }
}

template <int BT>  // 0: the floor kernel
void run(int M, const __nv_bfloat16* s, const float* b, float* w, int32_t* ids) {
  cudaStream_t st;
  cudaStreamCreate(&st);
  auto launch = [&]() {
    if constexpr (BT == 0) floor_kernel<<<M, 256, 0, st>>>(w, ids);
    else route_topk_kernel<__nv_bfloat16, float, false, 1, /*strategy=*/1, BT><<<M, BT, 0, st>>>(s, E, b, w, ids, int64_t(M), 1, 1.0f);
  };
  for (int i = 0; i < 5; ++i) launch();
  cudaStreamSynchronize(st);
  if (BT && M == 1) {
    long long p[32] = {0};
    cudaMemcpyToSymbol(k3_probe, p, sizeof(p));
    launch();
    cudaStreamSynchronize(st);
    cudaMemcpyFromSymbol(p, k3_probe, sizeof(p));
    printf("  bt%d M=1 cycles from entry:", BT);
    for (int i = 1; i < 32; ++i)
      if (p[i]) printf(" [%d]%lld", i, p[i] - p[0]);
    printf("\n");
  }
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
  for (int i = 0; i < 20; ++i) launch();
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
  printf("  %s M=%d: %.2f us per call\n", BT ? ("bt" + std::to_string(BT)).c_str() : "floor", M, ts[15]);
  if (cudaGetLastError() != cudaSuccess) printf("CUDA error\n");
}

int main() {
  std::vector<__nv_bfloat16> hs(MMAX * E);
  std::vector<float> hb(E);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (auto& x : hs) x = __float2bfloat16(nd(rng));
  for (auto& x : hb) x = 0.1f * nd(rng);
  __nv_bfloat16* s;
  float *b, *w;
  int32_t* ids;
  cudaMalloc(&s, hs.size() * 2);
  cudaMalloc(&b, E * 4);
  cudaMalloc(&w, MMAX * K * 4);
  cudaMalloc(&ids, MMAX * K * 4);
  cudaMemcpy(s, hs.data(), hs.size() * 2, cudaMemcpyHostToDevice);
  for (int data = 0; data < 2; ++data) {
    if (data == 1)
      for (auto& x : hb) x = std::fabs(x);
    cudaMemcpy(b, hb.data(), E * 4, cudaMemcpyHostToDevice);
    printf("bias = %s\n", data ? "|0.1 randn|" : "0.1 randn");
    for (int M : {1, 128, 1024}) {
      run<0>(M, s, b, w, ids);
      run<128>(M, s, b, w, ids);
      run<256>(M, s, b, w, ids);
      run<512>(M, s, b, w, ids);
    }
  }
  return 0;
}
