// layer_norm and rms_norm, forward and backward (args.rms tells them apart).
//
// Variants, as for softmax (see softmax.cu):
//  - registers: a group of G lanes (or the whole block) holds the row; the
//    mean and variance are two exact passes over registers (one memory read);
//  - shared (forward only): a block reads the row once into shared memory,
//    summing it, then takes the variance and normalizes the row from there;
//  - reread: reads the row from memory twice, merging per-vector Welford
//    statistics (Chan's parallel formula) in the first read; its backward
//    keeps dgamma/dbeta sums in registers while they fit (kRereadSums),
//    else sums them in a separate pass over columns.
// dgamma/dbeta are reduced without float atomics: each block (register
// variants) or row chunk (reread) writes its partial sums, which are added
// in a fixed order (by the kernel's last block when they are few, else by
// a finalize kernel), so results are bitwise reproducible.
// The register kernels load their next rows while working on the current
// ones where registers allow (kPrefetch: the backward's lanes of up to 32
// elements, the forward's group lanes of up to 16).
#include <algorithm>

#include "cuda/common.cuh"
#include "cuda/launch.cuh"

namespace xvk::gpu {
namespace {

// gamma/beta: x's dtype or float32, told at run time (a uniform branch).
template <class T, int VEC>
__device__ __forceinline__ void load_param(const void *p, bool f32, int64_t col, float (&out)[VEC]) {
  if (f32)
    load_vec<float, VEC>(static_cast<const float *>(p) + col, out);
  else
    load_vec<T, VEC>(static_cast<const T *>(p) + col, out);
}

// The scale and shift of one lane's columns: gamma (1 + gamma when zero
// centered, 1 when absent) and beta (0 when absent).
template <class T, int VEC>
__device__ __forceinline__ void load_affine(const void *gamma, const void *beta, bool f32, bool zero_centered,
                                            int64_t col, float (&g)[VEC], float (&b)[VEC]) {
  if (gamma) {
    load_param<T, VEC>(gamma, f32, col, g);
#pragma unroll
    for (int i = 0; i < VEC; ++i) g[i] += zero_centered ? 1.0f : 0.0f;
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) g[i] = 1.0f;
  }
  if (beta) {
    load_param<T, VEC>(beta, f32, col, b);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) b[i] = 0.0f;
  }
}

// How the register kernels without cached parameters read gamma and beta in
// a launch. kGeneral decides per vector whether each is present, its
// dtype and the zero centring: uniform branches whose both arms and defaults
// took about half of the output loop's instructions (sm_90 SASS, half
// LayerNorm at 32 elements per lane). The usual forms are compiled without
// them: kScaleShift, gamma and beta in x's dtype; kScale, gamma only.
// (Float32 parameters for 16-bit x take the general form.)
enum class AffineForm { kGeneral, kScaleShift, kScale };
template <AffineForm F>
using AffineTag = std::integral_constant<AffineForm, F>;

// The form of a launch's gamma and beta (Args: the forward's or the
// backward's, which reads no beta).
template <class T, class Args>
__host__ __device__ __forceinline__ AffineForm affine_form(const Args &a) {
  const bool params_in_x_dtype = (a.param_dtype == XVK_DTYPE_F32) == std::is_same_v<T, float>;
  if (!a.gamma || !params_in_x_dtype || a.zero_centered_gamma) return AffineForm::kGeneral;
  if constexpr (std::is_same_v<Args, xvk_norm_forward_args>)
    return a.beta ? AffineForm::kScaleShift : AffineForm::kScale;
  else
    return AffineForm::kScale;
}

// out = n * gamma + beta over one lane's vector of columns, read in form F.
template <class T, int VEC, AffineForm F>
__device__ __forceinline__ void apply_affine(const xvk_norm_forward_args &a, int64_t col, const float (&n)[VEC],
                                             float (&out)[VEC]) {
  float g[VEC], b[VEC];
  if constexpr (F == AffineForm::kGeneral) {
    load_affine<T, VEC>(a.gamma, a.beta, a.param_dtype == XVK_DTYPE_F32, a.zero_centered_gamma, col, g, b);
  } else {
    load_vec<T, VEC>(static_cast<const T *>(a.gamma) + col, g);
    if constexpr (F == AffineForm::kScaleShift) {
      load_vec<T, VEC>(static_cast<const T *>(a.beta) + col, b);
    } else {
      // Added, not left out: n * g + 0 gives +0 where n * g is -0, as the
      // general form and the CPU backend do.
#pragma unroll
      for (int i = 0; i < VEC; ++i) b[i] = 0.0f;
    }
  }
#pragma unroll
  for (int i = 0; i < VEC; ++i) out[i] = n[i] * g[i] + b[i];
}

// h += residual r, rounded to T as residual_out holds it, and written to
// residual_out (at row, col) when asked.
template <class T, int VEC>
__device__ __forceinline__ void add_residual(const xvk_norm_forward_args &a, int64_t row, int64_t col, float (&h)[VEC],
                                             const float (&r)[VEC]) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) h[i] = to_float(from_float<T>(h[i] + r[i]));
  if (a.residual_out.data)
    store_vec<T, VEC>(static_cast<T *>(a.residual_out.data) + row * a.residual_out.row_stride + col, h);
}

// h = x (+ residual, see add_residual).
template <class T, int VEC>
__device__ __forceinline__ void load_input(const xvk_norm_forward_args &a, int64_t row, int64_t col, float (&h)[VEC]) {
  load_vec<T, VEC>(static_cast<const T *>(a.x.data) + row * a.x.row_stride + col, h);
  if (!a.residual.data) return;
  float r[VEC];
  load_vec<T, VEC>(static_cast<const T *>(a.residual.data) + row * a.residual.row_stride + col, r);
  add_residual<T, VEC>(a, row, col, h, r);
}

// The row's first input: statistics are computed around it. x - shift is
// exact for values within a factor of two (Sterbenz), so data with a large
// offset (mean 1e4, std 1e-2) keeps its variance in float32 arithmetic.
// Read through load_global: through a plain pointer, clang for AMD lost the
// address space (flat_load) in kernels with a loop per affine form.
template <class T, bool kMayHaveResidual = true>
__device__ __forceinline__ float row_shift(const xvk_norm_forward_args &a, int64_t row) {
  if (a.rms) return 0.0f;
  const float x0 = to_float(load_global(static_cast<const T *>(a.x.data) + row * a.x.row_stride));
  if (!kMayHaveResidual || !a.residual.data) return x0;
  const T r0 = load_global(static_cast<const T *>(a.residual.data) + row * a.residual.row_stride);
  return to_float(from_float<T>(x0 + to_float(r0)));
}

// Registers cache gamma/beta across rows while a lane's share is small.
template <int PACKS, int VEC>
inline constexpr bool kCacheAffine = PACKS * VEC <= 8;

// The forward's 16-bit vector kernels read them per row instead (L1 hits):
// their 16 registers cost more than the loads. H200, same run, best of three,
// uncached / cached: LayerNorm forward fp16/bf16 49152 x 32 0.89-0.91, x 64
// 0.96-0.98, x 128 0.98, 256-768 columns 0.993-1.005; RMSNorm (gamma alone)
// 0.967-1.016; fp32 uncached was 3% slower at 32-128 columns, so it keeps them.
template <class T, int PACKS, int VEC>
inline constexpr bool kCacheForwardAffine = kCacheAffine<PACKS, VEC> && !(sizeof(T) == 2 && VEC > 1);

// The forward's 16-bit groups of lanes holding 16 elements or more of a row
// per lane hold them as loaded (packs of halves, half the registers of
// floats) and convert them again at each of the three passes (ptxas then
// keeps few floats alive): as floats, 32 elements a lane took 64 registers
// and spilled 76-116 bytes (ptxas, sm_90; none now). H100, same run, best of
// two, three runs: LayerNorm/RMSNorm fp16/bf16 8192 x 1024 0.9-3.1%
// faster, 49152 x 512/768/1024 within +-0.6%. Not the block kernels: with
// theirs held too, a table run had LayerNorm 16-bit 49152 x 32768 3-5%
// slower than the table before (not tried A/B; left as they were).
// Tried and not kept: the same in the backward (x and dy held; 1-2% slower
// at 8192 x 1024) and in softmax's forward (which takes the exponentials
// again: up to 6% slower at 49152 x 512).
template <class T, int VEC, int PACKS, int G>
inline constexpr bool kHoldForwardPacks = sizeof(T) == 2 && VEC % 2 == 0 && G > 0 && PACKS * VEC >= 16;

// Calls f with the AffineTag of the form norm_forward_registers<T, VEC, PACKS>
// reads a's gamma and beta in: the general one where it caches them. (The
// launch's choice of kernel, and the L2-ahead kernels' choice of loop.)
template <class T, int VEC, int PACKS, class F>
__host__ __device__ __forceinline__ void with_forward_affine_form(const xvk_norm_forward_args &a, F &&f) {
  if constexpr (!kCacheForwardAffine<T, PACKS, VEC>) {
    switch (affine_form<T>(a)) {
      case AffineForm::kScaleShift: return f(AffineTag<AffineForm::kScaleShift>{});
      case AffineForm::kScale: return f(AffineTag<AffineForm::kScale>{});
      case AffineForm::kGeneral: break;
    }
  }
  f(AffineTag<AffineForm::kGeneral>{});
}

// kAffine, the launch's affine form (with_forward_affine_form), and
// kResidual, whether it may have a residual (tested at run time), are
// compiled into the kernel: ptxas sizes a kernel's registers for its
// costliest path, and with every form and the residual in one kernel the
// launches without a residual paid for it (16-bit lanes of 8 elements: 56-57
// registers, 48-50 split; blocks of 8: 52, 32; float32 blocks of 24-32
// elements spilled 212-396 bytes, none split). H200, same run, median of
// three: LayerNorm/RMSNorm forward 0.990x the time over the benchmark's 108
// cases (0.950-1.023; 16-bit 49152 x 32..128 3-5% faster)
// (bench/results/h200-2026-11-29-norm-forward-split.txt).
// kAhead (kHasL2RowAhead shapes, a row per block): each block asks L2 for
// its next row once the current row's loads are done. These kernels choose
// the form at run time and have the residual code, as before the split:
// split too, 16-bit LayerNorm ran 7-11% slower at 49152 x 16384/32768.
// kRing (Variant::kWarpRing, warps of a row at a time): x's rows come
// through a RowRing in dynamic shared memory instead of loads to registers.
template <class T, int VEC, int PACKS, int G, int ROWS, AffineForm kAffine, bool kResidual, bool kAhead = false,
          bool kRing = false>
