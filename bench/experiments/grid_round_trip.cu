// What does a grid-wide sum after the last row cost, at the least? The norm
// backward's dgamma/dbeta need every row before they are final, so the op
// ends with a round trip across SMs after its last rows: either a second
// kernel (norm_backward_finalize) or tickets inside the kernel. This times
// that round trip with nothing else around it, on the bytes of the cases the
// 1.25x target misses: the copy kernel (the target's reference), a kernel of
// the backward's data movement alone (read x and dy, write dx: three
// tensors, the copy kernel's access pattern on a persistent grid, one
// multiply per element), and that kernel with a part of column sums per
// block (2 x cols floats, as the norm backward's), added up by each of: a finalize kernel started by programmatic dependent
// launch, the same with the dependent launch allowed at the kernel's start,
// a plain second launch, and the kernel's last block after a ticket. Then,
// on sm_90, the rows in 256-thread blocks (four per SM: more blocks, more
// parts) with a part per block, or per thread block cluster of 4 or 8
// blocks that first add up their sums through distributed shared memory:
// read from each other's after cluster barriers, or pushed into each
// other's by st.async counted on transaction barriers (no fence).
// Built beside xvk-tune (bench/CMakeLists.txt) as xvk-grid-round-trip.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <string>
#include <type_traits>
#include <vector>

#include <cooperative_groups.h>

#include "bench_util.cuh"
#include "cuda/portability.cuh"  // transaction barriers, store_async_to_cluster_block

using namespace bench;

namespace {

// A persistent grid of one or two 1024-thread blocks per SM: few parts (one
// or two per SM), which a block adds up in one to three rounds of loads per
// tile of 64 floats, as small a finish as the sums can have. A part is the norm
// backward's: dgamma's and dbeta's sums, 2 * cols floats.
constexpr int kThreads = 1024, kTile = 64, kLanes = kThreads / kTile, kInFlight = 8;

enum class Sums { kNone, kPart, kTicket };

// The block adds up tile `tile` (64 floats) of `count` parts of `width`
// floats: kLanes lanes per float, kInFlight parts in flight each, then the
// lanes in order.
__device__ void add_up(const float *parts, int count, int width, int tile, float *out) {
  __shared__ float lanes[kThreads];
  const int lane = int(threadIdx.x) / kTile, col = tile * kTile + int(threadIdx.x) % kTile;
  const bool in = col < width;
  float s[kInFlight] = {};
  int p = lane;
  for (; in && p + (kInFlight - 1) * kLanes < count; p += kInFlight * kLanes) {
    float v[kInFlight];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) v[k] = parts[size_t(p + k * kLanes) * width + col];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) s[k] += v[k];
  }
  for (; in && p < count; p += kLanes) s[0] += parts[size_t(p) * width + col];
  float t = 0.0f;
#pragma unroll
  for (int k = 0; k < kInFlight; ++k) t += s[k];
  lanes[threadIdx.x] = t;
  __syncthreads();
  if (lane == 0 && in) {
    t = 0.0f;
    for (int l = 0; l < kLanes; ++l) t += lanes[l * kTile + int(threadIdx.x)];
    out[col] = t;
  }
  __syncthreads();  // lanes, before the next tile
}

// dx = x * dy over n 16-byte vectors (as floats), grid-stride, four vectors
// in flight per thread as in the copy kernel; returns the thread's sum of dx.
__device__ __forceinline__ float rows_product(const uint4 *__restrict__ x, const uint4 *__restrict__ dy,
                                              uint4 *__restrict__ dx, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  float acc = 0.0f;
  auto mul = [&](uint4 a, uint4 b) {
    float4 r;
    r.x = __uint_as_float(a.x) * __uint_as_float(b.x), r.y = __uint_as_float(a.y) * __uint_as_float(b.y);
    r.z = __uint_as_float(a.z) * __uint_as_float(b.z), r.w = __uint_as_float(a.w) * __uint_as_float(b.w);
    acc += (r.x + r.y) + (r.z + r.w);
    return make_uint4(__float_as_uint(r.x), __float_as_uint(r.y), __float_as_uint(r.z), __float_as_uint(r.w));
  };
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a[4], b[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) a[k] = x[i + k * stride], b[k] = dy[i + k * stride];
#pragma unroll
    for (int k = 0; k < 4; ++k) dx[i + k * stride] = mul(a[k], b[k]);
  }
  for (; i < n; i += stride) dx[i] = mul(x[i], dy[i]);
  return acc;
}

