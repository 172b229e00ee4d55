# LayerNorm and softmax on the CPU backend from Julia; checks one value of each.
# UNTESTED: no Julia was available where it was written.
using Xvk

# Columns are xvk's rows: this is xvk's [[1, 2, 3, 4], [-1, 0, 1, 6]].
x = Float32[1 -1; 2 0; 3 1; 4 6]
ctx = Context(Xvk.CPU)
y = layer_norm_forward!(ctx, similar(x), x; epsilon = 1.0f-5)  # normalizes each column
p = softmax_forward!(ctx, similar(x), x)
close(ctx)
println("xvk ", Xvk.version())
println("layer_norm: ", y)
println("softmax:    ", p)

# Column 1 has mean 2.5 and variance 1.25; its softmax ends in 1 / (1 + e^-1 + e^-2 + e^-3).
ok = abs(y[1, 1] + 1.5 / sqrt(1.25 + 1e-5)) < 1e-5 && abs(p[4, 1] - 0.6439143) < 1e-6
println("check: ", ok ? "ok" : "WRONG")
exit(ok ? 0 : 1)