__global__ void __launch_bounds__(kRing ? kWarpRingMaxThreads : register_kernel_max_threads(false, PACKS * VEC * ROWS))
    norm_forward_registers(const xvk_norm_forward_args a) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  static_assert(!kAhead || (G == 0 && ROWS == 1), "kAhead: a row per block");
  static_assert(!kAhead || (kAffine == AffineForm::kGeneral && kResidual), "kAhead: form and residual at run time");
  static_assert(!kRing || (G == kRingRowLanes && ROWS == 1 && !kAhead), "kRing: a warp per row");
  __shared__ float scratch[ROWS][kMaxWarpsPerBlock];
  extern __shared__ uint4 shared_row[];  // kRing's slots
  constexpr bool kCache = kCacheForwardAffine<T, PACKS, VEC>;
  constexpr bool kHoldPacks = kHoldForwardPacks<T, VEC, PACKS, G> && !kRing;  // (the ring's bound leaves room for floats)
  const RowMapping<G, ROWS> map;
  const bool f32 = a.param_dtype == XVK_DTYPE_F32;
  float g[kCache ? PACKS : 1][VEC], b[kCache ? PACKS : 1][VEC];
  if constexpr (kCache) {
#pragma unroll
    for (int p = 0; p < PACKS; ++p)
      if (map.col(p, VEC) < a.cols) load_affine<T, VEC>(a.gamma, a.beta, f32, a.zero_centered_gamma, map.col(p, VEC), g[p], b[p]);
  }
  const float inv_cols = 1.0f / float(a.cols);
  // When the owners' packs cover the row exactly (the common widths), no
  // element needs the per-element tests for columns past the end: the loop
  // is compiled twice, once without them (kFull), chosen once per launch.
  // A group past the last row computes on zeros and writes nothing; its
  // lanes reduce only among themselves. Only for lanes of up to 24 elements
  // (three packs of halves): with 32, the second copy made ptxas spill more
  // (sm_90). The ring kernels (a 512-thread bound) take it at any width:
  // H200, same run, best of three, the table's 11 ring rows 0.956-0.998x the
  // time (LayerNorm fp16 8192 x 1024 0.956) (h200-2026-12-02-warp-ring.txt).
  constexpr bool kVersionFull = kRing || PACKS * VEC * ROWS <= 24;
  const bool full = int64_t(PACKS) * map.width * VEC == a.cols;
  // Group lanes of up to 16 elements issue their next rows' loads of x (and
  // the rows' shifts, where kShiftFromLane does not take them from a lane)
  // as soon as the current rows' are in registers, so that they are in
  // flight through the reductions and the stores (a persistent grid; on a
  // grid covering the rows the next rows are past the end and nothing is
  // loaded). H100, same run, best of two, against main (this
  // op's table rows re-tuned on these kernels, where the tuner now takes
  // persistent grids): LayerNorm/RMSNorm 16-bit 49152 x 64 5-7% faster,
  // x 128 3-4%, 8192 x 512 9-12% (fp32 8%); the other small shapes within
  // -2..+4% (bench/results/h100-2026-11-28-norm-forward-prefetch.txt).
  // Tried and not kept there: the same in softmax's forward (-6..+4%, as
  // much as its configurations without the prefetch moved; its re-tuned
  // table ran slower).
  constexpr bool kPrefetch = !kRing && G > 0 && PACKS * VEC * ROWS <= 16;
  // Group lanes of one or two packs take each row's shift (row_shift's
  // value: x (+ residual) at column 0) from their group's lane 0, which
  // holds it, by a shuffle, instead of loading it. H200, LayerNorm forward
  // against the load, same run, best of three: 16-bit 49152 x 32..256
  // 0.928-0.985 of the time (x 64 0.93), x 512 0.984-0.987, float32
  // 49152 x 64/128 0.98-0.99; RMSNorm (shift 0) within 2.5%. Lanes of three
  // or four packs gained nothing (16-bit 0.987-1.011) and float32 49152 x 512
  // took 1.066x the time, so they load it as before
  // (bench/results/h200-2026-11-29-session33-trials.txt, item 9). The ring
  // has the row in registers before it could load the shift: it shuffles too.
  constexpr bool kShiftFromLane = G > 0 && (PACKS <= 2 || kRing);
  auto rows_loop = [&](auto full_tag, auto form_tag) {
    constexpr bool kFull = decltype(full_tag)::value;
    [[maybe_unused]] constexpr AffineForm kForm = decltype(form_tag)::value;
    const T *const x = static_cast<const T *>(a.x.data);
    [[maybe_unused]] Pack<T, VEC> ahead[kPrefetch ? ROWS : 1][PACKS];
    [[maybe_unused]] float ahead_shift[ROWS];
    auto issue = [&](int64_t base, Pack<T, VEC> (&raw)[kPrefetch ? ROWS : 1][PACKS], float (&shift)[ROWS]) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const int64_t row = base + map.offset + r;
        if constexpr (!kShiftFromLane) shift[r] = row < a.rows ? row_shift<T, kResidual>(a, row) : 0.0f;
        issue_row(map, x + row * a.x.row_stride, row < a.rows, a.cols, raw[r]);
      }
    };
    if constexpr (kPrefetch) issue(map.first_warp_row, ahead, ahead_shift);
    using Ring = std::conditional_t<kRing, RowRing<T, VEC, PACKS, RowMapping<G, ROWS>>, int>;
    [[maybe_unused]] Ring ring = [&] {
      if constexpr (kRing) {
        Ring r(shared_row, map);
        r.fill(x, a.x.row_stride, a.rows, a.cols);
        return r;
      } else {
        return 0;
      }
    }();
    for (int64_t base = map.first_warp_row; base < a.rows; base += map.row_step) {
      // h holds x (+ residual) - shift, or with kHoldPacks `held` holds
      // x (+ residual) as loaded, and centred() converts it at each use;
      // mean and var are those of x (+ residual) - shift.
      // (h starts zeroed, and the array an instantiation leaves alone is
      // marked maybe-unused, only for nvcc's front end, which took
      // centred()'s capture of it for a use before it is set.)
      [[maybe_unused]] float h[kHoldPacks ? 1 : ROWS][kHoldPacks ? 1 : PACKS][VEC] = {};
      [[maybe_unused]] Pack<T, VEC> held[kHoldPacks ? ROWS : 1][kHoldPacks ? PACKS : 1];
      float shift[ROWS], mean[ROWS], var[ROWS];
      {
        Pack<T, VEC> raw[ROWS][PACKS];
        if constexpr (kRing) {
          ring.take(x, a.x.row_stride, a.rows, a.cols, raw[0]);
        } else if constexpr (kPrefetch) {
#pragma unroll
          for (int r = 0; r < ROWS; ++r) {
            if constexpr (!kShiftFromLane) shift[r] = ahead_shift[r];
#pragma unroll
            for (int p = 0; p < PACKS; ++p) raw[r][p] = ahead[r][p];
          }
        } else {  // as issue() does (written out: through it the float32 kernels compiled differently)
#pragma unroll
          for (int r = 0; r < ROWS; ++r) {
            const int64_t row = base + map.offset + r;
            if constexpr (!kShiftFromLane) shift[r] = row < a.rows ? row_shift<T, kResidual>(a, row) : 0.0f;
            issue_row(map, x + row * a.x.row_stride, row < a.rows, a.cols, raw[r]);
          }
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          if constexpr (kHoldPacks) {
#pragma unroll
            for (int p = 0; p < PACKS; ++p) held[r][p] = raw[r][p];
          } else {
            unpack_row(raw[r], h[r]);
          }
        }
        if (kResidual && a.residual.data) {  // x + residual, rounded to T as residual_out holds it
#pragma unroll
          for (int r = 0; r < ROWS; ++r) {
            const int64_t row = base + map.offset + r;
            issue_row(map, static_cast<const T *>(a.residual.data) + row * a.residual.row_stride, row < a.rows, a.cols,
                      raw[r]);
          }
#pragma unroll
          for (int r = 0; r < ROWS; ++r) {
            const int64_t row = base + map.offset + r;
            if constexpr (kHoldPacks) {
#pragma unroll
              for (int p = 0; p < PACKS; ++p) {
                float sum[VEC], res[VEC];
                unpack(held[r][p], sum);
                unpack(raw[r][p], res);
                if (row < a.rows && map.col(p, VEC) < a.cols) add_residual<T, VEC>(a, row, map.col(p, VEC), sum, res);
                held[r][p] = to_pack<T, VEC>(sum);  // exact: the sum is rounded to T
              }
            } else {
              float res[PACKS][VEC];
              unpack_row(raw[r], res);
#pragma unroll
              for (int p = 0; p < PACKS; ++p)
                if (row < a.rows && map.col(p, VEC) < a.cols) add_residual<T, VEC>(a, row, map.col(p, VEC), h[r][p], res[p]);
            }
          }
        }
        if constexpr (kShiftFromLane) {
#pragma unroll
          for (int r = 0; r < ROWS; ++r) {
            float first;
            if constexpr (kHoldPacks)
              first = element(held[r][0], 0);
            else
              first = h[r][0][0];
            shift[r] = a.rms ? 0.0f : shfl_from(first, 0, G);
          }
        }
      }
      if constexpr (kPrefetch) issue(base + map.row_step, ahead, ahead_shift);  // the rows are in h or held now
      auto centred = [&](int r, int p, int i) {
        if constexpr (kHoldPacks)
          return element(held[r][p], i) - shift[r];
        else
          return h[r][p][i];
      };
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const int64_t row = base + map.offset + r;
        mean[r] = 0.0f;
#pragma unroll
        for (int p = 0; p < PACKS; ++p) {
          const bool in = kFull || (row < a.rows && map.col(p, VEC) < a.cols);
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            if constexpr (kHoldPacks) {
              mean[r] += in ? centred(r, p, i) : 0.0f;
            } else {
              h[r][p][i] = in ? h[r][p][i] - shift[r] : 0.0f;
              mean[r] += h[r][p][i];
            }
          }
        }
      }
      if (a.rms) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) mean[r] = 0.0f;
      } else {
        RowReducer<G>::all_reduce(mean, SumOp{}, scratch);
#pragma unroll
        for (int r = 0; r < ROWS; ++r) mean[r] *= inv_cols;
      }
      if constexpr (kAhead) {
        const int64_t next = base + map.row_step;
        prefetch_row_l2<T, VEC, PACKS>(map, static_cast<const T *>(a.x.data) + next * a.x.row_stride, next < a.rows, a.cols);
        if (kResidual && a.residual.data)
          prefetch_row_l2<T, VEC, PACKS>(map, static_cast<const T *>(a.residual.data) + next * a.residual.row_stride,
                                         next < a.rows, a.cols);
      }
      // Second pass over registers: the exact variance around the mean.
      // (One all-reduce of per-lane Welford states by Chan's merge instead
      // of the two sums was slower on the H200: 16-bit block kernels 14-21%,
      // fp32 groups of lanes 16-22%; its arithmetic per shuffle costs more
      // than the second reduction.)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        var[r] = 0.0f;
#pragma unroll
        for (int p = 0; p < PACKS; ++p)
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            const float d = kFull || map.col(p, VEC) < a.cols ? centred(r, p, i) - mean[r] : 0.0f;
            var[r] += d * d;
          }
      }
      RowReducer<G>::all_reduce(var, SumOp{}, scratch);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const int64_t row = base + map.offset + r;
        if (row >= a.rows) continue;
        const float rstd = rsqrtf(var[r] * inv_cols + a.epsilon);
        T *y = static_cast<T *>(a.y.data) + row * a.y.row_stride;