// The rows (rows_product) in 1024-thread blocks. kPart and kTicket: each
// block also writes a part of `width` floats (from its threads' sums of dx);
// kTicket: the last block to take a ticket adds up all parts into out, a
// tile after the other. kEarly: lets the dependent finalize launch at once
// (griddepcontrol.launch_dependents).
template <Sums S, bool kEarly>
__global__ void __launch_bounds__(kThreads, 2)  // two blocks per SM fit: at most 32 registers
    backward_like(const uint4 *__restrict__ x, const uint4 *__restrict__ dy, uint4 *__restrict__ dx, size_t n,
                  float *parts, int width, unsigned *ticket, float *out) {
#if __CUDA_ARCH__ >= 900
  if constexpr (kEarly) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const float acc = rows_product(x, dy, dx, n);
  if constexpr (S != Sums::kNone) {
    // The block's part: its threads' sums, coalesced stores.
    __shared__ float sums[kThreads];
    sums[threadIdx.x] = acc;
    __syncthreads();
    for (int c = int(threadIdx.x); c < width; c += kThreads) parts[size_t(blockIdx.x) * width + c] = sums[c % kThreads];
  }
  if constexpr (S == Sums::kTicket) {
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();  // the block's part, before its ticket
      last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();  // every part, after the last ticket
    for (int tile = 0; tile * kTile < width; ++tile) add_up(parts, int(gridDim.x), width, tile, out);
    if (threadIdx.x == 0) *ticket = 0;  // for the next launch
  }
}

// Block x adds up tile x of `count` parts, after waiting for the previous
// kernel (a no-op unless started by a dependent launch; those need sm_90).
__global__ void __launch_bounds__(kThreads) finalize(const float *parts, int count, int width, float *out) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  add_up(parts, count, width, int(blockIdx.x), out);
}

void launch_finalize(bool dependent, const float *parts, int count, int width, float *out) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned((width + kTile - 1) / kTile)), cfg.blockDim = dim3(kThreads), cfg.stream = g_stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = dependent ? &attr : nullptr, cfg.numAttrs = dependent ? 1 : 0;
  CUDA_OK(cudaLaunchKernelEx(&cfg, finalize, parts, count, width, out));
}

// The rows (rows_product) in 256-thread blocks, kSmallPerSm per SM: more
// blocks, so more parts, unless a cluster of C blocks (sm_90) adds up its
// blocks' sums through distributed shared memory first and writes one part
// (block rank r adds up its share of the floats over ranks 0..C-1 in order).
// kParts false: no part at all (the rows alone).
constexpr int kSmallThreads = 256, kSmallPerSm = 4, kMaxWidth = 2048;

