// Tests of the C# binding on the CPU backend, against float64 references written here.
// A console runner: prints one line per test and exits non-zero when any fails.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Runtime.InteropServices;
using Xvk;

static class XvkTests
{
    // --- a tiny test harness ---------------------------------------------------------------------

    class Failure : Exception
    {
        public Failure(string message) : base(message) { }
    }

    static void Assert(bool condition, string what)
    {
        if (!condition)
            throw new Failure(what);
    }

    static void AssertClose(float[] got, double[] want, double rtol, double atol)
    {
        Assert(got.Length == want.Length, string.Format("length {0}, expected {1}", got.Length, want.Length));
        for (int i = 0; i < got.Length; ++i)
        {
            double tolerance = atol + rtol * Math.Abs(want[i]);
            if (!(Math.Abs(got[i] - want[i]) <= tolerance))
                throw new Failure(string.Format("element {0}: got {1}, want {2} (tolerance {3})", i, got[i], want[i], tolerance));
        }
    }

    static XvkException Throws(Action action)
    {
        try
        {
            action();
        }
        catch (XvkException e)
        {
            return e;
        }
        throw new Failure("no XvkException was thrown");
    }

    // A small deterministic generator (values in [-2, 2)).
    class Rng
    {
        ulong state;
        public Rng(ulong seed) { state = seed; }
        public float Next()
        {
            state = unchecked(state * 6364136223846793005UL + 1442695040888963407UL);
            return (float)((state >> 40) / (double)(1UL << 24) * 4.0 - 2.0);
        }
        public float[] Vec(int n)
        {
            var v = new float[n];
            for (int i = 0; i < n; ++i)
                v[i] = Next();
            return v;
        }
    }

    // --- float64 references over rows of `cols` elements --------------------------------------------

    static double[] RefSoftmax(float[] x, int cols, double scale, Func<int, int, double> mask = null)
    {
        var y = new double[x.Length];
        for (int r = 0; r < x.Length / cols; ++r)
        {
            var z = new double[cols];
            for (int c = 0; c < cols; ++c)
                z[c] = scale * x[r * cols + c] + (mask == null ? 0.0 : mask(r, c));
            double max = z.Max(), sum = 0;
            for (int c = 0; c < cols; ++c)
                sum += Math.Exp(z[c] - max);
            for (int c = 0; c < cols; ++c)
                y[r * cols + c] = Math.Exp(z[c] - max) / sum;
        }
        return y;
    }