#pragma unroll
        for (int p = 0; p < PACKS; ++p) {
          const int col = map.col(p, VEC);
          if (!kFull && col >= a.cols) continue;
          float n[VEC], out[VEC];
#pragma unroll
          for (int i = 0; i < VEC; ++i) n[i] = (centred(r, p, i) - mean[r]) * rstd;
          if constexpr (kCache) {
#pragma unroll
            for (int i = 0; i < VEC; ++i) out[i] = n[i] * g[p][i] + b[p][i];
          } else {
            apply_affine<T, VEC, kForm>(a, col, n, out);
          }
          store_vec<T, VEC>(y + col, out);
        }
        if (map.lane == 0) {
          if (a.mean) a.mean[row] = shift[r] + mean[r];
          if (a.rstd) a.rstd[row] = rstd;
        }
      }
    }
    if constexpr (kRing) async_copies_wait<0>();  // (only empty groups can be left: rows past the last)
  };
  auto run = [&](auto form_tag) {
    if constexpr (kVersionFull) {
      if (full) return rows_loop(std::true_type{}, form_tag);
    }
    rows_loop(std::false_type{}, form_tag);
  };
  static_assert(!kCache || kAffine == AffineForm::kGeneral, "cached parameters are read in the general form");
  if constexpr (kAhead)
    with_forward_affine_form<T, VEC, PACKS>(a, run);
  else
    run(AffineTag<kAffine>{});
}

// Welford statistics of a set of values: count, mean, sum of squared deviations.
struct Welford {
  float n = 0.0f, mean = 0.0f, m2 = 0.0f;
  // Chan et al.'s merge of two disjoint sets.
  __device__ __forceinline__ void merge(float n_b, float mean_b, float m2_b) {
    const float n_ab = n + n_b;
    if (n_ab == 0.0f) return;
    const float delta = mean_b - mean, w = n_b / n_ab;
    mean += delta * w;
    m2 += m2_b + delta * delta * n * w;
    n = n_ab;
  }
};

// Merges every thread's Welford statistics across the block; all threads get the result.
template <int M>
__device__ __forceinline__ Welford block_welford(Welford w, float (&scratch)[M][kMaxWarpsPerBlock]) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    w.merge(shfl_xor(w.n, offset, kWarpSize), shfl_xor(w.mean, offset, kWarpSize), shfl_xor(w.m2, offset, kWarpSize));
  if (lane_id() == 0) {
    scratch[0][warp_id()] = w.n;
    scratch[1][warp_id()] = w.mean;
    scratch[2][warp_id()] = w.m2;
  }
  __syncthreads();
  Welford total;
  const int warps = int(blockDim.x) / kWarpSize;
  for (int k = 0; k < warps; ++k) total.merge(scratch[0][k], scratch[1][k], scratch[2][k]);
  __syncthreads();
  return total;
}

// Vectors a thread of the streaming kernels loads before it uses any, so
// that they are in flight together: 4, or 3 of 16-bit types (8 floats each
// once unpacked; with 4, ptxas spilled under the 1024-thread register bound).
template <class T>
inline constexpr int kIssue = sizeof(T) == 2 ? 3 : 4;

// A block streams each of its rows: pass 1 reads x (+ residual) once, pass 2
// writes the output from the row read again from memory (reread:
// residual_out when it was written, else x and residual, where L2 may still
// hold them) or from the copy of x (+ residual) that pass 1 left in shared
// memory (kStaged). Each thread stages and reads back only its own vectors,
// so the staging needs no barrier of its own.
// Statistics: RMSNorm sums squares in pass 1. LayerNorm sums h - shift in
// pass 1; staged, its variance is then an exact second pass over shared
// memory, and re-reading, pass 1 merges per-vector Welford statistics
// instead (a division per vector, but no third read of memory).
template <class T, int VEC, bool kStaged, int M>
__device__ __forceinline__ void norm_forward_streamed(const xvk_norm_forward_args &a, Pack<T, VEC> *staged,
                                                      float (&scratch)[M][kMaxWarpsPerBlock]) {
  using P = Pack<T, VEC>;
  const bool f32 = a.param_dtype == XVK_DTYPE_F32;
  const bool welford = !kStaged && !a.rms;
  const int64_t vectors = a.cols / VEC;  // VEC divides cols on the vector path
  const int64_t stride = blockDim.x;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const float shift = row_shift<T>(a, row);
    const P *x = reinterpret_cast<const P *>(static_cast<const T *>(a.x.data) + row * a.x.row_stride);
    const P *res = a.residual.data
                       ? reinterpret_cast<const P *>(static_cast<const T *>(a.residual.data) + row * a.residual.row_stride)
                       : nullptr;
    Welford w;         // LayerNorm re-reading: of h - shift, merged vector by vector
    float sum = 0.0f;  // otherwise: of h * h (RMSNorm) or of h - shift
    for (int64_t v0 = threadIdx.x; v0 < vectors; v0 += kIssue<T> * stride) {
      P raw[kIssue<T>], raw_res[kIssue<T>];
#pragma unroll
      for (int u = 0; u < kIssue<T>; ++u)
        if (v0 + u * stride < vectors) raw[u] = load_global(x + v0 + u * stride);
      if (res) {
#pragma unroll
        for (int u = 0; u < kIssue<T>; ++u)
          if (v0 + u * stride < vectors) raw_res[u] = load_global(res + v0 + u * stride);
      }
#pragma unroll
      for (int u = 0; u < kIssue<T>; ++u) {
        const int64_t v = v0 + u * stride;
        if (v >= vectors) continue;  // not break: hipcc leaves a loop with a break un-unrolled
        float h[VEC];
        unpack(raw[u], h);
        if (res) {
          float r[VEC];
          unpack(raw_res[u], r);
          add_residual<T, VEC>(a, row, v * VEC, h, r);
          if constexpr (kStaged) staged[v] = to_pack<T, VEC>(h);  // exact: h is rounded to T
        } else if constexpr (kStaged) {
          staged[v] = raw[u];
        }
        if (a.rms) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) sum += h[i] * h[i];
        } else if (!welford) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) sum += h[i] - shift;
        } else {
          float chunk_sum = 0.0f, m2 = 0.0f;
#pragma unroll
          for (int i = 0; i < VEC; ++i) chunk_sum += h[i] - shift;
          const float chunk_mean = chunk_sum * (1.0f / float(VEC));
#pragma unroll
          for (int i = 0; i < VEC; ++i) m2 += (h[i] - shift - chunk_mean) * (h[i] - shift - chunk_mean);
          w.merge(float(VEC), chunk_mean, m2);
        }
      }
    }
    float mean = 0.0f, m2;  // of h - shift
    if (welford) {
      const Welford total = block_welford(w, scratch);
      mean = total.mean;
      m2 = total.m2;
    } else {
      float total[1] = {sum};
      block_all_reduce(total, SumOp{}, scratch);
      m2 = total[0];
      if constexpr (kStaged) {
        if (!a.rms) {  // second pass, over this thread's staged vectors: the exact variance around the mean
          mean = total[0] / float(a.cols);
          float q[1] = {0.0f};
          for (int64_t v = threadIdx.x; v < vectors; v += stride) {
            float h[VEC];
            unpack(staged[v], h);
#pragma unroll
            for (int i = 0; i < VEC; ++i) q[0] += (h[i] - shift - mean) * (h[i] - shift - mean);
          }
          block_all_reduce(q, SumOp{}, scratch);
          m2 = q[0];
        }
      }
    }
    const float rstd = rsqrtf(m2 / float(a.cols) + a.epsilon);
    T *y = static_cast<T *>(a.y.data) + row * a.y.row_stride;
    for (int64_t v = threadIdx.x; v < vectors; v += stride) {
      const int64_t col = v * VEC;
      float h[VEC], g[VEC], b[VEC];
      if constexpr (kStaged)
        unpack(staged[v], h);
      else if (a.residual_out.data)  // h was written in pass 1: one read instead of two
        load_vec<T, VEC>(static_cast<const T *>(a.residual_out.data) + row * a.residual_out.row_stride + col, h);
      else
        load_input<T, VEC>(a, row, col, h);
      load_affine<T, VEC>(a.gamma, a.beta, f32, a.zero_centered_gamma, col, g, b);
#pragma unroll
      for (int i = 0; i < VEC; ++i) h[i] = (h[i] - shift - mean) * rstd * g[i] + b[i];
      store_vec<T, VEC>(y + col, h);
    }
    if (threadIdx.x == 0) {
      if (a.mean) a.mean[row] = shift + mean;
      if (a.rstd) a.rstd[row] = rstd;
    }
  }
}

template <class T, int VEC>
__global__ void __launch_bounds__(1024) norm_forward_reread(const xvk_norm_forward_args a) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  __shared__ float scratch[3][kMaxWarpsPerBlock];
  norm_forward_streamed<T, VEC, false>(a, nullptr, scratch);
}

// The row in shared memory: launched with shared_bytes(kNormForward, cols) of it.
template <class T, int VEC>
__global__ void __launch_bounds__(1024) norm_forward_shared(const xvk_norm_forward_args a) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  __shared__ float scratch[3][kMaxWarpsPerBlock];
  extern __shared__ uint4 shared_row[];  // one name and type for every instantiation; 16-byte aligned
  norm_forward_streamed<T, VEC, true>(a, reinterpret_cast<Pack<T, VEC> *>(shared_row), scratch);
}

// ---------------------------------------------------------------------------
// dgamma/dbeta: the backward kernels write per-part sums, partial[part][0][col]
// (dgamma's) and partial[part][1][col] (dbeta's), which are then added up in
// an order fixed by the parts, the columns and the launch shape, never by
// timing: results are bitwise reproducible. A lane writes its VEC columns'
// sums with store_vec (16-byte stores): one float at a time, each store of a
// warp wrote 4 bytes into 32 sectors, and the burst of them at the kernel's
// end cost more than the sums' bytes (H100, LayerNorm fp16 8192 x 4096
// backward, a block per SM: 11 us of kernel time, 1.6M L2 sector writes for
// 4.3 MB of sums). Small totals are added up by the
// backward kernel's last block to finish (no second launch); larger ones by
// norm_backward_finalize, whose blocks split the parts between them.
// ---------------------------------------------------------------------------

// Where a backward kernel puts its parameter-gradient sums.
struct ParamGradSums {
  float *partial = nullptr;    // [parts][2][cols] ([1] unwritten by kRms kernels); null: dgamma/dbeta not wanted
  float *lane_sums = nullptr;  // in-kernel finalize: the last block's scratch, after the parts
  unsigned *counter = nullptr; // in-kernel finalize: blocks finished; null: a finalize kernel follows
};

