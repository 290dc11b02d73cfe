// The CUDA and HIP device API (and k3's backend helpers) that the route template's strategies and
// route_quant_fused's kernel use, on the host: each GPU thread of one block is a fiber (ucontext) of
// one OS thread, and every collective (barrier, vote, shuffle, redux) waits until all the threads it
// spans arrive. So the generated device code runs unchanged on a CPU (tests/test_route_host.py), its
// collectives checked: a lane that skips one its warp reaches (divergence) or two lanes that reach
// different ones stop the run with a message.
// Shared memory is a function's static: it keeps the previous block's bytes, where a GPU's start
// undefined, so a read before any write may pass here. Compile with -DK3_CUDA=1 (32-lane warps) or
// -DK3_HIP=1 (64-lane waves), and an include path holding backend.inc (see its #include below).
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
inline uint32_t launches = 0;  // seeds each launch's order of threads

// The next value of a seeded linear congruential sequence (the tests' inputs and the launch order).
inline uint32_t next_random(uint32_t& seed) {
  seed = seed * 1664525u + 1013904223u;
  return seed;
}
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

// Every shuffle and vote: lane `src` of the warp's values, src from this lane's (one exchange).
enum class From { lane, xor_lane, lane_below, lane_above };
template <typename T>
T shuffle(T v, From from, int d, const char* what) {
  const auto all = exchange(v, what);
  const int lane = current % W;
  switch (from) {
    case From::lane: return all[d % W];
    case From::xor_lane: return all[lane ^ d];
    case From::lane_below: return lane >= d ? all[lane - d] : v;
    default: return lane + d < W ? all[lane + d] : v;
  }
}
inline uint64_t vote(bool pred) {
  const auto all = exchange(pred, "ballot");
  uint64_t bits = 0;
  for (int l = 0; l < W; ++l) bits |= uint64_t(all[l]) << l;
  return bits;
}

inline void trampoline() {
  body();
  fibers[current].done = true;
  ++progress;
}

// Runs fn as `n` threads of one block (threadIdx.x = 0 .. n-1), to completion. Each launch runs its
// threads in another order (a seeded shuffle): which thread's atomic comes first, and so which slot a
// gathered key takes, varies as on a GPU, so code that depends on it fails somewhere.
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
  std::vector<int> order(n);
  uint32_t seed = 2654435761u * ++launches;
  for (int t = 0; t < n; ++t) order[t] = t;
  for (int t = n - 1; t > 0; --t) std::swap(order[t], order[(next_random(seed) >> 8) % uint32_t(t + 1)]);
  for (int left = n; left > 0;) {
    const long before = progress;
    left = 0;
    for (int t : order) {
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
  return uint32_t(host::vote(pred));
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
  return host::shuffle(v, host::From::lane, src, "shfl");
}
template <typename T>
T __shfl_xor_sync(uint32_t, T v, int mask) {
  return host::shuffle(v, host::From::xor_lane, mask, "shfl.bfly");
}
template <typename T>
T __shfl_up_sync(uint32_t, T v, unsigned d) {
  return host::shuffle(v, host::From::lane_below, int(d), "shfl.up");
}
template <typename T>
T __shfl_down_sync(uint32_t, T v, unsigned d) {
  return host::shuffle(v, host::From::lane_above, int(d), "shfl.down");
}
inline void __syncwarp() { host::exchange(0, "syncwarp"); }
#else
inline unsigned long long __ballot(bool pred) { return host::vote(pred); }
template <typename T>
T __shfl(T v, int src) {
  return host::shuffle(v, host::From::lane, src, "shfl");
}
template <typename T>
T __shfl_xor(T v, int mask) {
  return host::shuffle(v, host::From::xor_lane, mask, "shfl.bfly");
}
template <typename T>
T __shfl_down(T v, unsigned d) {
  return host::shuffle(v, host::From::lane_above, int(d), "shfl.down");
}
#define __builtin_amdgcn_fence(order, scope) ((void)0)
inline void __builtin_amdgcn_wave_barrier() { host::exchange(0, "wave_barrier"); }
#endif

namespace k3 {
// The inclusive prefix sum by its contract: HIP's takes DPP row shifts, which are not emulated.
inline uint32_t warp_inclusive_scan(uint32_t v) {
  const auto all = host::exchange(v, "scan");
  uint32_t sum = 0;
  for (int l = 0; l <= int(threadIdx.x % host::W); ++l) sum += all[l];
  return sum;
}
}  // namespace k3

// k3's other helpers the kernels call: the generated k3_backend.h's own code (vectors, lane exchange,
// the software fp8 conversion, histogram, PDL), cut out of it by tests/test_route_host.py.
#include "backend.inc"
