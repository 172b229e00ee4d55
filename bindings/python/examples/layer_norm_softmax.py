"""LayerNorm and softmax on the CPU backend from Python; checks one value of each."""
import sys

import numpy as np

import xvk

x = np.array([[1, 2, 3, 4], [-1, 0, 1, 6]], dtype=np.float32)
with xvk.Context("cpu") as ctx:
    y = ctx.layer_norm_forward(x, epsilon=1e-5).y  # normalize each row, allocating y
    p = np.empty_like(x)
    ctx.softmax_forward(x, p)  # into a caller-provided output
print("xvk %d.%d.%d" % xvk.version())
print("layer_norm:\n", y)
print("softmax:\n", p)

# Row 0 has mean 2.5 and variance 1.25; its softmax ends in 1 / (1 + e^-1 + e^-2 + e^-3).
ok = abs(y[0, 0] - (-1.5 / np.sqrt(1.25 + 1e-5))) < 1e-5 and abs(p[0, 3] - 0.6439143) < 1e-6
print("check:", "ok" if ok else "WRONG")
sys.exit(0 if ok else 1)