// A thread's dbeta sums of ELEMS columns in dynamic shared memory (kernels
// that cannot also hold them in registers: beta_sums_run_floats). Element e
// is component e % 4 of float4 e / 4 of the thread's own run, so with e known
// at compile time each access is the run's base plus a constant, and no
// barrier guards the runs: no other thread touches them.
template <int ELEMS>
struct SharedBetaSums {
  static_assert(ELEMS % 4 == 0, "shared dbeta sums are kept as float4s");
  float4 *run;
  __device__ __forceinline__ explicit SharedBetaSums(float4 *runs)
      : run(runs + int(threadIdx.x) * (beta_sums_run_floats(ELEMS) / 4)) {}
  __device__ __forceinline__ float &operator[](int e) const {
    float4 &s = run[e / 4];
    return e % 4 == 0 ? s.x : e % 4 == 1 ? s.y : e % 4 == 2 ? s.z : s.w;
  }
  __device__ __forceinline__ void zero() const {
#pragma unroll
    for (int q = 0; q < ELEMS / 4; ++q) run[q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
};

// dgamma[col] = g and dbeta[col] = b in the gradients' dtype.
__device__ __forceinline__ void store_param_grads(const xvk_norm_backward_args &a, int64_t col, float g, float b) {
  auto store = [&](void *out, float v) {
    if (!out) return;
    if (a.dparam_dtype == XVK_DTYPE_F16)
      static_cast<half *>(out)[col] = from_float<half>(v);
    else if (a.dparam_dtype == XVK_DTYPE_BF16)
      static_cast<bfloat16 *>(out)[col] = from_float<bfloat16>(v);
    else
      static_cast<float *>(out)[col] = v;
  };
  store(a.dgamma, g);
  store(a.dbeta, b);
}

// The in-kernel finalize's shape: with `threads` threads over cols
// columns, `lanes` threads share each column's parts (1: a thread takes
// whole columns), and each thread makes `loads` loads. It loads one float
// at a time: wider loads, with their sums, raised every backward kernel's
// register count (the finalize code is part of the kernel).
struct InKernelFinalize {
  int lanes;
  int64_t loads;
  __host__ __device__ InKernelFinalize(int64_t parts, int64_t cols, int threads) {
    lanes = cols >= threads ? 1 : int(threads / cols);
    loads = 2 * (lanes == 1 ? (cols + threads - 1) / threads * parts : (parts + lanes - 1) / lanes);
  }
};
// Above this many loads per thread the last block alone would take longer
// than a finalize launch.
inline constexpr int64_t kInKernelFinalizeLoads = 24;

// Called by every thread of every block once its partial sums are written:
// the last block to get here adds up all parts. Lane l of a column group
// takes parts l, l + lanes, ...; the lanes' sums meet in lane_sums
// ([lanes][2][cols]) and lane 0 adds them in lane order.
// kBeta: add up dbeta's sums too (false: the kRms kernels write none).
template <bool kBeta = true>
__device__ void finalize_in_last_block(const xvk_norm_backward_args &a, const ParamGradSums &s) {
  __shared__ bool last;
  __threadfence();  // this block's partial sums, before its ticket
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(s.counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();  // every block's partial sums, after the last ticket
  // Few parts and columns here (kInKernelFinalizeLoads): 32-bit offsets,
  // which kept the code's register count low.
  const int cols = int(a.cols), parts = int(gridDim.x), t = int(threadIdx.x);
  const int lanes = InKernelFinalize(parts, cols, int(blockDim.x)).lanes;
  const int span = lanes == 1 ? int(blockDim.x) : cols;  // threads per lane
  const int lane = t / span, stride = lanes * 2 * cols;
  for (int col = t % span; lane < lanes && col < cols; col += span) {  // one column each when lanes > 1
    const float *p = s.partial + lane * 2 * cols + col;
    float sg[4] = {}, sb[4] = {};
    int part = lane;
    for (; part + 3 * lanes < parts; part += 4 * lanes, p += 4 * stride) {
      float vg[4], vb[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) vg[k] = p[k * stride], vb[k] = kBeta ? p[k * stride + cols] : 0.0f;
#pragma unroll
      for (int k = 0; k < 4; ++k) sg[k] += vg[k], sb[k] += vb[k];
    }
    for (; part < parts; part += lanes, p += stride) sg[0] += p[0], sb[0] += kBeta ? p[cols] : 0.0f;
    const float g = (sg[0] + sg[1]) + (sg[2] + sg[3]), b = (sb[0] + sb[1]) + (sb[2] + sb[3]);
    if (lanes == 1) {
      store_param_grads(a, col, g, b);
    } else {
      s.lane_sums[lane * 2 * cols + col] = g;
      s.lane_sums[lane * 2 * cols + cols + col] = b;
    }
  }
  if (lanes > 1) {
    __syncthreads();
    const int col = t;
    if (col < cols) {
      float g = 0.0f, b = 0.0f;
      for (int l = 0; l < lanes; ++l) g += s.lane_sums[l * 2 * cols + col], b += s.lane_sums[l * 2 * cols + cols + col];
      store_param_grads(a, col, g, b);
    }
  }
  if (t == 0) *s.counter = 0;  // ready for the next kernel on the stream
}

// A row's dx = rstd * (dy * g - c1 - xhat * c2) from dy * g and xhat, as
// two FMAs per element: (dy * g) * rstd + (xhat * (-c2 * rstd) - c1 * rstd).
struct RowDx {
  float scale, slope, offset;
  __device__ __forceinline__ RowDx(float rstd, float c1, float c2) : scale(rstd), slope(-c2 * rstd), offset(-c1 * rstd) {}
  __device__ __forceinline__ float operator()(float dyg, float xhat) const {
    return fmaf(dyg, scale, fmaf(xhat, slope, offset));
  }
};

// Backward, register variants. partial (when dgamma/dbeta are wanted) gets
// one row of [2][cols] sums per block.
// Lanes of up to kNormBackwardPrefetchElems elements load their next rows' x and dy
// (raw vectors) before working on the current ones, so those loads are in
// flight through the row reduction and the dx stores: one row per lane in
// flight was too little to cover the memory latency (ncu: long-scoreboard
// stalls first, DRAM throughput about half the copy kernel's).
// kRms: RMSNorm's backward without dbeta (the API has none): no mean, no row
// sum of dy * g (c1 = 0) and no dbeta sums, whose PACKS * VEC accumulators
// the other kernels hold for the whole loop (with_rms_kernel picks it).
// ptxas, sm_90: 16-bit groups of 32 lanes of 4 packs 228 -> 185 registers,
// of one pack 82 -> 64; blocks of 8 packs 572 bytes spilled -> none. H200,
// with the backward's rows re-tuned, against one kernel for both: RMSNorm's
// backward 0.966x the time over the benchmark's 54 cases, 16-bit 49152 x
// 16384 0.79-0.81x (a block of 8 packs a lane, which spilled before);
// float32 49152 x 32768 1.03x (bench/results/h200-2026-12-01-rms-backward.txt).
template <class T, int VEC, int PACKS, int G, int ROWS, bool kRms>
__global__ void __launch_bounds__(register_kernel_max_threads(OpKind::kNormBackward, G, PACKS * VEC * ROWS, int(sizeof(T))))
    norm_backward_registers(const xvk_norm_backward_args a, const ParamGradSums sums_out) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  constexpr int S = kRms ? 1 : 2;  // row sums: [dy * g,] dy * g * xhat
  __shared__ float scratch[S * ROWS][kMaxWarpsPerBlock];
  // Blocks whose lanes hold many elements keep dbeta's sums in dynamic
  // shared memory (norm_backward_block_beta_shared), launched with
  // config_shared_bytes of it. ptxas, sm_90, 16-bit blocks of 8 packs: 572
  // (fp16) and 628 (bf16) bytes spilled -> 0 and 4. H200, with the rows
  // re-tuned, against main in the same run: LayerNorm 16-bit 49152 x 16384
  // backward 0.886-0.900x the time (a block of 8 packs, where main ran a
  // cluster; 1.12-1.13x the copy time from 1.26), the other 106 norm
  // backward cases 0.977-1.012x
  // (bench/results/h200-2026-12-02-norm-backward-shared-dbeta.txt).
  constexpr bool kBetaShared = !kRms && G == 0 && norm_backward_block_beta_shared(PACKS * VEC);
  extern __shared__ float4 beta_runs[];
  const SharedBetaSums<kBetaShared ? PACKS * VEC : 4> beta_sum(beta_runs);
  if constexpr (kBetaShared) beta_sum.zero();
  constexpr bool kCache = kCacheAffine<PACKS, VEC>;
  constexpr bool kPrefetch = PACKS * VEC * ROWS <= kNormBackwardPrefetchElems;
  // 16-bit lanes of two or more 16-byte packs also ask L2 for the rows one step
  // beyond those in registers (prefetch_row_l2: no registers). These
  // kernels hold 120-250 registers, so few warps and few loads in flight per
  // SM. H200, against main in the same run (best of three): each such case
  // of the benchmark 0.8-5.2% faster (RMSNorm bf16 8192 x 5120 98.6 -> 93.5
  // us); lanes of one pack (more warps resident) and float32 kernels gained
  // nothing or lost up to 21% (fp32 RMSNorm 8192 x 8192).
  constexpr bool kAheadL2 = kL2Prefetch && sizeof(T) == 2 && VEC * sizeof(T) == kVectorBytes && PACKS >= 2;
  const RowMapping<G, ROWS> map;
  const bool f32 = a.param_dtype == XVK_DTYPE_F32;
  // gamma of the lane's columns; 0 past the last column, where dy reads as
  // 0 too, so those columns add nothing to any sum.
  float g[kCache ? PACKS : 1][VEC], unused[VEC];
  if constexpr (kCache) {
#pragma unroll
    for (int p = 0; p < PACKS; ++p) {
      if (map.col(p, VEC) < a.cols) {
        load_affine<T, VEC>(a.gamma, nullptr, f32, a.zero_centered_gamma, map.col(p, VEC), g[p], unused);
      } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) g[p][i] = 0.0f;
      }
    }
  }
  float acc_g[PACKS][VEC] = {}, acc_b[kBetaShared ? 1 : PACKS][VEC] = {};
  const float inv_cols = 1.0f / float(a.cols);
  const T *x_data = static_cast<const T *>(a.x.data), *dy_data = static_cast<const T *>(a.dy.data);
  // The rows' inputs as loaded: rows past the end (and columns past the
  // last) read as 0, and their mean and rstd as 0, so xhat and dy are 0.
  Pack<T, VEC> raw_x[ROWS][PACKS], raw_dy[ROWS][PACKS];
  float raw_mean[ROWS], raw_rstd[ROWS];
  auto issue = [&](int64_t base) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int64_t row = base + map.offset + r;
      const bool valid = row < a.rows;
      raw_mean[r] = !kRms && valid && a.mean ? a.mean[row] : 0.0f;
      raw_rstd[r] = valid ? a.rstd[row] : 0.0f;
      issue_row(map, dy_data + row * a.dy.row_stride, valid, a.cols, raw_dy[r]);
      issue_row(map, x_data + row * a.x.row_stride, valid, a.cols, raw_x[r]);
    }
  };
  // gamma read as in the forward's kScale form where it is plain (AffineForm),
  // for 16-bit x: the float32 kernels, holding twice the registers per
  // element, spilled with the second copy of the loop (ptxas, sm_90).
  auto rows_loop = [&](auto form_tag) {
    [[maybe_unused]] constexpr AffineForm kForm = decltype(form_tag)::value;
    if constexpr (kPrefetch) issue(map.first_warp_row);
    for (int64_t base = map.first_warp_row; base < a.rows; base += map.row_step) {
      if constexpr (!kPrefetch) issue(base);
      float xhat[ROWS][PACKS][VEC], dy[ROWS][PACKS][VEC], sums[S * ROWS], rstd[ROWS];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        unpack_row(raw_x[r], xhat[r]);
        unpack_row(raw_dy[r], dy[r]);
        rstd[r] = raw_rstd[r];
#pragma unroll
        for (int p = 0; p < PACKS; ++p)
#pragma unroll
          for (int i = 0; i < VEC; ++i) xhat[r][p][i] = (xhat[r][p][i] - raw_mean[r]) * rstd[r];
      }
      if constexpr (kPrefetch) issue(base + map.row_step);
      if constexpr (kAheadL2) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          const int64_t row = base + (kPrefetch ? 2 : 1) * map.row_step + map.offset + r;
          prefetch_row_l2<T, VEC, PACKS>(map, dy_data + row * a.dy.row_stride, row < a.rows, a.cols);
          prefetch_row_l2<T, VEC, PACKS>(map, x_data + row * a.x.row_stride, row < a.rows, a.cols);
        }
      }
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
#pragma unroll
        for (int k = 0; k < S; ++k) sums[S * r + k] = 0.0f;
