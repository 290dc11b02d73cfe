// The CUDA and HIP device API (and k3's backend helpers) that the route template's strategies and
// route_quant_fused's kernel use, on the host: each GPU thread of one block is a fiber (ucontext) of
// one OS thread, and every collective (barrier, vote, shuffle, redux) waits until all the threads it
// spans arrive. So the generated device code runs unchanged on a CPU (tests/test_route_host.py), its
// collectives checked: a lane that skips one its warp reaches (divergence) or two lanes that reach
// different ones stop the run with a message.
// Shared memory is a function's static: it keeps the previous block's bytes, where a GPU's start
// undefined, so a read before any write may pass here. Compile with -DK3_CUDA=1 (32-lane warps) or
// -DK3_HIP=1 (64-lane waves).
#pragma once
#include <ucontext.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

#if K3_CUDA
#define K3_WARP_SIZE 32
#elif K3_HIP
#define K3_WARP_SIZE 64
#else
#error "-DK3_CUDA=1 or -DK3_HIP=1"
#endif
#define K3_DEVICE inline
#define __device__
#define __host__
#define __constant__
#define __shared__ static
#define __restrict__ __restrict
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(...)

using std::max;
using std::min;
struct uint4 {
  uint32_t x, y, z, w;
};
struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline Dim3 threadIdx;  // the running fiber's
inline Dim3 blockIdx;   // the block run_block runs (its caller sets it)

namespace host {
constexpr int W = K3_WARP_SIZE;

struct Fiber {
  ucontext_t ctx;
  std::vector<char> stack;
  bool done = false;
};
inline std::vector<Fiber> fibers;
inline ucontext_t scheduler;
inline int current = 0;
inline int threads = 0;
inline long progress = 0;  // arrivals and exits: a round of the scheduler without any is a deadlock
inline std::function<void()> body;

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "thread %d (warp %d, lane %d): %s\n", current, current / W, current % W, what);
  std::exit(3);
}

inline void yield() { swapcontext(&fibers[current].ctx, &scheduler); }

// A rendezvous of `count` threads: each arrives with the collective's tag and waits for the rest.
struct Meet {
  int arrived = 0;
  long generation = 0;
  const char* tag = nullptr;
  void wait(int count, const char* what) {
    if (arrived == 0) tag = what;
    else if (std::strcmp(tag, what) != 0) fail("threads of one warp or block reached different collectives");
    const long g = generation;
    ++progress;
    if (++arrived == count) {
      arrived = 0;
      ++generation;
      return;
    }
    while (generation == g) yield();
  }
};
inline Meet block_meet;
inline std::array<Meet, 1024 / W> warp_meet;
inline std::array<std::array<uint64_t, W>, 1024 / W> warp_slots;

// Every lane's v, in every lane of the warp (two meetings: all written, then all read).
template <typename T>
std::array<T, W> exchange(T v, const char* what) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "a register's worth");
  const int warp = current / W, lane = current % W;
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  warp_slots[warp][lane] = bits;
  warp_meet[warp].wait(W, what);
  std::array<T, W> all;
  for (int l = 0; l < W; ++l) std::memcpy(&all[l], &warp_slots[warp][l], sizeof(T));
  warp_meet[warp].wait(W, what);
  return all;
}

inline void trampoline() {
  body();
  fibers[current].done = true;
  ++progress;
}

// Runs fn as `n` threads of one block (threadIdx.x = 0 .. n-1), to completion.
inline void run_block(int n, std::function<void()> fn) {
  if (n % W != 0 || n > 1024) fail("whole warps, at most 1024 threads");
  threads = n;
  body = std::move(fn);
  fibers.assign(n, Fiber{});
  for (int t = 0; t < n; ++t) {
    Fiber& f = fibers[t];
    f.stack.resize(256 * 1024);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = &scheduler;
    makecontext(&f.ctx, trampoline, 0);
  }
  for (int left = n; left > 0;) {
    const long before = progress;
    left = 0;
    for (int t = 0; t < n; ++t) {
      if (fibers[t].done) continue;
      current = t;
      threadIdx.x = unsigned(t);
      swapcontext(&scheduler, &fibers[t].ctx);
      left += !fibers[t].done;
    }
    if (left > 0 && progress == before) {
      current = 0;
      while (fibers[current].done) ++current;
      fail("deadlock: a collective that some of its threads never reach");
    }
  }
}
}  // namespace host