    // (y, mean, rstd) of LayerNorm, or RMSNorm with rms.
    static double[][] RefNorm(float[] x, int cols, double[] gamma, double[] beta, double eps, bool rms)
    {
        int rows = x.Length / cols;
        var y = new double[x.Length];
        var means = new double[rows];
        var rstds = new double[rows];
        for (int r = 0; r < rows; ++r)
        {
            double mean = 0, var = 0;
            if (!rms)
            {
                for (int c = 0; c < cols; ++c)
                    mean += x[r * cols + c];
                mean /= cols;
            }
            for (int c = 0; c < cols; ++c)
                var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean);
            double rstd = 1.0 / Math.Sqrt(var / cols + eps);
            for (int c = 0; c < cols; ++c)
                y[r * cols + c] = (x[r * cols + c] - mean) * rstd * gamma[c] + beta[c];
            means[r] = mean;
            rstds[r] = rstd;
        }
        return new[] { y, means, rstds };
    }

    // (dx, dgamma, dbeta) of LayerNorm, or RMSNorm with rms.
    static double[][] RefNormBackward(float[] dy, float[] x, int cols, double[] gamma, double eps, bool rms)
    {
        int rows = x.Length / cols;
        var stats = RefNorm(x, cols, gamma, new double[cols], eps, rms);
        var dx = new double[x.Length];
        var dgamma = new double[cols];
        var dbeta = new double[cols];
        for (int r = 0; r < rows; ++r)
        {
            var xhat = new double[cols];
            var g = new double[cols];
            double meanG = 0, meanGx = 0;
            for (int c = 0; c < cols; ++c)
            {
                xhat[c] = (x[r * cols + c] - stats[1][r]) * stats[2][r];
                g[c] = dy[r * cols + c] * gamma[c];
                meanG += g[c] / cols;
                meanGx += g[c] * xhat[c] / cols;
            }
            if (rms)
                meanG = 0;
            for (int c = 0; c < cols; ++c)
            {
                dx[r * cols + c] = stats[2][r] * (g[c] - meanG - xhat[c] * meanGx);
                dgamma[c] += dy[r * cols + c] * xhat[c];
                dbeta[c] += dy[r * cols + c];
            }
        }
        return new[] { dx, dgamma, dbeta };
    }

    // BatchNorm over x seen as (n, c, s) channels-first, or (n, s, c) with last.
    static int ChannelOf(int e, int c, int s, bool last) { return last ? e % c : (e / s) % c; }

    // Per channel: (mean, biased variance, unbiased variance).
    static double[][] RefBnStats(float[] x, int c, int s, bool last)
    {
        double m = x.Length / c;
        double[] mean = new double[c], sq = new double[c];
        for (int e = 0; e < x.Length; ++e)
            mean[ChannelOf(e, c, s, last)] += x[e] / m;
        for (int e = 0; e < x.Length; ++e)
        {
            int ch = ChannelOf(e, c, s, last);
            sq[ch] += (x[e] - mean[ch]) * (x[e] - mean[ch]);
        }
        return new[] { mean, sq.Select(q => q / m).ToArray(), sq.Select(q => q / (m - 1)).ToArray() };
    }

    // y = activation((x - mean) / sqrt(var + eps) * gamma + beta + z)
    static double[] RefBnForward(float[] x, int c, int s, bool last, double[] mean, double[] var, double[] gamma,
                                 double[] beta, double eps, float[] z, bool relu)
    {
        var y = new double[x.Length];
        for (int e = 0; e < x.Length; ++e)
        {
            int ch = ChannelOf(e, c, s, last);
            double v = (x[e] - mean[ch]) / Math.Sqrt(var[ch] + eps) * gamma[ch] + beta[ch] + (z == null ? 0 : z[e]);
            y[e] = relu && v < 0 ? 0 : v;
        }
        return y;
    }

    // (dx, dgamma, dbeta) of training BatchNorm, channels-first; positive: where y > 0 under ReLU.
    static double[][] RefBnBackward(float[] dy, float[] x, int c, int s, double[] gamma, double eps, bool[] positive)
    {
        var stats = RefBnStats(x, c, s, false);
        double m = x.Length / c;
        double[] g = new double[x.Length], xhat = new double[x.Length], dx = new double[x.Length];
        double[] dgamma = new double[c], dbeta = new double[c];
        for (int e = 0; e < x.Length; ++e)
        {
            int ch = (e / s) % c;
            g[e] = positive == null || positive[e] ? dy[e] : 0;
            xhat[e] = (x[e] - stats[0][ch]) / Math.Sqrt(stats[1][ch] + eps);
            dbeta[ch] += g[e];
            dgamma[ch] += g[e] * xhat[e];
        }
        for (int e = 0; e < x.Length; ++e)
        {
            int ch = (e / s) % c;
            dx[e] = gamma[ch] / Math.Sqrt(stats[1][ch] + eps) * (g[e] - dbeta[ch] / m - xhat[e] * dgamma[ch] / m);
        }
        return new[] { dx, dgamma, dbeta };
    }

    // Bit e of a ReLU mask: bit e % 32 of word e / 32.
    static bool MaskBit(uint[] mask, int e) { return ((mask[e / 32] >> (e % 32)) & 1) == 1; }

    static double[] D(float[] v) { return v.Select(f => (double)f).ToArray(); }
    static double[] Fill(int n, double v) { return Enumerable.Repeat(v, n).ToArray(); }
    static float[] NaNs(int n) { return Enumerable.Repeat(float.NaN, n).ToArray(); }

    // half precision bit patterns (round to nearest even; normal and subnormal values)
    static ushort ToHalf(float v)
    {
        uint bits = BitConverter.ToUInt32(BitConverter.GetBytes(v), 0);
        uint sign = (bits >> 16) & 0x8000;
        int exp = (int)((bits >> 23) & 0xff);
        uint mant = bits & 0x7fffff;
        if (exp == 0xff)
            return (ushort)(sign | 0x7c00 | (mant != 0 ? 0x200u : 0u));
        int e = exp - 127 + 15;
        if (e >= 0x1f)
            return (ushort)(sign | 0x7c00);
        int shift = 13;
        if (e <= 0)
        {
            if (e < -10)
                return (ushort)sign;
            mant |= 0x800000;
            shift = 14 - e;
        }
        uint half = mant >> shift, rest = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rest > halfway || (rest == halfway && (half & 1) == 1))
            half += 1; // may carry into the exponent, which is right
        return (ushort)(e <= 0 ? sign | half : sign | (((uint)e << 10) + half));
    }

    static float FromHalf(ushort h)
    {
        double sign = (h & 0x8000) != 0 ? -1 : 1;
        int exp = (h >> 10) & 0x1f;
        int mant = h & 0x3ff;
        if (exp == 0)
            return (float)(sign * mant * Math.Pow(2, -24));
        if (exp == 0x1f)
            return mant == 0 ? (float)(sign * double.PositiveInfinity) : float.NaN;
        return (float)(sign * (1 + mant / 1024.0) * Math.Pow(2, exp - 15));
    }

    // --- library, errors, backends, contexts -------------------------------------------------------

    static void VersionAndNames()
    {
        Assert(Library.Version.Major == 0 && Library.Version >= new Version(0, 1, 0), "version " + Library.Version);
        Assert(Library.StatusString(Status.InvalidArgument) == "XVK_ERROR_INVALID_ARGUMENT", "status string");
        Assert(Library.BackendName(Backend.Cuda) == "cuda" && Library.BackendName(Backend.Hip) == "hip", "backend names");
    }

    static void BackendQuery()
    {
        var cpu = Library.QueryBackend(Backend.Cpu);
        Assert(cpu.Available && cpu.DeviceCount == 1 && !string.IsNullOrEmpty(cpu.Reason), "cpu available");
        foreach (var b in new[] { Backend.Cuda, Backend.Hip })
            Assert(!string.IsNullOrEmpty(Library.QueryBackend(b).Reason), "a reason for " + b); // either way
    }

    static void ContextLifecycle()
    {
        var ctx = new Context(Backend.Cpu, 0);
        Assert(ctx.Backend == Backend.Cpu && ctx.DeviceId == 0, "device");
        ctx.SetStream(IntPtr.Zero);
        ctx.Synchronize();
        var e = Throws(() => ctx.SetStream(new IntPtr(0x1000))); // the CPU backend takes the NULL stream only
        Assert(e.Status == Status.InvalidArgument && e.Message.StartsWith("xvk_context_set_stream"), e.Message);
        ctx.Dispose();
        Assert(ctx.Handle.IsClosed, "closed after Dispose");
        ctx.Dispose();
    }

    static void UnavailableBackend()
    {
        if (Library.QueryBackend(Backend.Hip).Available)
            return; // a HIP device is present
        var e = Throws(() => new Context(Backend.Hip));
        Assert(e.Status == Status.BackendUnavailable && e.Message.StartsWith("xvk_context_create"), e.Message);
    }

    static void DeviceMemory()
    {
        using (var ctx = new Context())
        {
            float[] x = new Rng(3).Vec(16), y = new float[16];
            IntPtr px = ctx.MemoryAlloc(64), py = ctx.MemoryAlloc(64);
            Assert(px.ToInt64() % 256 == 0, "aligned");
            GCHandle pinX = GCHandle.Alloc(x, GCHandleType.Pinned), pinY = GCHandle.Alloc(y, GCHandleType.Pinned);
            ctx.MemoryCopy(px, pinX.AddrOfPinnedObject(), 64);
            using (Tensor dx = Tensor.FromPointer(px, DType.Float32, ctx, new long[] { 2, 8 }),
                          dy = Tensor.FromPointer(py, DType.Float32, ctx, new long[] { 2, 8 }))
                ctx.SoftmaxForward(dx, dy);
            ctx.MemoryCopy(pinY.AddrOfPinnedObject(), py, 64);
            ctx.Synchronize();
            pinX.Free();
            pinY.Free();
            ctx.MemoryFree(px);
            ctx.MemoryFree(py);
            AssertClose(y, RefSoftmax(x, 8, 1), 1e-5, 1e-6);
        }
    }

    // --- the example's values -------------------------------------------------------------------------

    static void ExampleValues()
    {
        float[] x = { 1, 2, 3, 4, -1, 0, 1, 6 }, y = new float[8], p = new float[8];
        using (var ctx = new Context())
        using (Tensor tx = Tensor.FromArray(x, 2, 4), ty = Tensor.FromArray(y, 2, 4), tp = Tensor.FromArray(p, 2, 4))
        {
            ctx.LayerNormForward(tx, null, null, ty);
            ctx.SoftmaxForward(tx, tp);
        }
        Assert(Math.Abs(y[0] + 1.5 / Math.Sqrt(1.25 + 1e-5)) < 1e-5, "layer_norm y[0] = " + y[0]); // -1.3416
        double e = Math.E;
        Assert(Math.Abs(p[3] - 1 / (1 + 1 / e + 1 / (e * e) + 1 / (e * e * e))) < 1e-6, "softmax p[3] = " + p[3]); // 0.6439
    }

    // --- float32 against the references ------------------------------------------------------------------

    static void SoftmaxForwardBackward()
    {
        var rng = new Rng(1);
        float[] x = rng.Vec(28), dy = rng.Vec(28), y = NaNs(28), dx = NaNs(28);
        var options = new SoftmaxOptions { Scale = 0.5f };
        using (var ctx = new Context())
        using (Tensor tx = Tensor.FromArray(x, 4, 7), ty = Tensor.FromArray(y, 4, 7), tdy = Tensor.FromArray(dy, 4, 7),
                      tdx = Tensor.FromArray(dx, 4, 7))
        {
            ctx.SoftmaxForward(tx, ty, options);
            ctx.SoftmaxBackward(ty, tdy, tdx, options);
        }
        var r = RefSoftmax(x, 7, 0.5);
        AssertClose(y, r, 1e-5, 1e-6);
        var want = new double[28];
        for (int row = 0; row < 4; ++row)
        {
            double dot = 0;
            for (int c = 0; c < 7; ++c)
                dot += r[row * 7 + c] * dy[row * 7 + c];
            for (int c = 0; c < 7; ++c)
                want[row * 7 + c] = 0.5 * r[row * 7 + c] * (dy[row * 7 + c] - dot);
        }
        AssertClose(dx, want, 1e-4, 1e-6);
    }

    static void LogSoftmaxForwardBackward()
    {
        var rng = new Rng(2);
        float[] x = rng.Vec(27), dy = rng.Vec(27), y = new float[27], dx = new float[27];
        using (var ctx = new Context())
        using (Tensor tx = Tensor.FromArray(x, 3, 9), ty = Tensor.FromArray(y, 3, 9), tdy = Tensor.FromArray(dy, 3, 9),
                      tdx = Tensor.FromArray(dx, 3, 9))
        {
            ctx.LogSoftmaxForward(tx, ty);
            ctx.LogSoftmaxBackward(ty, tdy, tdx);
        }
        var r = RefSoftmax(x, 9, 1);
        AssertClose(y, r.Select(v => Math.Log(v)).ToArray(), 1e-5, 1e-5);
        var want = new double[27];
        for (int row = 0; row < 3; ++row)
        {
            double sum = 0;
            for (int c = 0; c < 9; ++c)
                sum += dy[row * 9 + c];
            for (int c = 0; c < 9; ++c)
                want[row * 9 + c] = dy[row * 9 + c] - r[row * 9 + c] * sum;
        }
        AssertClose(dx, want, 1e-4, 1e-5);
    }

    static void SoftmaxCausalAndMask()
    {
        var rng = new Rng(4);
        float[] x = rng.Vec(30), y = new float[30], mask = rng.Vec(15);
        mask[5 + 2] = float.NegativeInfinity;
        using (var ctx = new Context())
        using (Tensor tx = Tensor.FromArray(x, 2, 3, 5), ty = Tensor.FromArray(y, 2, 3, 5), tm = Tensor.FromArray(mask, 3, 5))
        {
            // rows r of x are row r % 3 of each 3 x 5 matrix
            ctx.SoftmaxForward(tx, ty, new SoftmaxOptions { Causal = Causal.TopLeft });
            AssertClose(y, RefSoftmax(x, 5, 1, (r, c) => c <= r % 3 ? 0 : double.NegativeInfinity), 1e-5, 1e-6);
            ctx.SoftmaxForward(tx, ty, new SoftmaxOptions { Causal = Causal.BottomRight });
            AssertClose(y, RefSoftmax(x, 5, 1, (r, c) => c <= r % 3 + 2 ? 0 : double.NegativeInfinity), 1e-5, 1e-6);
            ctx.SoftmaxForward(tx, ty, new SoftmaxOptions { Scale = 2, Mask = tm }); // broadcast over the leading dimension
            AssertClose(y, RefSoftmax(x, 5, 2, (r, c) => mask[(r % 3) * 5 + c]), 1e-5, 1e-6);
            Assert(y[7] == 0 && y[15 + 7] == 0, "masked out");
        }
    }

    static void LayerNormForwardBackward()
    {
        var rng = new Rng(5);
        float[] x = rng.Vec(40), gamma = rng.Vec(8), beta = rng.Vec(8), dy = rng.Vec(40);
        float[] y = new float[40], mean = new float[5], rstd = new float[5], dx = new float[40], dgamma = new float[8], dbeta = new float[8];
        using (var ctx = new Context())
        using (Tensor tx = Tensor.FromArray(x, 5, 8), tg = Tensor.FromArray(gamma, 8), tb = Tensor.FromArray(beta, 8),
                      ty = Tensor.FromArray(y, 5, 8), tm = Tensor.FromArray(mean, 5), ts = Tensor.FromArray(rstd, 5),
                      tdy = Tensor.FromArray(dy, 5, 8), tdx = Tensor.FromArray(dx, 5, 8), tdg = Tensor.FromArray(dgamma, 8),
                      tdb = Tensor.FromArray(dbeta, 8))
        {
            ctx.LayerNormForward(tx, tg, tb, ty, tm, ts, new LayerNormOptions { Epsilon = 1e-3f });
            ctx.LayerNormBackward(tdy, tx, tg, tm, ts, tdx, tdg, tdb);
        }
        var r = RefNorm(x, 8, D(gamma), D(beta), 1e-3, false);
        AssertClose(y, r[0], 1e-5, 1e-5);
        AssertClose(mean, r[1], 1e-5, 1e-6);
        AssertClose(rstd, r[2], 1e-5, 0);
        var g = RefNormBackward(dy, x, 8, D(gamma), 1e-3, false);
        AssertClose(dx, g[0], 1e-4, 1e-5);
        AssertClose(dgamma, g[1], 1e-4, 1e-5);
        AssertClose(dbeta, g[2], 1e-4, 1e-5);
    }

    static void LayerNormOptions()
    {
        // normalized over the last two dimensions (3 x 4), zero-centered gamma, fused residual
        var rng = new Rng(6);
        float[] x = rng.Vec(24), res = rng.Vec(24), gamma = rng.Vec(12), y = new float[24], h = new float[24], mean = new float[2];
        using (var ctx = new Context())
        using (Tensor tx = Tensor.FromArray(x, 2, 3, 4), tr = Tensor.FromArray(res, 2, 3, 4), tg = Tensor.FromArray(gamma, 3, 4),
                      ty = Tensor.FromArray(y, 2, 3, 4), th = Tensor.FromArray(h, 2, 3, 4), tm = Tensor.FromArray(mean, 2))
        {
            var options = new LayerNormOptions { NormalizedNdim = 2, ZeroCenteredGamma = true, Residual = tr, ResidualOut = th };
            ctx.LayerNormForward(tx, tg, null, ty, tm, null, options);
        }
        float[] sum = x.Zip(res, (a, b) => a + b).ToArray();
        var r = RefNorm(sum, 12, gamma.Select(v => 1.0 + v).ToArray(), new double[12], 1e-5, false);
        AssertClose(y, r[0], 1e-5, 1e-5);
        AssertClose(mean, r[1], 1e-5, 1e-6);
        AssertClose(h, D(sum), 1e-6, 0);
    }

    static void RmsNormForwardBackward()
    {
        var rng = new Rng(7);
        float[] x = rng.Vec(24), gamma = rng.Vec(6), dy = rng.Vec(24), y = new float[24], rstd = new float[4];
        float[] dx = new float[24], dgamma = new float[6];
        using (var ctx = new Context())
        using (Tensor tx = Tensor.FromArray(x, 4, 6), tg = Tensor.FromArray(gamma, 6), ty = Tensor.FromArray(y, 4, 6),
                      ts = Tensor.FromArray(rstd, 4), tdy = Tensor.FromArray(dy, 4, 6), tdx = Tensor.FromArray(dx, 4, 6),
                      tdg = Tensor.FromArray(dgamma, 6))
        {
            ctx.RmsNormForward(tx, tg, ty, ts);
            ctx.RmsNormBackward(tdy, tx, tg, ts, tdx, tdg);
        }
        var r = RefNorm(x, 6, D(gamma), new double[6], 1e-6, true);
        AssertClose(y, r[0], 1e-5, 1e-5);
        AssertClose(rstd, r[2], 1e-5, 0);
        var g = RefNormBackward(dy, x, 6, D(gamma), 1e-6, true);
        AssertClose(dx, g[0], 1e-4, 1e-5);
        AssertClose(dgamma, g[1], 1e-4, 1e-5);
    }

    static void RmsNormResidual()
    {
        var rng = new Rng(8);
        float[] x = rng.Vec(15), res = rng.Vec(15), y = new float[15], h = new float[15];
        using (var ctx = new Context())
        using (Tensor tx = Tensor.FromArray(x, 3, 5), tr = Tensor.FromArray(res, 3, 5), ty = Tensor.FromArray(y, 3, 5),
                      th = Tensor.FromArray(h, 3, 5))
            ctx.RmsNormForward(tx, null, ty, null, new RmsNormOptions { Epsilon = 1e-4f, Residual = tr, ResidualOut = th });
        float[] sum = x.Zip(res, (a, b) => a + b).ToArray();
        AssertClose(y, RefNorm(sum, 5, Fill(5, 1), new double[5], 1e-4, true)[0], 1e-5, 1e-5);
        AssertClose(h, D(sum), 1e-6, 0);
    }

    // --- BatchNorm -------------------------------------------------------------------------------------------

    static void BatchNormTrainingReluMaskThenBackward()
    {
        var rng = new Rng(11);
        float[] x = rng.Vec(60), gamma = rng.Vec(3), beta = rng.Vec(3), dy = rng.Vec(60); // N, C, spatial = 4, 3, 5
        long words = Library.BatchNormMaskWords(4, 3, 5);
        Assert(words == 2, "mask words " + words);
        float[] y = NaNs(60), runningMean = new float[3], runningVar = { 1, 1, 1 }, savedMean = new float[3], savedRstd = new float[3];
        float[] dx = new float[60], dz = NaNs(60), dgamma = new float[3], dbeta = new float[3], dx2 = new float[60];
        uint[] mask = Enumerable.Repeat(0xdeadbeefu, (int)words).ToArray();
        var options = new BatchNormOptions { Momentum = 0.25f, Activation = Activation.Relu };
        using (var ctx = new Context())
        using (Tensor tx = Tensor.FromArray(x, 4, 3, 5), tg = Tensor.FromArray(gamma, 3), tb = Tensor.FromArray(beta, 3),
                      ty = Tensor.FromArray(y, 4, 3, 5), tm = Tensor.FromArray(mask, words), trm = Tensor.FromArray(runningMean, 3),
                      trv = Tensor.FromArray(runningVar, 3), tsm = Tensor.FromArray(savedMean, 3), tss = Tensor.FromArray(savedRstd, 3),
                      tdy = Tensor.FromArray(dy, 4, 3, 5), tdx = Tensor.FromArray(dx, 4, 3, 5), tdz = Tensor.FromArray(dz, 4, 3, 5),
                      tdg = Tensor.FromArray(dgamma, 3), tdb = Tensor.FromArray(dbeta, 3), tdx2 = Tensor.FromArray(dx2, 4, 3, 5))
        {
            ctx.BatchNormForwardTraining(tx, null, tg, tb, ty, tm, trm, trv, tsm, tss, options);
            ctx.BatchNormBackward(tdy, tx, tm, null, tg, tsm, tss, tdx, tdz, tdg, tdb, options);
            ctx.BatchNormBackward(tdy, tx, null, ty, tg, tsm, tss, tdx2, options: options); // from y instead of the mask
        }
        var stats = RefBnStats(x, 3, 5, false);
        AssertClose(y, RefBnForward(x, 3, 5, false, stats[0], stats[1], D(gamma), D(beta), 1e-5, null, true), 1e-5, 1e-5);
        AssertClose(savedMean, stats[0], 1e-5, 1e-6);
        AssertClose(savedRstd, stats[1].Select(v => 1 / Math.Sqrt(v + 1e-5)).ToArray(), 1e-5, 0);
        AssertClose(runningMean, stats[0].Select(v => 0.25 * v).ToArray(), 1e-5, 1e-6);
        AssertClose(runningVar, stats[2].Select(v => 0.75 + 0.25 * v).ToArray(), 1e-5, 0);
        // bit e of the mask is y[e] > 0; the 4 bits past the 60 elements are 0
        bool[] positive = y.Select(v => v > 0).ToArray();
        for (int e = 0; e < 64; ++e)
            Assert(MaskBit(mask, e) == (e < 60 && positive[e]), "mask bit " + e);
        Assert(positive.Any(p => p) && !positive.All(p => p), "some positive, some not");
        for (int e = 0; e < 60; ++e)
            Assert(dz[e] == (positive[e] ? dy[e] : 0), "dz is dy masked, element " + e);
        var r = RefBnBackward(dy, x, 3, 5, D(gamma), 1e-5, positive);
        AssertClose(dx, r[0], 1e-4, 1e-5);
        AssertClose(dgamma, r[1], 1e-4, 1e-5);
        AssertClose(dbeta, r[2], 1e-4, 1e-5);
        Assert(dx.SequenceEqual(dx2), "the same dx from the mask and from y");
    }

    static void BatchNormChannelsLast()
    {
        // (N, H, W, C) = (3, 2, 4, 5) with ChannelAxis -1; without activation each channel of y has
        // mean beta and (biased) standard deviation |gamma|
        var rng = new Rng(12);
        float[] x = rng.Vec(120), gamma = rng.Vec(5).Select(g => g + 3).ToArray(), beta = rng.Vec(5), y = new float[120];
        using (var ctx = new Context())
        using (Tensor tx = Tensor.FromArray(x, 3, 2, 4, 5), tg = Tensor.FromArray(gamma, 5), tb = Tensor.FromArray(beta, 5),
                      ty = Tensor.FromArray(y, 3, 2, 4, 5))
            ctx.BatchNormForwardTraining(tx, null, tg, tb, ty, options: new BatchNormOptions { ChannelAxis = -1 });
        var stats = RefBnStats(y, 5, 24, true);
        AssertClose(beta, stats[0], 0, 1e-5);
        AssertClose(gamma, stats[1].Select(Math.Sqrt).ToArray(), 1e-4, 0);
        var xs = RefBnStats(x, 5, 24, true);
        AssertClose(y, RefBnForward(x, 5, 24, true, xs[0], xs[1], D(gamma), D(beta), 1e-5, null, false), 1e-5, 1e-5);
    }

    static void BatchNormInferenceAddRelu()
    {
        var rng = new Rng(13);
        float[] x = rng.Vec(24), z = rng.Vec(24), gamma = rng.Vec(3), beta = rng.Vec(3), runningMean = rng.Vec(3);
        float[] runningVar = rng.Vec(3).Select(v => Math.Abs(v) + 0.5f).ToArray(), y = NaNs(24);
        uint[] mask = new uint[Library.BatchNormMaskWords(2, 3, 4)];
        using (var ctx = new Context())
        using (Tensor tx = Tensor.FromArray(x, 2, 3, 4), tz = Tensor.FromArray(z, 2, 3, 4), tg = Tensor.FromArray(gamma, 3),
                      tb = Tensor.FromArray(beta, 3), trm = Tensor.FromArray(runningMean, 3), trv = Tensor.FromArray(runningVar, 3),
                      ty = Tensor.FromArray(y, 2, 3, 4), tm = Tensor.FromArray(mask, mask.Length))
            ctx.BatchNormForwardInference(tx, tz, tg, tb, trm, trv, ty, tm,
                                          new BatchNormOptions { Epsilon = 1e-3f, Activation = Activation.Relu });
        AssertClose(y, RefBnForward(x, 3, 4, false, D(runningMean), D(runningVar), D(gamma), D(beta), 1e-3, z, true), 1e-5, 1e-5);
        for (int e = 0; e < 24; ++e)
            Assert(MaskBit(mask, e) == y[e] > 0, "mask bit " + e);
    }

    static void BatchNormMaskWords()
    {
        Assert(Library.BatchNormMaskWords(4, 3, 5) == 2, "4 x 3 x 5");
        Assert(Library.BatchNormMaskWords(2, 16) == 1 && Library.BatchNormMaskWords(2, 17) == 2, "2 x 16, 2 x 17");
        Assert(Library.BatchNormMaskWords(8, 3, 0) == 0, "empty");
        var e = Throws(() => Library.BatchNormMaskWords(2, -1));
        Assert(e.Status == Status.InvalidArgument && e.Message.StartsWith("xvk_batch_norm_mask_words: x has a negative size"),
               e.Message);
    }

    static void BatchNormErrors()
    {
        float[] x = new Rng(14).Vec(12), gamma = { 1, 1 }, y = Enumerable.Repeat(7f, 12).ToArray(), s = { 1, 1, 1 };
        uint[] mask = { 7 }, big = new uint[3];
        var relu = new BatchNormOptions { Activation = Activation.Relu };
        using (var ctx = new Context())
        using (Tensor tx = Tensor.FromArray(x, 4, 3), tg = Tensor.FromArray(gamma, 2), ty = Tensor.FromArray(y, 4, 3),
                      tm = Tensor.FromArray(mask, 1), tbig = Tensor.FromArray(big, 3), ts = Tensor.FromArray(s, 3))
        {
            var e = Throws(() => ctx.BatchNormForwardTraining(tx, null, tg, null, ty, tm, options: relu));
            Assert(e.Status == Status.InvalidArgument, "status " + e.Status);
            Assert(e.Message == "xvk_batch_norm_forward_training: gamma has 2 elements, expected 3 (the number of channels)",
                   e.Message);
            Assert(y.All(v => v == 7f) && mask[0] == 7, "nothing written");
            e = Throws(() => ctx.BatchNormForwardTraining(tx, null, null, null, ty, tbig, options: relu));
            Assert(e.Message.Contains("mask has 3 elements, expected 1"), e.Message);
            e = Throws(() => ctx.BatchNormForwardTraining(tx, null, null, null, ty, tm));
            Assert(e.Message.Contains("mask is given but options->activation"), e.Message);
            e = Throws(() => ctx.BatchNormBackward(tx, tx, null, null, null, ts, ts, ty, options: relu));
            Assert(e.Message.Contains("mask and y are both NULL"), e.Message);
        }
    }

    // --- errors -----------------------------------------------------------------------------------------------

    static void WrongGammaLength()
    {
        float[] x = new Rng(9).Vec(8), gamma = { 1, 1, 1 }, y = Enumerable.Repeat(7f, 8).ToArray();
        using (var ctx = new Context())
        using (Tensor tx = Tensor.FromArray(x, 2, 4), tg = Tensor.FromArray(gamma, 3), ty = Tensor.FromArray(y, 2, 4))
        {
            var e = Throws(() => ctx.LayerNormForward(tx, tg, null, ty));
            Assert(e.Status == Status.InvalidArgument, "status " + e.Status);
            Assert(e.Message == "xvk_layer_norm_forward: gamma has 3 elements, expected 4 (the normalized size)", e.Message);
            Assert(Library.LastErrorMessage == e.Message, "last error message");
        }
        Assert(y.All(v => v == 7f), "nothing written");
    }

    static void OtherErrors()
    {
        float[] x = Fill(8, 0.5).Select(v => (float)v).ToArray(), y = new float[8];
        ushort[] h = new ushort[8];
        using (var ctx = new Context())
        using (Tensor tx = Tensor.FromArray(x, 2, 4), ty = Tensor.FromArray(y, 2, 4), th = Tensor.FromBits(h, DType.Float16, 2, 4))
        {
            var e = Throws(() => ctx.LayerNormForward(tx, null, null, ty, null, null, new LayerNormOptions { Epsilon = 0 }));
            Assert(e.Message.Contains("options->epsilon"), e.Message);
            e = Throws(() => ctx.SoftmaxForward(th, ty)); // dtypes must match
            Assert(e.Message.Contains("dtype"), e.Message);
        }
        bool threw = false;
        try
        {
            Tensor.FromArray(x, 3, 4); // the binding's own check
        }
        catch (ArgumentException)
        {
            threw = true;
        }
        Assert(threw, "shape that does not match the array");
    }

    // --- float16 ------------------------------------------------------------------------------------------------

    static void Float16()
    {
        var rng = new Rng(10);
        ushort[] x = rng.Vec(48).Select(ToHalf).ToArray(), y = new ushort[48], p = new ushort[48];
        float[] xr = x.Select(FromHalf).ToArray(), gamma = rng.Vec(16), beta = rng.Vec(16); // float32 parameters
        using (var ctx = new Context())
        using (Tensor tx = Tensor.FromBits(x, DType.Float16, 3, 16), ty = Tensor.FromBits(y, DType.Float16, 3, 16),
                      tp = Tensor.FromBits(p, DType.Float16, 3, 16), tg = Tensor.FromArray(gamma, 16), tb = Tensor.FromArray(beta, 16))
        {
            ctx.LayerNormForward(tx, tg, tb, ty);
            ctx.SoftmaxForward(tx, tp);
        }
        // fp16 output: 11 significant bits, a few units in the last place for values of order 1
        AssertClose(y.Select(FromHalf).ToArray(), RefNorm(xr, 16, D(gamma), D(beta), 1e-5, false)[0], 2e-3, 4e-3);
        AssertClose(p.Select(FromHalf).ToArray(), RefSoftmax(xr, 16, 1), 2e-3, 1e-4);
    }

    static void HalfConversions()
    {
        var cases = new[] { Tuple.Create(1.0f, (ushort)0x3c00), Tuple.Create(-2.0f, (ushort)0xc000),
                            Tuple.Create(65504.0f, (ushort)0x7bff), Tuple.Create(6.1035156e-5f, (ushort)0x0400),
                            Tuple.Create(5.9604645e-8f, (ushort)0x0001) };
        foreach (var c in cases)
            Assert(ToHalf(c.Item1) == c.Item2 && FromHalf(c.Item2) == c.Item1, "half " + c.Item1);
    }

    static int Main()
    {
        var tests = new List<KeyValuePair<string, Action>>
        {
            new KeyValuePair<string, Action>("version_and_names", VersionAndNames),
            new KeyValuePair<string, Action>("backend_query", BackendQuery),
            new KeyValuePair<string, Action>("context_lifecycle", ContextLifecycle),
            new KeyValuePair<string, Action>("unavailable_backend", UnavailableBackend),
            new KeyValuePair<string, Action>("device_memory", DeviceMemory),
            new KeyValuePair<string, Action>("example_values", ExampleValues),
            new KeyValuePair<string, Action>("softmax_forward_backward", SoftmaxForwardBackward),
            new KeyValuePair<string, Action>("log_softmax_forward_backward", LogSoftmaxForwardBackward),
            new KeyValuePair<string, Action>("softmax_causal_and_mask", SoftmaxCausalAndMask),
            new KeyValuePair<string, Action>("layer_norm_forward_backward", LayerNormForwardBackward),
            new KeyValuePair<string, Action>("layer_norm_options", LayerNormOptions),
            new KeyValuePair<string, Action>("rms_norm_forward_backward", RmsNormForwardBackward),
            new KeyValuePair<string, Action>("rms_norm_residual", RmsNormResidual),
            new KeyValuePair<string, Action>("batch_norm_training_relu_mask_then_backward", BatchNormTrainingReluMaskThenBackward),
            new KeyValuePair<string, Action>("batch_norm_channels_last", BatchNormChannelsLast),
            new KeyValuePair<string, Action>("batch_norm_inference_add_relu", BatchNormInferenceAddRelu),
            new KeyValuePair<string, Action>("batch_norm_mask_words", BatchNormMaskWords),
            new KeyValuePair<string, Action>("batch_norm_errors", BatchNormErrors),
            new KeyValuePair<string, Action>("wrong_gamma_length", WrongGammaLength),
            new KeyValuePair<string, Action>("other_errors", OtherErrors),
            new KeyValuePair<string, Action>("float16", Float16),
            new KeyValuePair<string, Action>("half_conversions", HalfConversions),
        };
        int failed = 0;
        foreach (var t in tests)
        {
            try
            {
                t.Value();
                Console.WriteLine("PASS " + t.Key);
            }
            catch (Exception e)
            {
                ++failed;
                Console.WriteLine("FAIL " + t.Key + ": " + e);
            }
        }
        Console.WriteLine("{0} passed, {1} failed", tests.Count - failed, failed);
        return failed == 0 ? 0 : 1;
    }
}