#pragma unroll
        for (int p = 0; p < PACKS; ++p) {
          float gp[VEC];
          if constexpr (kCache) {
#pragma unroll
            for (int i = 0; i < VEC; ++i) gp[i] = g[p][i];
          } else if (map.col(p, VEC) < a.cols) {
            if constexpr (kForm == AffineForm::kScale)
              load_vec<T, VEC>(static_cast<const T *>(a.gamma) + map.col(p, VEC), gp);
            else
              load_affine<T, VEC>(a.gamma, nullptr, f32, a.zero_centered_gamma, map.col(p, VEC), gp, unused);
          } else {
#pragma unroll
            for (int i = 0; i < VEC; ++i) gp[i] = 0.0f;
          }
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            const float dyg = dy[r][p][i] * gp[i];
            if constexpr (!kRms) sums[S * r] += dyg;
            sums[S * r + S - 1] += dyg * xhat[r][p][i];
            acc_g[p][i] += dy[r][p][i] * xhat[r][p][i];
            if constexpr (kBetaShared)
              beta_sum[p * VEC + i] += dy[r][p][i];
            else if constexpr (!kRms)
              acc_b[p][i] += dy[r][p][i];
            dy[r][p][i] = dyg;  // from here on dy holds dy * gamma
          }
        }
      }
      RowReducer<G>::all_reduce(sums, SumOp{}, scratch);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const int64_t row = base + map.offset + r;
        if (row >= a.rows) continue;
        const RowDx row_dx(rstd[r], kRms || a.rms ? 0.0f : sums[S * r] * inv_cols, sums[S * r + S - 1] * inv_cols);
        T *dx = static_cast<T *>(a.dx.data) + row * a.dx.row_stride;
#pragma unroll
        for (int p = 0; p < PACKS; ++p) {
          const int col = map.col(p, VEC);
          if (col >= a.cols) continue;
          float out[VEC];
#pragma unroll
          for (int i = 0; i < VEC; ++i) out[i] = row_dx(dy[r][p][i], xhat[r][p][i]);
          store_vec<T, VEC>(dx + col, out);
        }
      }
    }
  };
  if constexpr (kCache || sizeof(T) == 4)
    rows_loop(AffineTag<AffineForm::kGeneral>{});
  else if (affine_form<T>(a) == AffineForm::kScale)
    rows_loop(AffineTag<AffineForm::kScale>{});
  else
    rows_loop(AffineTag<AffineForm::kGeneral>{});
  if (!sums_out.partial) return;
  float *pg = sums_out.partial + int64_t(blockIdx.x) * 2 * a.cols, *pb = pg + a.cols;
  if constexpr (G == 0) {
    // Each thread owns its columns: its sums are the block's.
#pragma unroll
    for (int p = 0; p < PACKS; ++p) {
      const int col = map.col(p, VEC);
      if (col >= a.cols) continue;
      store_vec<float, VEC>(pg + col, acc_g[p]);
      if constexpr (kBetaShared) {
        float b[VEC];
#pragma unroll
        for (int i = 0; i < VEC; ++i) b[i] = beta_sum[p * VEC + i];
        store_vec<float, VEC>(pb + col, b);
      } else if constexpr (!kRms) {
        store_vec<float, VEC>(pb + col, acc_b[p]);
      }
    }
  } else {
    // Groups hold the same columns: add them up across the lanes of a warp,
    // then across the warps of the block through shared memory (one pack of
    // G * VEC columns at a time), always in the same order. Two buffers
    // take the packs in turn, so one barrier per pack separates its writes
    // from its reads and the reads of the pack before from the writes of
    // the one after; lanes write their VEC sums as vectors.
    extern __shared__ float warp_sums[];  // [2][warps][G * VEC]
    const int warps = int(blockDim.x) / kWarpSize;
#pragma unroll
    for (int which = 0; which < S; ++which) {  // dgamma's sums, then dbeta's
#pragma unroll
      for (int p = 0; p < PACKS; ++p) {
        float *buffer = warp_sums + ((which * PACKS + p) % 2) * warps * G * VEC;
        float v[VEC];
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          v[i] = which == 0 ? acc_g[p][i] : acc_b[p][i];
#pragma unroll
          for (int offset = G; offset < kWarpSize; offset *= 2) v[i] += shfl_xor(v[i], offset, kWarpSize);
        }
        if (lane_id() < G) store_vec<float, VEC>(buffer + warp_id() * G * VEC + lane_id() * VEC, v);
        __syncthreads();
        for (int t = int(threadIdx.x); t < G * VEC; t += int(blockDim.x)) {
          const int col = p * G * VEC + t;  // element t % VEC of lane t / VEC's pack p
          float sum = 0.0f;
          for (int w = 0; w < warps; ++w) sum += buffer[w * G * VEC + t];
          if (col < a.cols) (which == 0 ? pg : pb)[col] = sum;
        }
      }
    }
  }
  if (sums_out.counter) finalize_in_last_block<!kRms>(a, sums_out);
}

// The streamed backward kernels' work on one vector of a row: its share of
// the row sums (of dy * g and of dy * g * xhat), then, from the row's c1 and
// c2, dx = rstd * (dy * g - c1 - xhat * c2), leaving xhat for dgamma.
template <class T, int VEC>
__device__ __forceinline__ void add_backward_sums(const xvk_norm_backward_args &a, int64_t col, const float (&xv)[VEC],
                                                  const float (&dyv)[VEC], float mean, float rstd, float (&sums)[2]) {
  float g[VEC], unused[VEC];
  load_affine<T, VEC>(a.gamma, nullptr, a.param_dtype == XVK_DTYPE_F32, a.zero_centered_gamma, col, g, unused);
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    const float dyg = dyv[i] * g[i];
    sums[0] += dyg;
    sums[1] += dyg * (xv[i] - mean) * rstd;
  }
}
template <class T, int VEC>
__device__ __forceinline__ void backward_dx(const xvk_norm_backward_args &a, int64_t col, const float (&xv)[VEC],
                                            const float (&dyv)[VEC], float mean, float rstd, const RowDx &row_dx,
                                            float (&xhat)[VEC], float (&dx)[VEC]) {
  float g[VEC], unused[VEC];
  load_affine<T, VEC>(a.gamma, nullptr, a.param_dtype == XVK_DTYPE_F32, a.zero_centered_gamma, col, g, unused);
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    xhat[i] = (xv[i] - mean) * rstd;
    dx[i] = row_dx(dyv[i] * g[i], xhat[i]);
  }
}

template <class T, int VEC>
__global__ void __launch_bounds__(1024) norm_backward_reread(const xvk_norm_backward_args a) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  __shared__ float scratch[2][kMaxWarpsPerBlock];
  const int64_t step = int64_t(blockDim.x) * VEC;
  const float inv_cols = 1.0f / float(a.cols);
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T *x = static_cast<const T *>(a.x.data) + row * a.x.row_stride;
    const T *dy = static_cast<const T *>(a.dy.data) + row * a.dy.row_stride;
    const float mean = a.mean ? a.mean[row] : 0.0f, rstd = a.rstd[row];
    float sums[2] = {0.0f, 0.0f};
    for (int64_t col = int64_t(threadIdx.x) * VEC; col < a.cols; col += step) {
      float xv[VEC], dyv[VEC];
      load_vec<T, VEC>(x + col, xv);
      load_vec<T, VEC>(dy + col, dyv);
      add_backward_sums<T, VEC>(a, col, xv, dyv, mean, rstd, sums);
    }
    RowReducer<0>::all_reduce(sums, SumOp{}, scratch);
    const RowDx row_dx(rstd, a.rms ? 0.0f : sums[0] * inv_cols, sums[1] * inv_cols);
    T *dx = static_cast<T *>(a.dx.data) + row * a.dx.row_stride;
    for (int64_t col = int64_t(threadIdx.x) * VEC; col < a.cols; col += step) {
      float xv[VEC], dyv[VEC], xhat[VEC], out[VEC];
      load_vec<T, VEC>(x + col, xv);
      load_vec<T, VEC>(dy + col, dyv);
      backward_dx<T, VEC>(a, col, xv, dyv, mean, rstd, row_dx, xhat, out);
      store_vec<T, VEC>(dx + col, out);
    }
  }
}

// Backward for rows too wide for the register variants whose dgamma/dbeta
// columns still fit: a block owns a row and reads it twice (the row sums,
// then dx; L2 may still hold it), and each thread keeps the dgamma/dbeta sums
// of its PACKS vectors of columns across rows, as the register variants do,
// so no column pass reads x and dy a third time. The dgamma sums stay in
// registers; the dbeta sums too, or, kBetaShared (reread_sums_beta_shared),
// in dynamic shared memory, one run of float4s per thread, so that twice the
// columns fit; each thread touches only its own, so no barrier guards them.
// partial gets one row of [2][cols] sums per block.
template <class T, int VEC, int PACKS, bool kBetaShared>
__global__ void __launch_bounds__(reread_sums_max_threads(PACKS * VEC, kBetaShared))
    norm_backward_reread_sums(const xvk_norm_backward_args a, const ParamGradSums sums_out) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  __shared__ float scratch[2][kMaxWarpsPerBlock];
  extern __shared__ float4 beta_runs[];  // kBetaShared: the threads' runs of dbeta sums
  const RowMapping<0, 1> map;
  const float inv_cols = 1.0f / float(a.cols);
  const bool want_beta = a.dbeta != nullptr;  // else its sums are written as 0, unread
  float acc_g[PACKS][VEC] = {}, acc_b[kBetaShared ? 1 : PACKS][VEC] = {};
  // kBetaShared: element p * VEC + i of the thread's columns.
  const SharedBetaSums<kBetaShared ? PACKS * VEC : 4> beta_sum(beta_runs);
  if constexpr (kBetaShared) beta_sum.zero();
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T *x = static_cast<const T *>(a.x.data) + row * a.x.row_stride;
    const T *dy = static_cast<const T *>(a.dy.data) + row * a.dy.row_stride;
    const float mean = a.mean ? a.mean[row] : 0.0f, rstd = a.rstd[row];
    // Loads are issued pack by pack: with the sums held in registers, all of
    // a row's packs at once would spill. Lanes of up to 16 elements first ask
    // L2 for the whole row (no registers), so the packs' loads wait on lines
    // already requested rather than one memory round trip each. H200, same
    // run: 16-bit 49152 x 16384 10.5-11.5% faster, fp32 1.6-2.9%; with 32
    // elements (dbeta sums in shared memory, spills) up to 6% slower.
    if constexpr (kL2Prefetch && PACKS * VEC <= kRereadSumsPrefetchElems) {
      prefetch_span_l2(x, a.cols * int64_t(sizeof(T)));
      prefetch_span_l2(dy, a.cols * int64_t(sizeof(T)));
    }
    float sums[2] = {0.0f, 0.0f};