// kPush: rank q owns columns [q * share, (q + 1) * share) of the part; each
// block stores its values of those columns into rank q's `pushed` with
// st.async, counted on q's transaction barrier, and q adds them up in rank
// order once they are in. No cluster barrier after the rows (the one at the
// start only makes sure every block has set up its barrier).
template <int C, bool kParts, bool kPush = false>
__global__ void __launch_bounds__(kSmallThreads)
    small_blocks(const uint4 *__restrict__ x, const uint4 *__restrict__ dy, uint4 *__restrict__ dx, size_t n,
                 float *parts, int width) {
  __shared__ __align__(16) float pushed[kPush ? kMaxWidth : 2];  // [rank][share]
  __shared__ uint64_t arrived;
  if constexpr (kPush) {
    if (threadIdx.x == 0) xvk::gpu::transaction_barrier_init(&arrived);
    xvk::gpu::cluster_arrive();
  }
  const float acc = rows_product(x, dy, dx, n);
  if constexpr (kParts) {
    // Staged in shared memory for every variant, so that they differ only by
    // how the clusters' blocks meet (no cluster, barriers and DSMEM reads, or
    // pushes).
    __shared__ float sums[kSmallThreads];
    __shared__ __align__(16) float mine[kMaxWidth];
    sums[threadIdx.x] = acc;
    __syncthreads();
    for (int c = int(threadIdx.x); c < width; c += kSmallThreads) mine[c] = sums[c % kSmallThreads];
    if constexpr (kPush) {
      __syncthreads();
      const int rank = int(xvk::gpu::cluster_block_rank()), share = ((width + C - 1) / C + 1) & ~1;
      const int begin = rank * share, end = min(width, begin + share), own = max(0, end - begin);
      xvk::gpu::cluster_wait();
      if (threadIdx.x == 0) xvk::gpu::transaction_barrier_expect(&arrived, unsigned(C * own * sizeof(float)));
      for (int c = 2 * int(threadIdx.x); c < width; c += 2 * kSmallThreads) {
        const int q = c / share;
        xvk::gpu::store_async_to_cluster_block(reinterpret_cast<float2 *>(&pushed[rank * share + c - q * share]),
                                               &arrived, unsigned(q), make_float2(mine[c], mine[c + 1]));
      }
      xvk::gpu::transaction_barrier_wait(&arrived, 0);
      for (int i = int(threadIdx.x); i < own; i += kSmallThreads) {
        float t = 0.0f;
#pragma unroll
        for (int r = 0; r < C; ++r) t += pushed[r * share + i];
        parts[size_t(blockIdx.x / C) * width + begin + i] = t;
      }
    } else if constexpr (C == 1) {
      for (int c = int(threadIdx.x); c < width; c += kSmallThreads) parts[size_t(blockIdx.x) * width + c] = mine[c];
    } else {
#if __CUDA_ARCH__ >= 900
      namespace cg = cooperative_groups;
      cg::cluster_group cluster = cg::this_cluster();
      cluster.sync();  // every block's sums in its shared memory
      const int rank = int(cluster.block_rank()), share = (width + C - 1) / C;
      const int end = min(width, (rank + 1) * share);
      for (int c = rank * share + int(threadIdx.x); c < end; c += kSmallThreads) {
        float t = 0.0f;
#pragma unroll
        for (int q = 0; q < C; ++q) t += cluster.map_shared_rank(mine, q)[c];
        parts[size_t(blockIdx.x / C) * width + c] = t;
      }
      cluster.sync();  // no block leaves while another reads its shared memory
#else
      __trap();  // clusters need sm_90
#endif
    }
  }
}

template <int C, bool kParts, bool kPush = false>
void launch_small(int blocks, const uint4 *x, const uint4 *dy, uint4 *dx, size_t n, float *parts, int width) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(blocks)), cfg.blockDim = dim3(kSmallThreads), cfg.stream = g_stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = C, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
  cfg.attrs = &attr, cfg.numAttrs = 1;
  CUDA_OK(cudaLaunchKernelEx(&cfg, small_blocks<C, kParts, kPush>, x, dy, dx, n, parts, width));
}

struct Case {
  const char *name;
  int64_t rows, cols, element_bytes;
};
// The norm backward cases over 1.25x the copy time (bench/results/h100-2026-11-27-rows-vector-partials.txt).
const Case kCases[] = {{"49152 x 32 fp16", 49152, 32, 2},   {"49152 x 64 fp16", 49152, 64, 2},
                       {"49152 x 128 fp16", 49152, 128, 2}, {"8192 x 768 fp16", 8192, 768, 2},
                       {"8192 x 1024 fp16", 8192, 1024, 2}, {"49152 x 32 fp32", 49152, 32, 4},
                       {"49152 x 64 fp32", 49152, 64, 4},   {"8192 x 768 fp32", 8192, 768, 4}};

