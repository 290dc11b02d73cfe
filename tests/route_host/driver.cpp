// Runs the route template's block and warp strategies (the generated device code of one family,
// K3_REGION, cut out of its .cuh by tests/test_route_host.py) on the host through shim.h, over rows
// of random, routing-like, tied, all-equal, NaN and huge-negative scores, and checks every output
// bit for bit against a plain sort of the same composite keys. Prints one line per strategy and block
// size: rows and mismatches (the first three shown).
// -DK3_HOST_E= -DK3_HOST_K= the family's num_experts and top_k, -DK3_HOST_ROWS= the rows.
#include "shim.h"

namespace fam {
#include K3_REGION
}
using namespace fam;

namespace {
constexpr int E = K3_HOST_E, K = K3_HOST_K, kRows = K3_HOST_ROWS;

// Row r of the test: its kind is r % 8.
void make_row(int r, std::vector<float>& x, std::vector<float>& bias, uint32_t& seed) {
  auto next = [&] { return host::next_random(seed); };
  auto normal = [&] {  // Box-Muller of two uniforms
    const double u1 = (next() + 1.0) / 4294967297.0, u2 = (next() + 1.0) / 4294967297.0;
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  };
  for (int e = 0; e < E; ++e) bias[e] = 0.1f * normal();
  for (int e = 0; e < E; ++e) {
    switch (r % 8) {
      case 0: case 1: case 2: x[e] = normal(); break;                     // random (most rows)
      case 3: x[e] = 0.5f; break;                                         // all equal
      case 4: x[e] = e % 40 == 0 ? 3.0f : e % 7 == 0 ? 2.0f : -1.0f; break;  // ties across K
      case 5: x[e] = e % 9 == 0 ? NAN : normal(); break;                  // NaNs
      case 6: x[e] = -100.0f - float(e % 5); break;                       // huge negative
      default: x[e] = float(e % 3); break;                                // few values
    }
  }
  if (r % 16 == 3) std::fill(bias.begin(), bias.end(), 0.0f);  // all equal, bias too: only tie bits differ
}

// The top K by a plain sort of the composite keys; weights as the kernel writes them.
void reference(const std::vector<float>& x, const std::vector<float>& bias, bool renormalize, float scale,
               float* weights, int32_t* ids) {
  std::vector<std::pair<uint64_t, int>> keys(E);
  std::vector<float> weight(E);
  for (int e = 0; e < E; ++e) {
    weight[e] = route_score(x[e]);
    const float value = kBiasAt != kBiasNone ? weight[e] + bias[e] : weight[e];
    keys[e] = {(uint64_t(rank_key(value)) << 16) | tie_priority(e), e};
  }
  std::sort(keys.begin(), keys.end(), [](auto& a, auto& b) { return a.first > b.first; });
  float sum = 0.0f;
  for (int j = 0; j < K; ++j) sum += weight[keys[j].second];
  const float denom = renorm_denominator(sum, renormalize);
  for (int j = 0; j < K; ++j) {
    int slot = j;
    if (!kSorted) {
      slot = 0;
      for (int i = 0; i < K; ++i) slot += keys[i].second < keys[j].second;
    }
    weights[slot] = weight[keys[j].second] / denom * scale;
    ids[slot] = keys[j].second;
  }
}

template <int strategy, int threads>
void check() {
  if constexpr (strategy == kStrategyWarp && K > K3_WARP_SIZE) return;  // the warp keeps pick r on lane r
  constexpr int per_block = strategy == kStrategyBlock ? 1 : threads / K3_WARP_SIZE;
  std::vector<float> x(kRows * E), bias(E), w(kRows * K), want(K);
  std::vector<int32_t> ids(kRows * K), want_ids(K);
  std::vector<std::vector<float>> biases;
  uint32_t seed = 12345u + threads * 7u + strategy;
  int mismatches = 0;
  // Every row draws its scores and a bias (make_row). A launch routes per_block rows with its first
  // row's bias (the kernel reads one per batch): one row a launch under the block strategy.
  std::vector<float> row(E);
  for (int r = 0; r < kRows; ++r) {
    make_row(r, row, bias, seed);
    std::copy(row.begin(), row.end(), x.begin() + r * E);
    biases.push_back(bias);
  }
  for (int r = 0; r < kRows; r += per_block) {
    const int m = std::min(per_block, kRows - r);
    const std::vector<float>& b = biases[r];
    const bool renormalize = r % 5 != 4;
    const float scale = r % 3 == 0 ? 2.5f : 1.0f;
    host::run_block(threads, [&] {
      route_block<strategy, threads, float, float, E, K>(0, x.data() + r * E, E, b.data(), w.data() + r * K,
                                                           ids.data() + r * K, m, renormalize, scale);
    });
    for (int i = 0; i < m; ++i) {
      const std::vector<float> xr(x.begin() + (r + i) * E, x.begin() + (r + i + 1) * E);
      reference(xr, b, renormalize, scale, want.data(), want_ids.data());
      const bool same = std::memcmp(want.data(), w.data() + (r + i) * K, K * 4) == 0 &&
                        std::memcmp(want_ids.data(), ids.data() + (r + i) * K, K * 4) == 0;
      if (!same && mismatches++ < 3) {
        std::printf("mismatch strategy=%d threads=%d row=%d kind=%d\n  want:", strategy, threads, r + i, (r + i) % 8);
        for (int j = 0; j < K; ++j) std::printf(" %d:%a", want_ids[j], want[j]);
        std::printf("\n  got: ");
        for (int j = 0; j < K; ++j) std::printf(" %d:%a", ids[(r + i) * K + j], w[(r + i) * K + j]);
        std::printf("\n");
      }
    }
  }
  std::printf("strategy=%d threads=%d rows=%d mismatches=%d\n", strategy, threads, kRows, mismatches);
}
}  // namespace

int main() {
  check<kStrategyBlock, 128>();
  check<kStrategyBlock, 256>();
  check<kStrategyBlock, 448>();
  check<kStrategyBlock, 512>();
  check<kStrategyWarp, 128>();
  check<kStrategyWarp, 256>();
  return 0;
}
