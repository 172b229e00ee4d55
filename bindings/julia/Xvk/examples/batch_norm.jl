# BatchNorm + ReLU on the CPU backend from Julia: the training forward writes the ReLU mask, the
# backward reads it. Checks the values shown in the README.
# UNTESTED: no Julia was available where it was written.
using Xvk

x = Float32[1 3 5 -1; 2 -4 0 6]  # 2 channels × 4 samples: xvk's (N, C) = (4, 2)
relu = Xvk.ACTIVATION_RELU
ctx = Context(Xvk.CPU)
mask, mean, rstd, dbeta = zeros(UInt32, batch_norm_mask_words(x)), zeros(Float32, 2), zeros(Float32, 2), zeros(Float32, 2)
y = batch_norm_forward_training!(ctx, similar(x), x; mask = mask, saved_mean = mean, saved_rstd = rstd, activation = relu)
batch_norm_backward!(ctx, similar(x), ones(Float32, 2, 4), x, mean, rstd; mask = mask, dbeta = dbeta, activation = relu)
close(ctx)
println(y[1, 2], " ", Int(mask[1]), " ", dbeta)  # 0.4472 150 Float32[2.0, 2.0]
println("y: ", y)

# Channel 1 is [1, 3, 5, -1]: mean 2, variance 5. Bit i of the mask is y[i + 1] > 0: bits 1, 2,
# 4 and 7, so 150. dbeta counts the positive outputs of each channel (dy = 1).
ok = abs(y[1, 2] - 1 / sqrt(5 + 1e-5)) < 1e-6 && mask == UInt32[150] && dbeta == Float32[2, 2]
println("check: ", ok ? "ok" : "WRONG")
exit(ok ? 0 : 1)
