// Runs one routing family's strategies (its generated device code, K3_REGION) on the host through
// shim.h over rows read from a file, and writes the weights and ids they route: tests/test_route_host.py
// compares them with the family's oracle (k3gen.oracles.route_topk), which follows every routing axis.
// Usage: rows IN OUT STRATEGY THREADS. IN: M (int64), M x E fp32 scores, E fp32 biases. OUT: M x K fp32
// weights, M x K int32 ids (renormalized, scale 1). Exit 2: a strategy this family cannot take.
// -DK3_HOST_E= -DK3_HOST_K= the family's num_experts and top_k; -DK3_HOST_LANES=1 where its header has
// the lanes strategies.
#include "shim.h"

namespace fam {
#include K3_REGION
}
using namespace fam;

namespace {
constexpr int E = K3_HOST_E, K = K3_HOST_K;

// What each strategy's static_asserts require of the family.
template <int strategy>
constexpr bool takes() {
  if constexpr (strategy == kStrategyBlock) return kScoring != kScoringSoftmax && !kScoringAfter && kGroups == 1;
  if constexpr (strategy == kStrategyThread) return E <= 32 && kGroups == 1;
#if K3_HOST_LANES
  if constexpr (strategy_lanes(strategy) > 0) return E >= strategy_lanes(strategy) && kGroups == 1;
#endif
  return K <= K3_WARP_SIZE;  // the warp keeps pick r on lane r
}

template <int strategy, int threads>
bool route(int64_t M, const float* scores, const float* bias, float* weights, int32_t* ids) {
  if constexpr (!takes<strategy>()) {
    return false;
  } else {
    for (int64_t b = 0; b < routing_blocks<strategy, threads>(M); ++b)
      host::run_block(threads, [&] {
        route_block<strategy, threads, float, float, E, K>(b, scores, E, bias, weights, ids, M, true, 1.0f);
      });
    return true;
  }
}

template <int strategy>
bool route_at(int threads, int64_t M, const float* s, const float* b, float* w, int32_t* ids) {
  return threads == 128 ? route<strategy, 128>(M, s, b, w, ids) : route<strategy, 256>(M, s, b, w, ids);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) return 1;
  FILE* in = std::fopen(argv[1], "rb");
  int64_t M = 0;
  if (!in || std::fread(&M, 8, 1, in) != 1) return 1;
  std::vector<float> scores(M * E), bias(E), weights(M * K);
  std::vector<int32_t> ids(M * K);
  if (std::fread(scores.data(), 4, scores.size(), in) != scores.size() || std::fread(bias.data(), 4, E, in) != size_t(E))
    return 1;
  std::fclose(in);
  const int strategy = std::atoi(argv[3]), threads = std::atoi(argv[4]);
  const float* s = scores.data();
  const float* b = bias.data();
  bool ran = false;
  switch (strategy) {
    case kStrategyBlock: ran = route_at<kStrategyBlock>(threads, M, s, b, weights.data(), ids.data()); break;
    case kStrategyWarp: ran = route_at<kStrategyWarp>(threads, M, s, b, weights.data(), ids.data()); break;
    case kStrategyWarpRounds: ran = route_at<kStrategyWarpRounds>(threads, M, s, b, weights.data(), ids.data()); break;
    case kStrategyThread: ran = route_at<kStrategyThread>(threads, M, s, b, weights.data(), ids.data()); break;
#if K3_HOST_LANES  // the lanes strategies: in the header of a family that may select them
    case kStrategyLanes8: ran = route_at<kStrategyLanes8>(threads, M, s, b, weights.data(), ids.data()); break;
    case kStrategyLanes4: ran = route_at<kStrategyLanes4>(threads, M, s, b, weights.data(), ids.data()); break;
#endif
    default: return 1;
  }
  if (!ran) return 2;
  FILE* out = std::fopen(argv[2], "wb");
  std::fwrite(weights.data(), 4, weights.size(), out);
  std::fwrite(ids.data(), 4, ids.size(), out);
  std::fclose(out);
  return 0;
}
