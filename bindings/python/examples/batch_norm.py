"""BatchNorm + ReLU on the CPU backend from Python: the training forward writes the ReLU mask,
the backward reads it. Checks the values shown in the README."""
import sys

import numpy as np

import xvk

x = np.array([[1, 2], [3, -4], [5, 0], [-1, 6]], dtype=np.float32)  # N = 4 rows, C = 2 channels
relu = xvk.Activation.RELU
with xvk.Context("cpu") as ctx:
    f = ctx.batch_norm_forward_training(x, mask=True, saved_mean=True, saved_rstd=True, activation=relu)
    g = ctx.batch_norm_backward(np.ones_like(x), x, f.saved_mean, f.saved_rstd, mask=f.mask, dbeta=True,
                                activation=relu)
print(f.y[1, 0], f.mask, g.dbeta)  # 0.4472 [150] [2. 2.]
print("y:\n", f.y)
print("mask:", f.mask, "(%d word of x's %d elements)" % (xvk.batch_norm_mask_words(x), x.size))
print("dbeta:", g.dbeta)

# Channel 0 is [1, 3, 5, -1]: mean 2, variance 5. Bit i of the mask is y.ravel()[i] > 0:
# bits 1, 2, 4 and 7, so 150. dbeta counts the positive outputs of each channel (dy = 1).
ok = (np.allclose(f.y[:, 0], [0, 1 / np.sqrt(5 + 1e-5), 3 / np.sqrt(5 + 1e-5), 0], atol=1e-6)
      and f.mask.tolist() == [150] and f.mask.dtype == np.uint32 and g.dbeta.tolist() == [2, 2])
print("check:", "ok" if ok else "WRONG")
sys.exit(0 if ok else 1)