#pragma unroll
    for (int p = 0; p < PACKS; ++p) {
      const int col = map.col(p, VEC);
      if (col >= a.cols) continue;
      float xv[VEC], dyv[VEC];
      load_pack<T, VEC>(x + col, xv);
      load_pack<T, VEC>(dy + col, dyv);
      add_backward_sums<T, VEC>(a, col, xv, dyv, mean, rstd, sums);
    }
    RowReducer<0>::all_reduce(sums, SumOp{}, scratch);
    const RowDx row_dx(rstd, a.rms ? 0.0f : sums[0] * inv_cols, sums[1] * inv_cols);
    T *dx = static_cast<T *>(a.dx.data) + row * a.dx.row_stride;
#pragma unroll
    for (int p = 0; p < PACKS; ++p) {
      const int col = map.col(p, VEC);
      if (col >= a.cols) continue;
      float xv[VEC], dyv[VEC], xhat[VEC], out[VEC];
      load_pack<T, VEC>(x + col, xv);
      load_pack<T, VEC>(dy + col, dyv);
      backward_dx<T, VEC>(a, col, xv, dyv, mean, rstd, row_dx, xhat, out);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        acc_g[p][i] += dyv[i] * xhat[i];
        if constexpr (kBetaShared) {
          if (want_beta) beta_sum[p * VEC + i] += dyv[i];
        } else {
          acc_b[p][i] += dyv[i];
        }
      }
      store_vec<T, VEC>(dx + col, out);
    }
  }
  if (!sums_out.partial) return;
  float *pg = sums_out.partial + int64_t(blockIdx.x) * 2 * a.cols, *pb = pg + a.cols;
#pragma unroll
  for (int p = 0; p < PACKS; ++p) {
    const int col = map.col(p, VEC);
    if (col >= a.cols) continue;
    store_vec<float, VEC>(pg + col, acc_g[p]);
    if constexpr (kBetaShared) {
      float b[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) b[i] = want_beta ? beta_sum[p * VEC + i] : 0.0f;
      store_vec<float, VEC>(pb + col, b);
    } else {
      store_vec<float, VEC>(pb + col, acc_b[p]);
    }
  }
  if (sums_out.counter) finalize_in_last_block(a, sums_out);
}

// Backward for wide rows, a row per cluster of blocks (Variant::kCluster,
// ClusterSlice): each block's lanes hold their x, dy and gamma, and keep
// their dgamma and dbeta sums, in registers however wide the row, so x and
// dy are read once and no column pass reads them again (kReread reads them
// three times; at 32768 columns that pass alone took 35% of the time, H100).
// The two row sums meet through RowShares (stores into each other's shared
// memory, counted by a transaction barrier). Lanes load their next row
// while they reduce the current one; 16-bit lanes add to their dgamma and
// dbeta sums while the other blocks' shares come in (kEarlySums). partial
// gets one row of [2][cols] sums per cluster.
// A cluster barrier per row (before: arrive after sending the shares, wait
// before reading them) made every thread's arrive wait out its own loads of
// the next row and stores of the last (ncu, H100, LayerNorm fp16 49152 x
// 32768: "membar" the first stall reason, DRAM at 64% of peak; now 80%, the
// op 15-19% faster at 32768 columns:
// bench/results/h100-2026-11-27-cluster-transaction-barriers.txt).
// Float32 lanes also ask L2 for the row after next (prefetch_row_l2). H100,
// same build, on against off (bench/results/h100-2026-11-26-cluster-l2-ahead.txt):
// float32 2.3-3.2% faster at 32768 columns, 0-0.6% at 16384; 16-bit 5-9%
// slower.
// 16-bit lanes of one 16-byte pack are built for two blocks of 512 threads
// per SM (64 registers): left to itself, ptxas gave the bfloat16 kernel 74
// registers, one block per SM. The others take no minimum (0): a minimum of
// one block raised their register counts (float32 lanes of 8 from 95 to
// 109, 16-bit lanes of 16 from 126 to 147, one block per SM fewer).
// kRms: as norm_backward_registers'.
template <class T, int VEC, int PACKS, bool kRms>
__global__ void __launch_bounds__(cluster_kernel_max_threads(PACKS * VEC), sizeof(T) == 2 && PACKS * VEC == 8 ? 2 : 0)
    norm_backward_cluster(const xvk_norm_backward_args a, const ParamGradSums sums_out, int slice_cols) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  constexpr bool kAheadL2 = kL2Prefetch && sizeof(T) == 4;
  // Float32 lanes add to their dgamma and dbeta sums with the row sums and
  // keep dy * g for dx; 16-bit lanes add to them while the shares come in
  // and form dy * g again for dx. H200, two runs, best of two in each:
  // float32 49152 x 32768 1.2-2.3% faster early, 16384 columns 0-1.0%, 8192
  // and 4096 columns within 0.3%; 16-bit lanes of one pack 4-6% slower
  // early (RMSNorm fp16 49152 x 32768 2928 -> 3077 us)
  // (bench/results/h200-2026-11-29-cluster-trials.txt).
  constexpr bool kEarlySums = sizeof(T) == 4;
  __shared__ float scratch[2][kMaxWarpsPerBlock];
  __shared__ RowShares shares;
  const ClusterSlice map(slice_cols, a.cols);
  shares.init();
  cluster_arrive();  // see cluster_wait below
  const int end = map.end;
  const int64_t first_row = map.first_row, row_step = map.row_step;
  const bool f32 = a.param_dtype == XVK_DTYPE_F32;
  float g[PACKS][VEC], unused[VEC];  // 0 past the slice, where dy reads as 0 too
#pragma unroll
  for (int p = 0; p < PACKS; ++p) {
    if (map.col(p, VEC) < end) {
      load_affine<T, VEC>(a.gamma, nullptr, f32, a.zero_centered_gamma, map.col(p, VEC), g[p], unused);
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) g[p][i] = 0.0f;
    }
  }
  float acc_g[PACKS][VEC] = {}, acc_b[PACKS][VEC] = {};
  const float inv_cols = 1.0f / float(a.cols);
  const T *x_data = static_cast<const T *>(a.x.data), *dy_data = static_cast<const T *>(a.dy.data);
  Pack<T, VEC> raw_x[PACKS], raw_dy[PACKS];
  float raw_mean, raw_rstd;
  auto issue = [&](int64_t row) {
    const bool valid = row < a.rows;
    raw_mean = !kRms && valid && a.mean ? a.mean[row] : 0.0f;
    raw_rstd = valid ? a.rstd[row] : 0.0f;
    issue_row(map, dy_data + row * a.dy.row_stride, valid, end, raw_dy);
    issue_row(map, x_data + row * a.x.row_stride, valid, end, raw_x);
  };
  issue(first_row);
  // No block writes into another's shared memory before every block of the
  // cluster has started (compute-sanitizer racecheck: a write to "a block
  // that might not have entered yet") and set up its transaction barriers.
  cluster_wait();
  unsigned k = 0;  // the row's place among this cluster's (RowShares reads its last two bits)
  for (int64_t row = first_row; row < a.rows; row += row_step, ++k) {
    float xhat[PACKS][VEC], dy[PACKS][VEC];
    unpack_row(raw_x, xhat);
    unpack_row(raw_dy, dy);
    const float mean = raw_mean, rstd = raw_rstd;
    issue(row + row_step);
    if constexpr (kAheadL2) {
      const int64_t ahead = row + 2 * row_step;
      prefetch_row_l2<T, VEC, PACKS>(map, dy_data + ahead * a.dy.row_stride, ahead < a.rows, end);
      prefetch_row_l2<T, VEC, PACKS>(map, x_data + ahead * a.x.row_stride, ahead < a.rows, end);
    }
    float sums[2] = {0.0f, 0.0f};
#pragma unroll
    for (int p = 0; p < PACKS; ++p)
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        xhat[p][i] = (xhat[p][i] - mean) * rstd;
        const float dyg = dy[p][i] * g[p][i];
        if constexpr (!kRms) sums[0] += dyg;
        sums[1] += dyg * xhat[p][i];
        if constexpr (kEarlySums) {
          acc_g[p][i] += dy[p][i] * xhat[p][i];
          if constexpr (!kRms) acc_b[p][i] += dy[p][i];
          dy[p][i] = dyg;
        }
      }
    RowReducer<0>::all_reduce(sums, SumOp{}, scratch);
    shares.share(map, k, make_float2(sums[0], sums[1]));
    if constexpr (!kEarlySums) {
#pragma unroll
      for (int p = 0; p < PACKS; ++p)
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          acc_g[p][i] += dy[p][i] * xhat[p][i];
          if constexpr (!kRms) acc_b[p][i] += dy[p][i];
        }
    }
    const float2 total = shares.total(map, k);
    const RowDx row_dx(rstd, kRms || a.rms ? 0.0f : total.x * inv_cols, total.y * inv_cols);
    T *dx = static_cast<T *>(a.dx.data) + row * a.dx.row_stride;
#pragma unroll
    for (int p = 0; p < PACKS; ++p) {
      const int col = map.col(p, VEC);
      if (col >= end) continue;
      float out[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) out[i] = row_dx(kEarlySums ? dy[p][i] : dy[p][i] * g[p][i], xhat[p][i]);
      store_vec<T, VEC>(dx + col, out);
    }
  }
  // Every store into a block's shared memory landed before that block's last
  // wait returned, so each block may end when its own work does.
  if (!sums_out.partial) return;
  float *pg = sums_out.partial + first_row * 2 * a.cols, *pb = pg + a.cols;
#pragma unroll
  for (int p = 0; p < PACKS; ++p) {
    const int col = map.col(p, VEC);
    if (col >= end) continue;
    store_vec<float, VEC>(pg + col, acc_g[p]);
    if constexpr (!kRms) store_vec<float, VEC>(pb + col, acc_b[p]);
  }
}