// One case's tensors (filled), `blocks` parts of 2 * cols floats and the
// sums' output, and its copy time.
struct CaseData {
  size_t tensor_bytes, n;
  int blocks, width;
  Buffer x, dy, dx, parts, out;
  double copy;
  CaseData(const Case &c, int blocks_)
      : tensor_bytes(size_t(c.rows * c.cols * c.element_bytes)), n(tensor_bytes / 16), blocks(blocks_),
        width(int(2 * c.cols)), x(tensor_bytes), dy(tensor_bytes), dx(tensor_bytes),
        parts(size_t(blocks) * width * 4), out(size_t(width) * 4) {
    fill(x.p, 0, tensor_bytes / 4, 1, 1.0f, 0.5f);
    fill(dy.p, 0, tensor_bytes / 4, 2, 0.0f, 1.0f);
    copy = copy_ceiling(3 * tensor_bytes).best();
  }
  const uint4 *xv() const { return static_cast<const uint4 *>(x.p); }
  const uint4 *dyv() const { return static_cast<const uint4 *>(dy.p); }
  uint4 *dxv() const { return static_cast<uint4 *>(dx.p); }
  float *pp() const { return static_cast<float *>(parts.p); }
  float *op() const { return static_cast<float *>(out.p); }
  void header(const char *name, const char *what) const {
    std::printf("\n%s: 3 x %.2f MB, %d %s\n", name, tensor_bytes / 1e6, blocks, what);
    std::printf("  copy of the same bytes (ceiling)       %7.2f us   1.25x: %.2f us\n", copy, 1.25 * copy);
  }
  void row(const char *what, double us, double rows_us) const {
    std::printf("  %-38s %7.2f us  %5.3fx copy  +%5.2f us over the rows alone\n", what, us, us / copy, us - rows_us);
  }
};

}  // namespace

