// sm_90 BatchNorm tuning: the activation sizes (and, channels-last, the
// channel counts) for which the training forward runs as one cooperative
// kernel (x read once, kept in shared memory) rather than two passes, per
// memory order and element width. Set from `xvk-bench --batch-norm`
// with XVK_BATCH_NORM_SINGLE_PASS=0 and =1 (see bench/results/); the kernel
// also has to fit, which batch_norm.cu checks.
#include "cuda/tuning/tuning.hpp"

namespace xvk::gpu {

extern const BatchNormTuning kBatchNormSm90;
// History, channels-first: on an H100 80GB HBM3 (tree d811455,
// bench/results/h100-2026-11-23-batch-norm-two-pass-stats.txt) one pass won
// on NCHW 16x32x112x112 (bn+relu fp16 35.6 -> 25.4 us). On an H200 the
// two-pass kernels then caught up (tree of 77bfe9f: bn+relu fp16 24.86 ->
// 23.65 us one pass, but bn+add+relu 27.97 -> 28.58).
// Then (H200, 2026-11-25, sources 03f2806d68bdf1e1, each variant three times
// alternated, best; bench/results/h200-2026-11-25-batch-norm-single-pass-off.txt),
// (16, 32, 112, 112), two passes / one pass, us:
//   NCHW bn+relu      fp16 22.5 / 23.5   bf16 22.2 / 23.2   fp32 32.0 / 30.2
//   NCHW bn+add+relu  fp16 25.7 / 27.7   bf16 25.5 / 27.7   fp32 38.2 / 38.8
//   NHWC bn+relu      fp16 29.7 / 29.8   bf16 29.8 / 30.1   fp32 40.4 / 34.7
//   NHWC bn+add+relu  fp16 33.7 / 35.1   bf16 33.7 / 35.1   fp32 46.9 / 43.8
// Now, with the channels-last single pass taking its statistics from the
// registers it loads the tile through (H200, 2026-11-26, same method):
//   NCHW bn+relu      fp16 22.5 / 23.1   bf16 22.2 / 23.2   fp32 31.9 / 30.0
//   NCHW bn+add+relu  fp16 25.6 / 28.3   bf16 25.5 / 27.7   fp32 38.3 / 38.7
//   NHWC bn+relu      fp16 29.8 / 27.9   bf16 29.7 / 28.4   fp32 40.6 / 32.7
//   NHWC bn+add+relu  fp16 33.7 / 33.6   bf16 33.6 / 33.3   fp32 46.8 / 42.0
// Then, with the grid's merges shortened (a warp per channel in phase 1, one
// round of loads per merge, finish's inputs loaded before the barrier) and
// finalize's loads batched (H200, 2026-11-26, sources 05296b4dc77eaa4a, best
// of two):
//   NCHW bn+relu      fp16 22.1 / 22.3   bf16 22.0 / 22.4   fp32 31.5 / 29.5
//   NCHW bn+add+relu  fp16 25.3 / 27.4   bf16 25.0 / 27.4   fp32 37.8 / 38.8
//   NHWC bn+relu      fp16 28.7 / 25.7   bf16 28.5 / 25.5   fp32 39.2 / 31.6
//   NHWC bn+add+relu  fp16 32.7 / 30.8   bf16 32.5 / 31.1   fp32 45.5 / 40.2
// That table said: one pass wherever it fits channels-last, channels-first
// in fp32 only, set on (16, 32, 112, 112) alone. Then the sizes around it
// (H200, 2026-11-26, sources 205fa39e442e47e3, xvk-bench --batch-norm
// --reps 30 with XVK_BATCH_NORM_SINGLE_PASS=0 and =1, best of two;
// bench/results/h200-2026-11-26-batch-norm-single-pass-sizes.txt), one pass
// / two passes, bn+relu and bn+add+relu, 16-bit (fp16 and bf16 within 2%):
//   NHWC c = 32, 64:  1.5 MiB 1.10-1.15, 3.1 MiB 1.02-1.08,
//                     6.1-24.5 MiB 0.87-0.98 (every case of five shapes won)
//   NHWC c = 128:     3.1 MiB 1.20-1.23;  c = 256: 3.1 MiB 1.55-1.57, 12.2 MiB 1.30-1.34
//   NCHW:             1.01-1.23 on the nine shapes it ran (planes of whole
//                     mask words: not 28 x 28 or 14 x 14), every case lost
// fp32:
//   NHWC c = 32, 64:  3.1 MiB 0.97-1.00, 6.1-24.5 MiB 0.77-0.93 (all won)
//   NHWC c = 128:     6.1 MiB 1.03-1.07
//   NCHW:             3.1-6.1 MiB 1.08-1.25 (but 8x64x56x56 bn+relu 0.97);
//                     12.2-24.5 MiB bn+relu 0.94-1.01, bn+add+relu 1.02-1.08
// The single kernel's phases are fixed costs that small tensors do not
// repay, and channels-last its merges grow with the channels. So: one pass
// channels-last from 6 MiB to where the tile fits, up to 64 channels; never
// channels-first (in fp32 the Add+ReLU forward lost what bn+relu won).
//
// Pass 2's grid (rows_per_thread): one wave of blocks walking all rows ended
// on its slowest blocks. H200, 2026-11-26, sources of 839c3de plus a switch
// (branch exp/bn-rows-grid), the full BatchNorm grid, bn+relu forward and
// backward, bn+add+relu forward and inference, best of two, time with about
// R rows per thread / one wave:
//   channels-first, R = 4: 256 x 64 x 112 x 112 and 256 x 256 x 56 x 56
//     0.952-0.977, 256 x 512 x 28 x 28 0.963-0.997; 256 x 1024 x 14 x 14
//     fp32 0.973-0.992 but 16-bit 0.984-1.021; 7 x 7 16-bit 1.006-1.078
//     (geometric mean over the 40 cases from 128 MiB: R = 2 0.975, 4 0.968,
//     8 0.979, 16 0.988)
//   channels-last fp32, R = 8: 112 x 112 and 56 x 56 0.965-0.999, 28 x 28
//     0.976-1.005, 14 x 14 0.989-1.014, 7 x 7 1.017-1.032 (from 256 MiB:
//     R = 4 0.983, 8 0.980)
//   channels-last 16-bit: slower at every R (R = 16: 1.002-1.131), each
//     thread loading VEC channels' coefficients before its rows
// So R = 4 channels-first from 128 MiB (28 x 28 in 16-bit, 14 x 14 in fp32),
// R = 8 channels-last fp32 from 256 MiB, one wave otherwise: 0.970x the time
// of the 52 cases it changes (none over 1.005x), 0.989x over all 144.
// H100, 2026-11-26 (branch exp/bn-r-sweep-h100, median of three, the five
// training and inference ops): channels-first at 98 MiB (14 x 14 16-bit,
// 7 x 7 fp32), R = 4 against one wave: 0.949-0.993 (bn+relu forward
// 0.964-0.973, inference 0.949-0.958), R = 2 0.953-1.004, R = 8
// 0.967-1.009; 7 x 7 16-bit (49 MiB), R = 2 0.984-1.010, R = 4
// 0.986-1.017: left at one wave. So channels-first from 64 MiB. (The H200
// sweep above had 14 x 14 16-bit at R = 4 0.984-1.021.)
//
// Pass 2's last-use loads (last_use_max_bytes): H100, 2026-11-26 (sources
// of main at abafbf6 plus the loads, xvk-bench --batch-norm --reps 50, best
// of three, against main's module in the same call;
// bench/results/h100-2026-11-26-batch-norm-last-use.txt): on every size in
// the first A/B, (16, 32, 112, 112) (12.25 MiB 16-bit, 24.5 MiB fp32) 0.97x
// the time in geometric mean, 7 x 7 and 14 x 14 16-bit (49 MiB) 1.000x and
// 1.006x, 28 x 28 and 56 x 56 1.010x and 1.014x. So up to 32 MiB, both
// memory orders and widths; no size between 25 and 49 MiB was measured.
//
// Pass 2 staging rows while finalize runs (pass2_stage_kib): H200,
// 2026-12-03 (session 46; bench/results/h200-2026-12-03-session46-trials.txt),
// 0, 16, 32 and 48 KiB in one library, three rounds alternated, best of
// three, the four training ops on 7 x 7, 14 x 14, 28 x 28 and (16, 32, 112,
// 112); 32 KiB against none:
//   channels-last 16-bit: 0.986x in geometric mean; 7 x 7 0.965-0.982,
//     14 x 14 0.981-0.994, 28 x 28 0.984-0.996 (16 KiB 0.990x, 48 KiB
//     0.989x: the bn+relu backward 1.00-1.01 there)
//   channels-last fp32: 0.993-1.027, nothing gained
//   channels-first 16-bit: 1.008x (0.940-1.086): the staged kernels with two
//     coefficient sets take 55-56 registers against 48, a resident block less
//     (bn+relu backward 1.04-1.09x, 7 x 7 forwards 1.03-1.05x)
// So 32 KiB channels-last 16-bit, none elsewhere. That sweep's channels-first
// fp32 rows split by direction (7 x 7: forwards 0.972-0.975, backwards
// 1.010-1.042), so the table has a forward and a backward size. H200,
// 2026-12-04 (session 51; bench/results/h200-2026-12-04-session51-trials.txt),
// XVK_BATCH_NORM_STAGE=1 against the table before, three rounds alternated,
// best of three, the four training ops on all six benchmark shapes,
// channels-first fp32: forwards 0.887-1.005 ((16, 32, 112, 112) bn+relu
// 0.887, 7 x 7 0.973, 14 x 14 0.984-0.991, larger 0.992-0.999), backwards
// 0.975-1.048 (bn+relu 1.036-1.048). So 32 KiB for the channels-first fp32
// forwards too.
//
// The held single pass (forward_single_pass_held: channels-last rows wider
// than a warp's vectors, or tensors larger than the tiles): H200, 2026-12-03
// (session 49; bench/results/h200-2026-12-03-session49-trials.txt), forced
// (XVK_BATCH_NORM_SINGLE_PASS=1) against the table's choice, best of two,
// NHWC bn+relu and bn+add+relu forwards on ten shapes: 1.11x the time in
// geometric mean (fp16 1.115, bf16 1.110, fp32 1.105); faster only on
// 32 x 256 x 56 x 56 16-bit bn+relu (0.90x) and 128 x 1024 x 14 x 14 bn+relu
// 16-bit (0.99x). Its fixed cost grew with the channels (64 x 2048 x 7 x 7
// fp16: 37 us against 25): publishing the blocks' states, 13 us of it at
// 2048 channels. With each state one 16-byte store (session 52; H200,
// 2026-12-04, bench/results/h200-2026-12-04-session52-trials.txt), forced
// against the table's two passes in the same run, best of two: bn+relu
// forwards of 51.4 MB 16-bit 0.861-0.976x (32x256x56x56 0.86-0.90,
// 128x1024x14x14 0.90-0.93, 256x2048x7x7 0.95-0.98), 25.7 MB 1.01-1.04x
// (128x2048x7x7, an earlier run), 102.8 MB 1.008-1.031x; fp32 1.00-1.04x
// but for 32x32x112x112 (0.91x, one case); Add+ReLU forwards (z read as
// well) 0.98-1.09x (256x2048x7x7 16-bit 1.03-1.05). So 16-bit from 32 to
// 64 MiB, and only without z (batch_norm.cu, single_pass); fp32 never.
//
// The channel-group forward (forward_channel_groups, channels-first
// training forwards; groups_max_tile_kib): H200, 2026-12-04 (session 55;
// bench/results/h200-2026-12-04-session55-trials.txt), XVK_BATCH_NORM_GROUPS=1
// against =0 (two passes), best of two, bn+relu and bn+add+relu forwards: a
// grid of one wave with tiles of 12.5-75 KB a block, 7 x 7 (16 x 1024, 32 x
// 2048, 64 x 512, 64 x 1024, 64 x 2048, 96 x 2048) 16-bit 0.68-0.90x the
// time, float32 0.76-0.98x; 8 x 64 x 28 x 28 0.90-0.98x, 32 x 256 x 28 x 28
// 0.92-1.02x. Slower: grids of more than a wave (16 x 1024 x 14 x 14 16-bit,
// 512 blocks of 12.5 KB, 1.14-1.20x; 64 x 1024 x 14 x 14 float32 1.03-1.09x,
// though 16-bit 0.88-0.93x) and tiles of 100 KB or more (64 x 256 x 28 x 28
// 16-bit 0.96-1.05x; at 256 x 2048 x 7 x 7 and 256 x 1024 x 14 x 14 16-bit
// no form tried was faster: 1.00x at best, with 8-byte runs of 100 KB and
// clusters of 2 or 4 blocks sharing a group's samples among the forms). So
// one wave and at most 80 KiB: in the same results, 40 cases taken at
// 0.65-1.00x (geometric mean 0.81), the other 44 unchanged; with the
// statistics as Welford's running means instead of shifted sums (item 5
// there), the 40 at 0.66-1.04x (geometric mean 0.82; 32 x 256 x 28 x 28
// 16-bit bn+add+relu 1.02-1.04x).
//
// The streamed channel groups (forward_channel_groups_streamed, 16-bit
// channels-first training forwards without z; groups_streamed_min_tile_kib,
// groups_streamed_max_run_vectors): H200, 2026-12-04 (session 56;
// bench/results/h200-2026-12-04-session56-trials.txt), as tuned against
// XVK_BATCH_NORM_GROUPS=0 (two passes), best of two, bn+relu forwards: runs
// of 49 vectors (7 x 7, 14 x 14) with tiles of 98-200 KiB 0.85-0.93x the
// time (256 x 2048 x 7 x 7 0.85-0.87, 128 x 2048 x 7 x 7 0.89-0.91,
// 160 x 1024 x 14 x 14 0.90-0.93, 256 x 1024 x 14 x 14 0.90-0.93); runs of
// 98 vectors (28 x 28) 0.96-1.10x (64 x 256 x 28 x 28 1.07-1.10) and of 392
// (56 x 56) 0.96-1.00x; tiles of 50 KB (64 x 2048 x 7 x 7) 0.89-0.91x, where
// forward_channel_groups takes 0.76-0.77x. So from 96 KiB, runs of up to
// 49 vectors, and at least a group per SM.
constexpr int64_t kMiB = int64_t(1) << 20;
constexpr int64_t kFits = 28 * kMiB;  // the tile fits: 132 SMs x 227 KB is 29.3 MiB
const BatchNormTuning kBatchNormSm90 = {
    {{0, 0}, {6 * kMiB, 6 * kMiB}},
    {{0, 0}, {kFits, kFits}},
    64,
    {32 * kMiB, 0},
    {64 * kMiB, 0},
    {{4, 4}, {0, 8}},
    {{64 * kMiB, 64 * kMiB}, {0, 256 * kMiB}},
    {{32 * kMiB, 32 * kMiB}, {32 * kMiB, 32 * kMiB}},
    {{{0, 32}, {32, 0}}, {{0, 0}, {32, 0}}},
    {80, 80},
    96,
    49,
    "H200 (pass 2 from 64 MiB channels-first: H100): one pass channels-last from 6 MiB to 28 MiB, up to 64 "
    "channels, two passes channels-first, the held single pass 16-bit from 32 to 64 MiB without z; "
    "pass 2 in many waves from 64 MiB channels-first, from 256 MiB channels-last fp32, "
    "never channels-last 16-bit; H100: pass 2's last-use loads up to 32 MiB; H200: training pass 2 stages rows in "
    "32 KiB channels-last 16-bit and, forward only, channels-first fp32; channels-first training forwards as "
    "channel groups in one wave of tiles up to 80 KiB, 16-bit without z as streamed groups from 96 KiB in runs of up to 49 vectors"};

}  // namespace xvk::gpu