// --- the device API ---
inline void __syncthreads() { host::block_meet.wait(host::threads, "__syncthreads"); }
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(uint32_t(x)); }
inline int __popc(uint32_t x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __ffsll(unsigned long long x) { return __builtin_ffsll(static_cast<long long>(x)); }
template <typename T>
T atomicAdd(T* p, T v) {  // one OS thread: every update is atomic
  const T old = *p;
  *p = old + v;
  return old;
}
template <typename T>
T __ldg(const T* p) {
  return *p;
}

#if K3_CUDA
inline uint32_t __ballot_sync(uint32_t mask, bool pred) {
  if (mask != 0xffffffffu) host::fail("a partial mask");
  uint32_t bits = 0;
  const auto all = host::exchange(pred, "ballot");
  for (int l = 0; l < 32; ++l) bits |= uint32_t(all[l]) << l;
  return bits;
}
inline uint32_t __reduce_max_sync(uint32_t, uint32_t v) {
  const auto all = host::exchange(v, "redux.max");
  return *std::max_element(all.begin(), all.end());
}
inline uint32_t __reduce_min_sync(uint32_t, uint32_t v) {
  const auto all = host::exchange(v, "redux.min");
  return *std::min_element(all.begin(), all.end());
}
template <typename T>
T __shfl_sync(uint32_t, T v, int src) {
  return host::exchange(v, "shfl")[src % 32];
}
template <typename T>
T __shfl_xor_sync(uint32_t, T v, int mask) {
  return host::exchange(v, "shfl.bfly")[(threadIdx.x % 32) ^ mask];
}
template <typename T>
T __shfl_up_sync(uint32_t, T v, unsigned d) {
  const auto all = host::exchange(v, "shfl.up");
  const int lane = threadIdx.x % 32;
  return lane >= int(d) ? all[lane - d] : v;
}
template <typename T>
T __shfl_down_sync(uint32_t, T v, unsigned d) {
  const auto all = host::exchange(v, "shfl.down");
  const int lane = threadIdx.x % 32;
  return lane + int(d) < 32 ? all[lane + d] : v;
}
inline void __syncwarp() { host::exchange(0, "syncwarp"); }
#else
inline unsigned long long __ballot(bool pred) {
  unsigned long long bits = 0;
  const auto all = host::exchange(pred, "ballot");
  for (int l = 0; l < 64; ++l) bits |= (unsigned long long)(all[l]) << l;
  return bits;
}
template <typename T>
T __shfl(T v, int src) {
  return host::exchange(v, "shfl")[src % 64];
}
template <typename T>
T __shfl_xor(T v, int mask) {
  return host::exchange(v, "shfl.bfly")[(threadIdx.x % 64) ^ mask];
}
template <typename T>
T __shfl_down(T v, unsigned d) {
  const auto all = host::exchange(v, "shfl.down");
  const int lane = threadIdx.x % 64;
  return lane + int(d) < 64 ? all[lane + d] : v;
}
#define __builtin_amdgcn_fence(order, scope) ((void)0)
inline void __builtin_amdgcn_wave_barrier() { host::exchange(0, "wave_barrier"); }
#endif

// --- k3's backend helpers (templates/common/k3_backend.h.j2), by their contracts ---
namespace k3 {
template <typename T>
float to_float(T x) {
  return float(x);
}
template <typename T>
T shfl(T v, int src) {
  return host::exchange(v, "shfl")[src % host::W];
}
template <typename T>
T shfl_xor(T v, int mask) {
  return host::exchange(v, "shfl.bfly")[(threadIdx.x % host::W) ^ mask];
}
template <typename T>
T shfl_down(T v, unsigned d) {
  const auto all = host::exchange(v, "shfl.down");
  const int lane = threadIdx.x % host::W;
  return lane + int(d) < host::W ? all[lane + d] : v;
}
inline int first_lane(bool pred) {
  const auto all = host::exchange(pred, "ballot");
  for (int l = 0; l < host::W; ++l)
    if (all[l]) return l;
  return -1;
}
inline uint32_t warp_inclusive_scan(uint32_t v) {
  const auto all = host::exchange(v, "scan");
  uint32_t sum = 0;
  for (int l = 0; l <= int(threadIdx.x % host::W); ++l) sum += all[l];
  return sum;
}
inline void histogram_add(uint32_t* hist, uint32_t digit, bool active) {
  if (active) atomicAdd(&hist[digit], 1u);
}
inline void pdl_wait() {}
inline void pdl_launch_dependents() {}
template <typename T, int N>
struct Vec {
  T v[N];
};
template <typename T, int N>
Vec<T, N> load(const T* p) {
  Vec<T, N> out;
  std::memcpy(out.v, p, sizeof(out.v));
  return out;
}
template <typename T, int N>
void store(T* p, const Vec<T, N>& v) {
  std::memcpy(p, v.v, sizeof(v.v));
}
// fp8 e4m3fn of x (|x| <= 448 after the callers' clamp), round to nearest even, saturating.
inline uint8_t fp8_e4m3(float x) {
  const uint32_t sign = (__float_as_uint(x) >> 24) & 0x80u;
  const float ax = std::fmin(std::fabs(x), 448.0f);
  if (ax < 0.015625f) return uint8_t(sign | uint32_t(std::nearbyint(ax * 512.0f)));  // subnormals: steps of 2^-9
  uint32_t u = __float_as_uint(ax);
  u += 0x7ffffu + ((u >> 20) & 1u);
  return uint8_t(sign | ((((u >> 23) - 120u) << 3) | ((u >> 20) & 7u)));
}
inline uint16_t fp8x2_e4m3(float a, float b) { return uint16_t(fp8_e4m3(a) | (fp8_e4m3(b) << 8)); }
}  // namespace k3