// xvk-grid-round-trip [--reps N] [--case NAME] [--clusters]: NAME as printed (say "8192 x 768 fp16"), for one
// case alone (under ncu, say); --clusters: only the 256-thread blocks' comparison (sm_90).
int main(int argc, char **argv) {
  std::string only;
  bool clusters_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      g_reps = parse_reps("--reps", argv[++i]);
    } else if (!std::strcmp(argv[i], "--case") && i + 1 < argc) {
      only = argv[++i];
    } else if (!std::strcmp(argv[i], "--clusters")) {
      clusters_only = true;
    } else {
      std::fprintf(stderr, "usage: xvk-grid-round-trip [--reps N] [--case NAME] [--clusters]\n");
      return 2;
    }
  }
  if (!only.empty() && std::none_of(std::begin(kCases), std::end(kCases), [&](const Case &c) { return only == c.name; })) {
    std::fprintf(stderr, "--case '%s' names no case; the cases are:\n", only.c_str());
    for (const Case &c : kCases) std::fprintf(stderr, "  %s\n", c.name);
    return 2;
  }
  init();
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; median of %d launches, L2 flushed before each (bench::time_us)\n", prop.name,
              prop.multiProcessorCount, g_reps);
  Buffer counter(256);
  CUDA_OK(cudaMemsetAsync(counter.p, 0, 256, g_stream));
  auto *ticket = static_cast<unsigned *>(counter.p);
  for (const Case &c : kCases) {
    if (!only.empty() && only != c.name) continue;
    for (int per_sm = 1; per_sm <= 2 && !clusters_only; ++per_sm) {  // one part per SM, then two (the tuned norm backwards' b2)
      const CaseData d(c, prop.multiProcessorCount * per_sm);
      auto rows_kernel = [&](auto sums, auto early) {
        backward_like<decltype(sums)::value, decltype(early)::value><<<d.blocks, kThreads, 0, g_stream>>>(
            d.xv(), d.dyv(), d.dxv(), d.n, d.pp(), d.width, ticket, d.op());
      };
      using None = std::integral_constant<Sums, Sums::kNone>;
      using Part = std::integral_constant<Sums, Sums::kPart>;
      using Ticket = std::integral_constant<Sums, Sums::kTicket>;
      const std::false_type late{};
      const std::true_type early{};
      const double rows = time_us([&] { rows_kernel(None{}, late); });
      const double written = time_us([&] { rows_kernel(Part{}, late); });
      const double pdl = time_us([&] {
        rows_kernel(Part{}, late);
        launch_finalize(true, d.pp(), d.blocks, d.width, d.op());
      });
      const double pdl_early = time_us([&] {
        rows_kernel(Part{}, early);
        launch_finalize(true, d.pp(), d.blocks, d.width, d.op());
      });
      const double plain = time_us([&] {
        rows_kernel(Part{}, late);
        launch_finalize(false, d.pp(), d.blocks, d.width, d.op());
      });
      const double tickets = time_us([&] { rows_kernel(Ticket{}, late); });
      char what[64];
      std::snprintf(what, sizeof what, "parts of %d floats", d.width);
      d.header(c.name, what);
      d.row("rows alone (x, dy in; dx out)", rows, rows);
      d.row("+ parts written, no finalize", written, rows);
      d.row("+ parts, finalize by dependent launch", pdl, rows);
      d.row("  the same, launch allowed at start", pdl_early, rows);
      d.row("+ parts, finalize by plain launch", plain, rows);
      d.row("+ parts, last block after a ticket", tickets, rows);  // a tile after the other
      std::fflush(stdout);
    }
    if (prop.major < 9) continue;
    // 256-thread blocks, kSmallPerSm per SM: one part per block, or per cluster of 4 or 8 blocks.
    const CaseData d(c, prop.multiProcessorCount * kSmallPerSm);
    auto small = [&](auto clusters, auto parts, auto push) {
      launch_small<decltype(clusters)::value, decltype(parts)::value, decltype(push)::value>(
          d.blocks, d.xv(), d.dyv(), d.dxv(), d.n, d.pp(), d.width);
      if constexpr (decltype(parts)::value) launch_finalize(true, d.pp(), d.blocks / decltype(clusters)::value, d.width, d.op());
    };
    using One = std::integral_constant<int, 1>;
    using Four = std::integral_constant<int, 4>;
    using Eight = std::integral_constant<int, 8>;
    const std::false_type no_parts, read;
    const std::true_type with_parts, pushed;
    const double rows = time_us([&] { small(One{}, no_parts, read); });
    // The first is the reference for the others' sums.
    const struct {
      const char *name;
      std::function<void()> run;
    } ways[] = {{"+ a part per block, dependent finalize", [&] { small(One{}, with_parts, read); }},
                {"+ a part per cluster of 4 (DSMEM)", [&] { small(Four{}, with_parts, read); }},
                {"+ a part per cluster of 8 (DSMEM)", [&] { small(Eight{}, with_parts, read); }},
                {"+ a part per cluster of 4 (pushed)", [&] { small(Four{}, with_parts, pushed); }},
                {"+ a part per cluster of 8 (pushed)", [&] { small(Eight{}, with_parts, pushed); }}};
    std::vector<double> us;
    for (const auto &way : ways) us.push_back(time_us(way.run));
    char what[64];
    std::snprintf(what, sizeof what, "blocks of %d threads", kSmallThreads);
    d.header(c.name, what);
    d.row("rows alone", rows, rows);
    for (size_t w = 0; w < std::size(ways); ++w) d.row(ways[w].name, us[w], rows);
    // The sums of each cluster variant against those of a part per block:
    // other orders of addition, so differences of float rounding, measured
    // against the largest sum (a column's sum may cancel to near 0).
    auto sums_of = [&](const std::function<void()> &run) {
      CUDA_OK(cudaMemset(d.op(), 0xff, size_t(d.width) * 4));
      run();
      std::vector<float> v(size_t(d.width));
      CUDA_OK(cudaMemcpy(v.data(), d.op(), v.size() * 4, cudaMemcpyDeviceToHost));
      return v;
    };
    const std::vector<float> want = sums_of(ways[0].run);
    double scale = 0.0;
    for (float w : want) scale = std::max(scale, double(std::abs(w)));
    std::printf("  sums against a part per block, largest difference / largest sum (DSMEM 4, 8; pushed 4, 8):");
    bool ok = true;
    for (size_t w = 1; w < std::size(ways); ++w) {
      const std::vector<float> g = sums_of(ways[w].run);
      double worst = 0.0;
      for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, g[i] == g[i] ? std::abs(double(g[i]) - want[i]) : 1e30);
      std::printf(" %.1e", worst / scale);
      ok = ok && worst / scale < 1e-5;
    }
    std::printf("%s\n", ok ? "" : "  MISMATCH");
    std::fflush(stdout);
  }
  return 0;
}
