// Runs route_quant_fused's kernel (its generated device code and kernel, K3_REGION) on the host
// through shim.h, one block at a time, and writes what it routes and quantizes: tests/test_route_host.py
// compares that with the family's oracle (k3gen.oracles.route_quant_fused).
// Usage: fused IN OUT CONFIG. IN: M (int64), M x E fp32 scores, E fp32 biases, M x H fp32 x. OUT: M x K
// fp32 weights, M x K int32 ids, M x H fp8 codes, M x WORDS int32 scales (renormalized, scale 1).
// CONFIG: the index of one of K3_HOST_CONFIGS, a list of CONFIG(knob values after <float, float, false,
// 16,>). -DK3_HOST_E= -DK3_HOST_K= -DK3_HOST_H= -DK3_HOST_WORDS= the family's shapes.
#include "shim.h"

namespace fam {
#include K3_REGION
}
using namespace fam;

namespace {
constexpr int E = K3_HOST_E, K = K3_HOST_K, H = K3_HOST_H, WORDS = K3_HOST_WORDS;

struct Buffers {
  int64_t M;
  std::vector<float> scores, bias, x, weights;
  std::vector<int32_t> ids, scale;
  std::vector<uint8_t> q;
};

// Every block of the grid, and past it: the kernel returns from blocks with no row (at most M quant
// blocks follow the routing blocks, whatever the rows per quant block).
template <int strategy, int block_threads, int... quant_rows>
void run(Buffers& b) {
  const int64_t blocks = routing_blocks<strategy, block_threads>(b.M) + b.M;
  for (int64_t block = 0; block < blocks; ++block) {
    blockIdx.x = unsigned(block);
    host::run_block(block_threads, [&] {
      route_quant_kernel<float, float, false, 16, strategy, block_threads, quant_rows...>(
          b.scores.data(), E, b.bias.data(), b.x.data(), H, b.weights.data(), b.ids.data(), b.q.data(), b.scale.data(),
          b.M, 1, 1.0f);
    });
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) return 1;
  FILE* in = std::fopen(argv[1], "rb");
  Buffers b;
  if (!in || std::fread(&b.M, 8, 1, in) != 1) return 1;
  b.scores.resize(b.M * E);
  b.bias.resize(E);
  b.x.resize(b.M * H);
  for (auto* v : {&b.scores, &b.bias, &b.x})
    if (std::fread(v->data(), 4, v->size(), in) != v->size()) return 1;
  std::fclose(in);
  b.weights.assign(b.M * K, 0.0f);
  b.ids.assign(b.M * K, -1);
  b.q.assign(b.M * H, 0xAA);  // filler: a row the kernel leaves unwritten differs from the oracle's codes
  b.scale.assign(b.M * WORDS, -1);
  int config = std::atoi(argv[3]), index = 0;
  bool ran = false;
#define CONFIG(...) \
  if (config == index++) { \
    run<__VA_ARGS__>(b); \
    ran = true; \
  }
  K3_HOST_CONFIGS
#undef CONFIG
  if (!ran) return 2;
  FILE* out = std::fopen(argv[2], "wb");
  std::fwrite(b.weights.data(), 4, b.weights.size(), out);
  std::fwrite(b.ids.data(), 4, b.ids.size(), out);
  std::fwrite(b.q.data(), 1, b.q.size(), out);
  std::fwrite(b.scale.data(), 4, b.scale.size(), out);
  std::fclose(out);
  return 0;
}