// dgamma/dbeta partials for rows too wide for the register variants: block
// (x, y) sums columns [x * blockDim.x * VEC, ...) over row chunk y.
template <class T, int VEC>
__global__ void __launch_bounds__(256) norm_param_grad_columns(const xvk_norm_backward_args a, float *partial,
                                                              int64_t rows_per_chunk) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  if (col >= a.cols) return;
  const int64_t begin = int64_t(blockIdx.y) * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < a.rows ? begin + rows_per_chunk : a.rows;
  float acc_g[VEC] = {}, acc_b[VEC] = {};
  for (int64_t row = begin; row < end; ++row) {
    float xv[VEC], dyv[VEC];
    load_vec<T, VEC>(static_cast<const T *>(a.x.data) + row * a.x.row_stride + col, xv);
    load_vec<T, VEC>(static_cast<const T *>(a.dy.data) + row * a.dy.row_stride + col, dyv);
    const float mean = a.mean ? a.mean[row] : 0.0f, rstd = a.rstd[row];
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      acc_g[i] += dyv[i] * (xv[i] - mean) * rstd;
      acc_b[i] += dyv[i];
    }
  }
  float *pg = partial + int64_t(blockIdx.y) * 2 * a.cols, *pb = pg + a.cols;
  store_vec<float, VEC>(pg + col, acc_g);
  store_vec<float, VEC>(pb + col, acc_b);
}

// The finalize kernel: block (x, y) adds up slice y of the parts for the
// kFinalizeTileCols columns of tile x (a column per threadIdx.x: a tile's
// width, not the warp's). Its blockDim.y lanes (a power of two, up to
// kFinalizeMaxLanes) take parts l, l + lanes, ... of the slice, loading
// kFinalizeInFlight of them at once, and their sums meet in a tree over the
// lanes. The partial sums are few bytes but just written: what costs is the
// latency of each round of loads, so the lanes are many and their rounds
// few. With one slice that is the result; with more, each slice's sums go
// to slice_sums[slice][2][cols], and the tile's last block to finish (a
// ticket on counters[x]) adds them in slice order.
constexpr int kFinalizeTileCols = 32;
constexpr int kFinalizeMaxLanes = 32;
constexpr int kFinalizeInFlight = 8;
template <bool kBeta>  // dbeta wanted: its sums are read and added too
__global__ void __launch_bounds__(kFinalizeTileCols * kFinalizeMaxLanes)
    norm_backward_finalize(const xvk_norm_backward_args a, const float *partial, int64_t parts, float *slice_sums,
                           unsigned *counters) {
  wait_for_prior_kernel();  // launch_kernel: the launch may overlap the previous kernel
  __shared__ float lane_sums[kFinalizeMaxLanes][2][kFinalizeTileCols];
  __shared__ bool last;
  const int x = int(threadIdx.x), y = int(threadIdx.y), lanes = int(blockDim.y);
  const int64_t col = int64_t(blockIdx.x) * kFinalizeTileCols + x;
  const bool in = col < a.cols;
  const int64_t per_slice = (parts + gridDim.y - 1) / gridDim.y;
  const int64_t begin = int64_t(blockIdx.y) * per_slice, end = begin + per_slice < parts ? begin + per_slice : parts;
  float g = 0.0f, b = 0.0f;
  if (in) {
    constexpr int K = kFinalizeInFlight;
    const int64_t stride = 2 * a.cols;  // floats from one part to the next
    float sg[K] = {}, sb[K] = {};
    int64_t part = begin + y;
    for (; part + (K - 1) * lanes < end; part += K * lanes) {
      float vg[K], vb[K];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const float *p = partial + (part + k * lanes) * stride + col;
        vg[k] = p[0], vb[k] = kBeta ? p[a.cols] : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < K; ++k) sg[k] += vg[k], sb[k] += vb[k];
    }
    for (; part < end; part += lanes)
      sg[0] += partial[part * stride + col], sb[0] += kBeta ? partial[part * stride + a.cols + col] : 0.0f;
    // A tree over the K sums, written out: clang for AMD did not unroll a
    // halving loop, which left sg and sb in scratch memory.
    static_assert(K == 8, "the tree below adds eight sums");
#pragma unroll
    for (int k = 0; k < 4; ++k) sg[k] += sg[k + 4], sb[k] += sb[k + 4];
#pragma unroll
    for (int k = 0; k < 2; ++k) sg[k] += sg[k + 2], sb[k] += sb[k + 2];
    g = sg[0] + sg[1], b = sb[0] + sb[1];
  }
  lane_sums[y][0][x] = g, lane_sums[y][1][x] = b;
  for (int half = lanes / 2; half > 0; half /= 2) {
    __syncthreads();
    if (y < half) lane_sums[y][0][x] += lane_sums[y + half][0][x], lane_sums[y][1][x] += lane_sums[y + half][1][x];
  }
  __syncthreads();
  g = lane_sums[0][0][x], b = lane_sums[0][1][x];
  if (gridDim.y == 1) {
    if (y == 0 && in) store_param_grads(a, col, g, b);
    return;
  }
  if (y == 0 && in) {
    float *mine = slice_sums + int64_t(blockIdx.y) * 2 * a.cols + col;
    mine[0] = g, mine[a.cols] = b;
  }
  __threadfence();  // this slice's sums, before its ticket
  __syncthreads();
  if (x == 0 && y == 0) last = atomicAdd(&counters[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();  // every slice's sums, after the last ticket
  if (y == 0 && in) {
    // In slice order, loaded kFinalizeInFlight slices at a time.
    g = b = 0.0f;
    for (unsigned s0 = 0; s0 < gridDim.y; s0 += kFinalizeInFlight) {
      float vg[kFinalizeInFlight], vb[kFinalizeInFlight];
#pragma unroll
      for (int k = 0; k < kFinalizeInFlight; ++k) {
        const float *theirs = slice_sums + int64_t(s0 + k) * 2 * a.cols + col;
        vg[k] = s0 + k < gridDim.y ? theirs[0] : 0.0f, vb[k] = s0 + k < gridDim.y ? theirs[a.cols] : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < kFinalizeInFlight; ++k) g += vg[k], b += vb[k];
    }
    store_param_grads(a, col, g, b);
  }
  if (x == 0 && y == 0) counters[blockIdx.x] = 0;  // ready for the next kernel on the stream
}

template <class T, int VEC, bool kResidual>
xvk_status_t forward_registers(Context &ctx, const Config &c, const xvk_norm_forward_args &a) {
  xvk_status_t status = XVK_ERROR_INTERNAL;
  if (c.variant == Variant::kWarpRing) {  // on 16-byte vectors, where copies run in the background (complete_config)
    if constexpr (kAsyncCopy && VEC * sizeof(T) == 16)
      with_packs_of(InstantiatedPacks{}, c.packs, [&](auto packs) {
        constexpr int P = decltype(packs)::value;
        with_forward_affine_form<T, VEC, P>(a, [&](auto form) {
          constexpr AffineForm F = decltype(form)::value;
          status = launch_rows_smem(ctx, c, norm_forward_registers<T, VEC, P, kRingRowLanes, 1, F, kResidual, false, true>,
                                    "norm_forward_registers", a.rows, c.threads / kRingRowLanes,
                                    size_t(config_shared_bytes(OpKind::kNormForward, c, a.cols, sizeof(T))), a);
        });
      });
  } else if (c.variant == Variant::kGroup) {
    with_group_shape(c.group, c.packs, c.rows, [&](auto g, auto packs, auto rows) {
      constexpr int G = decltype(g)::value, P = decltype(packs)::value, R = decltype(rows)::value;
      with_forward_affine_form<T, VEC, P>(a, [&](auto form) {
        constexpr AffineForm F = decltype(form)::value;
        status = launch_rows(ctx, c, norm_forward_registers<T, VEC, P, G, R, F, kResidual>, "norm_forward_registers",
                             a.rows, int64_t(c.threads / G) * R, a);
      });
    });
  } else {
    with_block_packs(c.packs, [&](auto packs) {
      constexpr int P = decltype(packs)::value;
      constexpr bool kAhead = kHasL2RowAhead<T, VEC, P>;
      // A row's first read: x, and residual.
      const int64_t row_bytes = a.cols * int64_t(sizeof(T)) * (kResidual ? 2 : 1);
      with_forward_affine_form<T, VEC, P>(a, [&](auto form) {
        constexpr AffineForm F = decltype(form)::value;
        status = launch_block_rows<kAhead>(ctx, c, norm_forward_registers<T, VEC, P, 0, 1, F, kResidual>,
                                           norm_forward_registers<T, VEC, P, 0, 1, AffineForm::kGeneral, true, kAhead>,
                                           "norm_forward_registers", a.rows, row_bytes, a);
      });
    });
  }
  return status;
}

template <class T, int VEC>
xvk_status_t forward(Context &ctx, const Config &c, const xvk_norm_forward_args &a) {
  xvk_status_t status = XVK_ERROR_INTERNAL;
  switch (c.variant) {
    case Variant::kGroup:
    case Variant::kBlock:
    case Variant::kWarpRing:
      status = a.residual.data ? forward_registers<T, VEC, true>(ctx, c, a) : forward_registers<T, VEC, false>(ctx, c, a);
      break;
    case Variant::kReread:
      status = launch_rows(ctx, c, norm_forward_reread<T, VEC>, "norm_forward_reread", a.rows, 1, a);
      break;
    case Variant::kShared:
      status = launch_rows_smem(ctx, c, norm_forward_shared<T, VEC>, "norm_forward_shared", a.rows, 1,
                                size_t(shared_bytes(OpKind::kNormForward, a.cols, VEC, sizeof(T))), a);
      break;
    case Variant::kRereadSums:  // the backward's (complete_config)
    case Variant::kCluster:     // the backward's (complete_config)
    case Variant::kSharedDy:    // the softmax backward's (complete_config)
    case Variant::kRing:        // the softmax forward's (complete_config)
      break;
  }
  return status;
}

// How norm_backward_finalize splits the parts: a tile of kFinalizeTileCols
// columns per block, the most lanes (up to 32) that still give each lane a
// whole round of kFinalizeInFlight parts, and slices of the parts only when
// that leaves more than two rounds per lane. The kernel loads whole rounds
// together and the rest one part at a time: 132 parts on 32 lanes (enough
// lanes for one round to cover every part) left each lane 4-5 parts loaded
// in turn. 16 lanes there, H200, same run, best of two: norm backward 16-bit
// 8192 x 5120 0.970-0.974x the time, 8192 x 8192 0.978-0.979x, 8192 x 768
// 0.973-0.989x, 49152 x 128 0.978-0.997x, the rest 0.985-1.009x; 0.997x
// over all 108 (bench/results/h200-2026-11-29-finalize-lanes.txt).
// Slices cost their completion tickets, about 2 us: where there are
// slices anyway, as many as the tiles leave SMs idle (down to two parts a
// lane), since one block reads at one SM's share of the L2's bandwidth. H100,
// same run: fp32 8192 x 768 backward 38.14 -> 37.57 us (its slices raised to
// 5); splitting a single slice made every such case 1.8-2.5 us slower
// (bench/results/h100-2026-11-27-finalize-spread.txt).
struct FinalizeGrid {
  int lanes = 1;
  int64_t tiles = 0, slices = 0;
  FinalizeGrid() = default;
  FinalizeGrid(int64_t parts, int64_t cols, int sm_count) {
    tiles = ceil_div(cols, kFinalizeTileCols);
    while (lanes < kFinalizeMaxLanes && int64_t(lanes) * 2 * kFinalizeInFlight <= parts) lanes *= 2;
    slices = std::max<int64_t>(1, ceil_div(parts, int64_t(2) * kFinalizeInFlight * lanes));
    const int64_t spread = std::max<int64_t>(1, sm_count / tiles);
    if (slices > 1) slices = std::max(slices, std::min(spread, ceil_div(parts, int64_t(2) * lanes)));
  }
};

// Everything one call's dgamma/dbeta sums use, obtained by param_grad_scratch
// before any kernel of the call runs, so that a failure leaves every output
// unwritten.
struct ParamGradScratch {
  ParamGradSums sums;                     // what the backward kernel writes (and adds up, in_kernel)
  int64_t parts = 0;
  FinalizeGrid grid;                      // norm_backward_finalize's split of the parts (not in_kernel)
  unsigned *finalize_counters = nullptr;  // its slices' completion counters (grid.slices > 1)
};

// The scratch for `parts` parts of sums: the workspace holds the parts, then
// room for the finalize's slice sums or for the last block's lane sums (lanes
// * cols <= threads <= 1024). The completion counters serve the kernel's last
// block when in_kernel, else norm_backward_finalize.
xvk_status_t param_grad_scratch(Context &ctx, int64_t parts, int64_t cols, bool in_kernel, ParamGradScratch *out) {
  out->parts = parts;
  out->grid = FinalizeGrid(parts, cols, ctx.info->sm_count);
  const int64_t floats = parts * 2 * cols + std::max<int64_t>(out->grid.slices * 2 * cols, 2 * 1024);
  void *p = nullptr;
  if (ctx.workspace(size_t(floats) * sizeof(float), &p) != kSuccess) return XVK_ERROR_OUT_OF_MEMORY;
  out->sums.partial = static_cast<float *>(p);
  if (in_kernel) out->sums.lane_sums = out->sums.partial + parts * 2 * cols;
  const int counters = in_kernel ? 1 : out->grid.slices > 1 ? int(out->grid.tiles) : 0;
  if (counters > 0) {
    unsigned *c = nullptr;
    const error_t e = ctx.completion_counters(counters, &c);
    if (e != kSuccess) return device_error("allocating completion counters", e);
    (in_kernel ? out->sums.counter : out->finalize_counters) = c;
  }
  return XVK_SUCCESS;
}

// The finalize kernel over the scratch's parts (param_grad_scratch with
// in_kernel false).
xvk_status_t finalize(Context &ctx, const xvk_norm_backward_args &a, const ParamGradScratch &s) {
  float *slice_sums = s.sums.partial + s.parts * 2 * a.cols;
  const dim3 blocks(unsigned(s.grid.tiles), unsigned(s.grid.slices)), block(kFinalizeTileCols, unsigned(s.grid.lanes));
  // Without dbeta (the kRms kernels write no sums for it) the finalize reads dgamma's alone.
  return launch_kernel(ctx, "norm_backward_finalize",
                       a.dbeta ? norm_backward_finalize<true> : norm_backward_finalize<false>, blocks, block, 0, a,
                       s.sums.partial, s.parts, slice_sums, s.finalize_counters);
}

// Calls f with std::true_type where the backward's kRms kernels serve a
// (RMSNorm without dbeta), else std::false_type.
template <class F>
void with_rms_kernel(const xvk_norm_backward_args &a, F &&f) {
  if (a.rms && !a.dbeta)
    f(std::true_type{});
  else
    f(std::false_type{});
}

template <class T, int VEC>
xvk_status_t backward(Context &ctx, const Config &c, const xvk_norm_backward_args &a) {
  const bool want_params = a.dgamma || a.dbeta;
  xvk_status_t status = XVK_ERROR_INTERNAL;
  if (c.variant == Variant::kReread) {
    // Column sums over row chunks: enough blocks to fill the device.
    const int threads = 256;
    const int64_t col_blocks = ceil_div(ceil_div(a.cols, VEC), threads);
    const int64_t chunks = a.rows == 0 ? 1 : std::min<int64_t>(a.rows, std::max<int64_t>(1, 4 * ctx.info->sm_count / col_blocks));
    const int64_t rows_per_chunk = a.rows == 0 ? 1 : ceil_div(a.rows, chunks);
    const int64_t parts = a.rows == 0 ? 1 : ceil_div(a.rows, rows_per_chunk);
    ParamGradScratch scratch;
    if (want_params && (status = param_grad_scratch(ctx, parts, a.cols, false, &scratch)) != XVK_SUCCESS)
      return status;
    if (a.rows > 0) {
      status = launch_rows(ctx, c, norm_backward_reread<T, VEC>, "norm_backward_reread", a.rows, 1, a);
      if (status != XVK_SUCCESS || !want_params) return status;
    }
    status = launch_kernel(ctx, "norm_param_grad_columns", norm_param_grad_columns<T, VEC>,
                           dim3(unsigned(col_blocks), unsigned(parts)), dim3(threads), 0, a, scratch.sums.partial,
                           rows_per_chunk);
    return status == XVK_SUCCESS ? finalize(ctx, a, scratch) : status;
  }
  // smem: the group variants' cross-warp sums, two packs of columns (double-buffered).
  auto launch = [&](auto kernel, const char *name, int64_t rows_per_block, size_t smem) {
    const int resident = ctx.blocks_per_sm(kernel, c.threads, smem);
    const int blocks = grid_blocks(ctx, ceil_div(a.rows, rows_per_block), resident, c.blocks_per_sm);
    const int64_t parts = blocks;
    ParamGradScratch scratch;
    // The kernel's last block adds up the parts when they are few.
    const bool in_kernel = want_params && InKernelFinalize(parts, a.cols, c.threads).loads <= kInKernelFinalizeLoads;
    if (want_params && (status = param_grad_scratch(ctx, parts, a.cols, in_kernel, &scratch)) != XVK_SUCCESS) return;
    status = launch_kernel(ctx, name, kernel, dim3(blocks), dim3(c.threads), smem, a, scratch.sums);
    if (status == XVK_SUCCESS && want_params && !in_kernel) status = finalize(ctx, a, scratch);
  };
  if (c.variant == Variant::kGroup) {
    with_group_shape(c.group, c.packs, c.rows, [&](auto g, auto packs, auto rows) {
      constexpr int G = decltype(g)::value, P = decltype(packs)::value, R = decltype(rows)::value;
      with_rms_kernel(a, [&](auto rms) {
        launch(norm_backward_registers<T, VEC, P, G, R, decltype(rms)::value>, "norm_backward_registers",
               int64_t(c.threads / G) * R,
               want_params ? 2 * size_t(c.threads / ctx.info->warp_size) * G * VEC * sizeof(float) : 0);
      });
    });
  } else if (c.variant == Variant::kBlock) {
    with_block_packs(c.packs, [&](auto packs) {
      with_rms_kernel(a, [&](auto rms) {
        constexpr bool kRms = decltype(rms)::value;
        launch(norm_backward_registers<T, VEC, decltype(packs)::value, 0, 1, kRms>, "norm_backward_registers", 1,
               kRms ? 0 : size_t(config_shared_bytes(OpKind::kNormBackward, c, a.cols, sizeof(T))));
      });
    });
  } else if (c.variant == Variant::kCluster) {
    if constexpr (kClusterLaunch) {
      with_cluster_packs(c.packs, [&](auto packs) {
        constexpr int P = decltype(packs)::value;
        if constexpr (P * VEC <= kMaxClusterElems) {
          with_rms_kernel(a, [&](auto rms) {
            const auto kernel = norm_backward_cluster<T, VEC, P, decltype(rms)::value>;
            const int64_t clusters = cluster_grid(ctx, c, kernel, a.rows);  // one part of the sums each
            ParamGradScratch scratch;
            if (want_params && (status = param_grad_scratch(ctx, clusters, a.cols, false, &scratch)) != XVK_SUCCESS)
              return;
            status = launch_cluster_rows(ctx, c, kernel, "norm_backward_cluster", clusters, a, scratch.sums,
                                         cluster_slice_cols(a.cols, VEC, c.group));
            if (status == XVK_SUCCESS && want_params) status = finalize(ctx, a, scratch);
          });
        }
      });
    }
  } else if (c.variant == Variant::kRereadSums) {
    const size_t smem = size_t(config_shared_bytes(OpKind::kNormBackward, c, a.cols, sizeof(T)));
    with_reread_sums_packs(c.packs, [&](auto packs) {
      constexpr int P = decltype(packs)::value, kElems = P * VEC;
      if constexpr (kElems <= kMaxRereadSumsElems) {
        if (smem == 0) {
          if constexpr (reread_sums_registers_max_threads(kElems) > 0)
            launch(norm_backward_reread_sums<T, VEC, P, false>, "norm_backward_reread_sums", 1, 0);
        } else if constexpr (kElems % 4 == 0) {
          launch(norm_backward_reread_sums<T, VEC, P, true>, "norm_backward_reread_sums", 1, smem);
        }
      }
    });
  }
  return status;
}

// Parameter vectors are read VEC at a time too: in 16-byte pieces.
bool params_aligned(const void *p) { return !p || aligned_to(p, kVectorBytes); }

}  // namespace

