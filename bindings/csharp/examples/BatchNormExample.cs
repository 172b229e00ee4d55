// BatchNorm + ReLU on the CPU backend from C#: the training forward writes the ReLU mask, the
// backward reads it. Checks the values shown in the README.
using System;
using System.Linq;
using Xvk;

static class BatchNormExample
{
    static int Main()
    {
        float[] x = { 1, 2, 3, -4, 5, 0, -1, 6 }, y = new float[8], dy = { 1, 1, 1, 1, 1, 1, 1, 1 }, dx = new float[8];
        float[] mean = new float[2], rstd = new float[2], dbeta = new float[2];
        uint[] mask = new uint[Library.BatchNormMaskWords(4, 2)]; // N = 4 rows, C = 2 channels: 1 word
        var options = new BatchNormOptions { Activation = Activation.Relu };
        using (var ctx = new Context(Backend.Cpu))
        using (Tensor tx = Tensor.FromArray(x, 4, 2), ty = Tensor.FromArray(y, 4, 2), tm = Tensor.FromArray(mask, mask.Length),
                      tmean = Tensor.FromArray(mean, 2), trstd = Tensor.FromArray(rstd, 2), tdy = Tensor.FromArray(dy, 4, 2),
                      tdx = Tensor.FromArray(dx, 4, 2), tdbeta = Tensor.FromArray(dbeta, 2))
        {
            ctx.BatchNormForwardTraining(tx, null, null, null, ty, tm, savedMean: tmean, savedRstd: trstd, options: options);
            ctx.BatchNormBackward(tdy, tx, tm, null, null, tmean, trstd, tdx, dbeta: tdbeta, options: options);
        }
        Console.WriteLine(y[2] + " " + mask[0] + " " + string.Join(" ", dbeta)); // 0.4472131 150 2 2
        Console.WriteLine("y: " + string.Join(" ", y));

        // Channel 0 is [1, 3, 5, -1]: mean 2, variance 5. Bit i of the mask is y[i] > 0: bits 1, 2,
        // 4 and 7, so 150. dbeta counts the positive outputs of each channel (dy = 1).
        bool ok = Math.Abs(y[2] - 1 / Math.Sqrt(5 + 1e-5)) < 1e-6 && mask.SequenceEqual(new uint[] { 150 }) &&
                  dbeta.SequenceEqual(new float[] { 2, 2 });
        Console.WriteLine("check: " + (ok ? "ok" : "WRONG"));
        return ok ? 0 : 1;
    }
}
