// LayerNorm and softmax on the CPU backend from C#; checks one value of each.
using System;
using Xvk;

static class Example
{
    static int Main()
    {
        float[] x = { 1, 2, 3, 4, -1, 0, 1, 6 }, y = new float[8], p = new float[8];
        using (var ctx = new Context(Backend.Cpu))
        using (Tensor tx = Tensor.FromArray(x, 2, 4), ty = Tensor.FromArray(y, 2, 4), tp = Tensor.FromArray(p, 2, 4))
        {
            ctx.LayerNormForward(tx, null, null, ty, options: new LayerNormOptions { Epsilon = 1e-5f });
            ctx.SoftmaxForward(tx, tp);
        }
        Console.WriteLine("xvk " + Library.Version);
        Console.WriteLine("layer_norm: " + string.Join(" ", y));
        Console.WriteLine("softmax:    " + string.Join(" ", p));

        // Row 0 has mean 2.5 and variance 1.25; its softmax ends in 1 / (1 + e^-1 + e^-2 + e^-3).
        bool ok = Math.Abs(y[0] + 1.5 / Math.Sqrt(1.25 + 1e-5)) < 1e-5 && Math.Abs(p[3] - 0.6439143) < 1e-6;
        Console.WriteLine("check: " + (ok ? "ok" : "WRONG"));
        return ok ? 0 : 1;
    }
}