int norm_forward_vec(const xvk_norm_forward_args &a) {
  const int64_t es = element_size(a.dtype), vec = kVectorBytes / es;
  const bool ok = a.cols % vec == 0 && rows_aligned(a.x, kVectorBytes, es) && rows_aligned(a.y, kVectorBytes, es) &&
                  rows_aligned(a.residual, kVectorBytes, es) && rows_aligned(a.residual_out, kVectorBytes, es) &&
                  params_aligned(a.gamma) && params_aligned(a.beta);
  return ok ? int(vec) : 1;
}

xvk_status_t norm_forward(Context &ctx, const xvk_norm_forward_args &a, const Config *forced) {
  const int vec = norm_forward_vec(a);
  const Config c = config_for(ctx, forced, OpKind::kNormForward, flavour_of(a.rms), a, vec);
  return launch_typed(a.dtype, c.vec,
                      [&](auto tag, auto v) { return forward<decltype(tag), decltype(v)::value>(ctx, c, a); });
}

xvk_status_t norm_backward(Context &ctx, const xvk_norm_backward_args &a, const Config *forced) {
  const int64_t es = element_size(a.dtype), v = kVectorBytes / es;
  const bool ok = a.cols % v == 0 && rows_aligned(a.x, kVectorBytes, es) && rows_aligned(a.dy, kVectorBytes, es) &&
                  rows_aligned(a.dx, kVectorBytes, es) && params_aligned(a.gamma);
  const int vec = ok ? int(v) : 1;
  const Config c = config_for(ctx, forced, OpKind::kNormBackward, flavour_of(a.rms), a, vec);
  return launch_typed(a.dtype, c.vec,
                      [&](auto tag, auto vv) { return backward<decltype(tag), decltype(vv)::value>(ctx, c, a); });
}

}  // namespace xvk::gpu
