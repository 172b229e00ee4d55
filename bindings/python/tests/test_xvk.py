"""Tests of the Python binding on the CPU backend, against float64 references written here."""
import numpy as np
import pytest

import xvk

RNG = np.random.default_rng(5)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# float64 references ---------------------------------------------------------------------------

def ref_softmax(x, scale=1.0, mask=None):
    z = scale * x.astype(np.float64)
    if mask is not None:
        z = z + mask
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def ref_layer_norm(x, gamma, beta, eps, nd=1):
    h = x.astype(np.float64)
    axes = tuple(range(h.ndim - nd, h.ndim))
    mean = h.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(((h - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    y = (h - mean) * rstd
    if gamma is not None:
        y = y * gamma
    if beta is not None:
        y = y + beta
    return y, mean.reshape(h.shape[:h.ndim - nd]), rstd.reshape(h.shape[:h.ndim - nd])


def ref_layer_norm_backward(dy, x, gamma, eps):
    x = x.astype(np.float64)
    dy = dy.astype(np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    g = dy * gamma
    dx = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


def ref_rms_norm(x, gamma, eps):
    h = x.astype(np.float64)
    rstd = 1.0 / np.sqrt((h * h).mean(axis=-1, keepdims=True) + eps)
    return h * rstd * gamma, rstd[..., 0]


def ref_rms_norm_backward(dy, x, gamma, eps):
    x = x.astype(np.float64)
    dy = dy.astype(np.float64)
    rstd = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
    xhat = x * rstd
    g = dy * gamma
    dx = rstd * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, (dy * xhat).sum(axis=0)


def ref_batch_norm(x, gamma, beta, eps, axis=1, z=None, relu=False, mean=None, var=None):
    """(y, mean, rstd, unbiased var): BatchNorm over every dimension but axis (batch statistics
    unless mean and var are given)."""
    h = np.moveaxis(x.astype(np.float64), axis, -1)  # channels last
    flat = h.reshape(-1, h.shape[-1])
    unbiased = flat.var(axis=0, ddof=1)
    if mean is None:
        mean, var = flat.mean(axis=0), flat.var(axis=0)
    rstd = 1.0 / np.sqrt(var + eps)
    v = (h - mean) * rstd * gamma + beta
    if z is not None:
        v = v + np.moveaxis(z.astype(np.float64), axis, -1)
    if relu:
        v = np.maximum(v, 0.0)
    return np.moveaxis(v, -1, axis), mean, rstd, unbiased


def ref_batch_norm_backward(dy, x, gamma, eps, positive=None, axis=1):
    """(dx, dgamma, dbeta) of training BatchNorm; positive: where y > 0 under ReLU."""
    h = np.moveaxis(x.astype(np.float64), axis, -1)
    g = np.moveaxis(dy.astype(np.float64) * (1.0 if positive is None else positive), axis, -1)
    m = h.size // h.shape[-1]
    axes = tuple(range(h.ndim - 1))
    mean = h.mean(axis=axes)
    rstd = 1.0 / np.sqrt(h.var(axis=axes) + eps)
    xhat = (h - mean) * rstd
    dbeta, dgamma = g.sum(axis=axes), (g * xhat).sum(axis=axes)
    dx = gamma * rstd * (g - dbeta / m - xhat * dgamma / m)
    return np.moveaxis(dx, -1, axis), dgamma, dbeta


def mask_bits(mask, n):
    """Bits 0..n-1 of a ReLU mask (bit i is bit i % 32 of word i / 32) and the bits past them."""
    words = mask.astype(np.uint64)
    i = np.arange(32 * len(words))
    bits = ((words[i // 32] >> (i % 32).astype(np.uint64)) & 1).astype(bool)
    return bits[:n], bits[n:]


@pytest.fixture
def ctx():
    with xvk.Context("cpu") as c:
        yield c


# library, errors, backends, contexts ----------------------------------------------------------

def test_version_and_names():
    assert xvk.version()[0] == 0 and xvk.version() >= (0, 1, 0)
    assert xvk.status_string(xvk.Status.ERROR_INVALID_ARGUMENT) == "XVK_ERROR_INVALID_ARGUMENT"
    assert xvk.backend_name("cuda") == "cuda"
    assert xvk.backend_name(xvk.Backend.HIP) == "hip"


def test_backend_query():
    cpu = xvk.backend_query("cpu")
    assert cpu.available and cpu.device_count == 1 and cpu.reason
    for backend in ("cuda", "hip"):
        info = xvk.backend_query(backend)
        assert isinstance(info.available, bool) and info.reason  # says why, either way


def test_context_lifecycle():
    c = xvk.Context(xvk.Backend.CPU, 0)
    assert c.backend == xvk.Backend.CPU and c.device_id == 0
    c.set_stream(None)
    c.synchronize()
    with pytest.raises(xvk.InvalidArgumentError, match="xvk_context_set_stream"):
        c.set_stream(0x1000)  # the CPU backend takes the NULL stream only
    c.close()
    c.close()
    with pytest.raises(ValueError):
        c.synchronize()


def test_unavailable_backend_raises_with_reason():
    if xvk.backend_query("hip").available:
        pytest.skip("a HIP device is present")
    with pytest.raises(xvk.BackendUnavailableError) as e:
        xvk.Context("hip")
    assert "xvk_context_create" in str(e.value) and e.value.status == xvk.Status.ERROR_BACKEND_UNAVAILABLE


def test_memory(ctx):
    a = np.arange(6, dtype=np.float32)
    b = np.zeros_like(a)
    p = ctx.memory_alloc(a.nbytes)
    assert p % 256 == 0
    ctx.memory_copy(p, a.ctypes.data, a.nbytes)
    ctx.memory_copy(b.ctypes.data, p, a.nbytes)
    ctx.synchronize()
    ctx.memory_free(p)
    np.testing.assert_array_equal(a, b)
    assert ctx.memory_alloc(0) == 0


# the example's values -------------------------------------------------------------------------

def test_example_values(ctx):
    x = np.array([[1, 2, 3, 4], [-1, 0, 1, 6]], np.float32)
    y = ctx.layer_norm_forward(x).y
    assert y[0, 0] == pytest.approx(-1.5 / np.sqrt(1.25 + 1e-5), abs=1e-5)  # -1.3416
    p = ctx.softmax_forward(x)
    assert p[0, 3] == pytest.approx(1 / (1 + np.exp(-1) + np.exp(-2) + np.exp(-3)), abs=1e-6)  # 0.6439


# float32 against the references ---------------------------------------------------------------

def test_softmax_forward_backward(ctx):
    x, dy = rand(4, 7), rand(4, 7)
    y = np.full_like(x, np.nan)
    assert ctx.softmax_forward(x, y, scale=0.5) is y
    np.testing.assert_allclose(y, ref_softmax(x, 0.5), rtol=1e-5, atol=1e-6)
    dx = ctx.softmax_backward(y, dy, scale=0.5)
    r = ref_softmax(x, 0.5)
    np.testing.assert_allclose(dx, 0.5 * r * (dy - (dy * r).sum(-1, keepdims=True)), rtol=1e-4, atol=1e-6)


def test_log_softmax_forward_backward(ctx):
    x, dy = rand(3, 9), rand(3, 9)
    y = ctx.log_softmax_forward(x)
    np.testing.assert_allclose(y, np.log(ref_softmax(x)), rtol=1e-5, atol=1e-5)
    dx = ctx.log_softmax_backward(y, dy)
    np.testing.assert_allclose(dx, dy - ref_softmax(x) * dy.sum(-1, keepdims=True), rtol=1e-4, atol=1e-5)


def test_softmax_causal_and_mask(ctx):
    x = rand(2, 3, 5)
    top_left = np.where(np.arange(5)[None, :] <= np.arange(3)[:, None], 0.0, -np.inf)
    np.testing.assert_allclose(ctx.softmax_forward(x, causal=xvk.Causal.TOP_LEFT), ref_softmax(x, mask=top_left),
                               rtol=1e-5, atol=1e-6)
    bottom_right = np.where(np.arange(5)[None, :] <= np.arange(3)[:, None] + 2, 0.0, -np.inf)
    np.testing.assert_allclose(ctx.softmax_forward(x, causal=xvk.Causal.BOTTOM_RIGHT),
                               ref_softmax(x, mask=bottom_right), rtol=1e-5, atol=1e-6)
    mask = rand(3, 5)  # broadcast over the leading dimension
    mask[1, 2] = -np.inf
    y = ctx.softmax_forward(x, mask=mask, scale=2.0)
    np.testing.assert_allclose(y, ref_softmax(x, 2.0, mask), rtol=1e-5, atol=1e-6)
    assert np.all(y[:, 1, 2] == 0)


def test_layer_norm_forward_backward(ctx):
    x, gamma, beta, dy = rand(5, 8), rand(8), rand(8), rand(5, 8)
    out = ctx.layer_norm_forward(x, gamma, beta, mean=True, rstd=True, epsilon=1e-3)
    y, mean, rstd = ref_layer_norm(x, gamma, beta, 1e-3)
    np.testing.assert_allclose(out.y, y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.mean, mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.rstd, rstd, rtol=1e-5)
    assert out.mean.dtype == np.float32 and out.mean.shape == (5,) and out.residual_out is None
    grads = ctx.layer_norm_backward(dy, x, out.mean, out.rstd, gamma, dgamma=True, dbeta=True)
    dx, dgamma, dbeta = ref_layer_norm_backward(dy, x, gamma, 1e-3)
    np.testing.assert_allclose(grads.dx, dx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads.dgamma, dgamma, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads.dbeta, dbeta, rtol=1e-4, atol=1e-5)


def test_layer_norm_options(ctx):
    x, r, gamma = rand(2, 3, 4), rand(2, 3, 4), rand(3, 4)
    h = np.empty_like(x)
    out = ctx.layer_norm_forward(x, gamma, normalized_ndim=2, zero_centered_gamma=True, residual=r,
                                 residual_out=h, mean=True)
    y, mean, _ = ref_layer_norm(x + r, 1.0 + gamma, None, 1e-5, nd=2)
    np.testing.assert_allclose(out.y, y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.residual_out, x + r, rtol=1e-6)
    assert out.mean.shape == (2,)
    np.testing.assert_allclose(out.mean, mean, rtol=1e-5, atol=1e-6)


def test_rms_norm_forward_backward(ctx):
    x, gamma, dy = rand(4, 6), rand(6), rand(4, 6)
    out = ctx.rms_norm_forward(x, gamma, rstd=True)
    y, rstd = ref_rms_norm(x, gamma, 1e-6)
    np.testing.assert_allclose(out.y, y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.rstd, rstd, rtol=1e-5)
    assert out.mean is None
    grads = ctx.rms_norm_backward(dy, x, out.rstd, gamma, dgamma=True)
    dx, dgamma = ref_rms_norm_backward(dy, x, gamma, 1e-6)
    np.testing.assert_allclose(grads.dx, dx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads.dgamma, dgamma, rtol=1e-4, atol=1e-5)
    assert grads.dbeta is None


def test_rms_norm_residual(ctx):
    x, r = rand(3, 5), rand(3, 5)
    out = ctx.rms_norm_forward(x, None, residual=r, residual_out=True, epsilon=1e-4)
    np.testing.assert_allclose(out.y, ref_rms_norm(x + r, 1.0, 1e-4)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.residual_out, x + r, rtol=1e-6)


def test_in_place_and_strided_rows(ctx):
    x = rand(3, 6)
    expected = ref_softmax(x)
    ctx.softmax_forward(x, x)  # y may be x
    np.testing.assert_allclose(x, expected, rtol=1e-5, atol=1e-6)
    big = rand(4, 10)
    view = big[:, 2:7]  # rows 10 elements apart
    np.testing.assert_allclose(ctx.layer_norm_forward(view).y, ref_layer_norm(view, None, None, 1e-5)[0],
                               rtol=1e-5, atol=1e-5)


# BatchNorm ----------------------------------------------------------------------------------------

def test_batch_norm_training_relu_mask_then_backward(ctx):
    x, gamma, beta, dy = rand(4, 3, 5), rand(3), rand(3), rand(4, 3, 5)  # N, C, spatial: 60 elements
    running_mean, running_var = np.zeros(3, np.float32), np.ones(3, np.float32)
    out = ctx.batch_norm_forward_training(x, gamma, beta, mask=True, saved_mean=True, saved_rstd=True,
                                          running_mean=running_mean, running_var=running_var, momentum=0.25,
                                          activation=xvk.Activation.RELU)
    y, mean, rstd, unbiased = ref_batch_norm(x, gamma, beta, 1e-5, relu=True)
    np.testing.assert_allclose(out.y, y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.saved_mean, mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.saved_rstd, rstd, rtol=1e-5)
    np.testing.assert_allclose(running_mean, 0.25 * mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(running_var, 0.75 + 0.25 * unbiased, rtol=1e-5)
    # the mask: ceil(60 / 32) uint32 words, bit i set where y > 0 (x's memory order), then zeros
    assert xvk.batch_norm_mask_words(x) == 2
    assert out.mask.dtype == np.uint32 and out.mask.shape == (2,)
    bits, padding = mask_bits(out.mask, x.size)
    np.testing.assert_array_equal(bits, out.y.ravel() > 0)
    assert not padding.any() and 0 < bits.sum() < x.size

    grads = ctx.batch_norm_backward(dy, x, out.saved_mean, out.saved_rstd, gamma, mask=out.mask, dz=True,
                                    dgamma=True, dbeta=True, activation=xvk.Activation.RELU)
    np.testing.assert_array_equal(grads.dz, np.where(out.y > 0, dy, 0))  # dz is dy, masked
    dx, dgamma, dbeta = ref_batch_norm_backward(dy, x, gamma, 1e-5, positive=y > 0)
    np.testing.assert_allclose(grads.dx, dx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads.dgamma, dgamma, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads.dbeta, dbeta, rtol=1e-4, atol=1e-5)
    assert grads.dgamma.dtype == np.float32 and grads.dgamma.shape == (3,)
    # from y instead of the mask: the same bits, so bitwise the same gradients
    again = ctx.batch_norm_backward(dy, x, out.saved_mean, out.saved_rstd, gamma, y=out.y,
                                    activation=xvk.Activation.RELU)
    np.testing.assert_array_equal(again.dx, grads.dx)
    assert again.dz is None and again.dgamma is None


def test_batch_norm_channels_last(ctx):
    nhwc = rand(3, 2, 4, 5)  # channels last: C = 5
    gamma, beta = rand(5) + 2, rand(5)
    y = ctx.batch_norm_forward_training(nhwc, gamma, beta, channel_axis=-1).y
    # without activation each channel of y has mean beta and (biased) standard deviation |gamma|
    flat = y.reshape(-1, 5).astype(np.float64)
    np.testing.assert_allclose(flat.mean(axis=0), beta, atol=1e-5)
    np.testing.assert_allclose(flat.std(axis=0), np.abs(gamma), rtol=1e-4)
    np.testing.assert_allclose(y, ref_batch_norm(nhwc, gamma, beta, 1e-5, axis=-1)[0], rtol=1e-5, atol=1e-5)
    # the same memory seen as (N, C, H, W) with channels-last strides (PyTorch's channels_last)
    nchw = np.moveaxis(nhwc, -1, 1)
    out = ctx.batch_norm_forward_training(nchw, gamma, beta, mask=True, activation=xvk.Activation.RELU)
    assert out.y.strides == nchw.strides  # allocated in x's memory order
    np.testing.assert_allclose(np.moveaxis(out.y, 1, -1), np.maximum(y, 0), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(mask_bits(out.mask, nhwc.size)[0], np.moveaxis(out.y, 1, -1).ravel() > 0)


def test_batch_norm_inference_add_relu(ctx):
    x, z, gamma, beta = rand(2, 3, 4), rand(2, 3, 4), rand(3), rand(3)
    running_mean, running_var = rand(3), np.abs(rand(3)) + 0.5
    y = np.full_like(x, np.nan)
    out = ctx.batch_norm_forward_inference(x, running_mean, running_var, gamma, beta, y, z=z, mask=True,
                                           epsilon=1e-3, activation=xvk.Activation.RELU)
    assert out.y is y and out.saved_mean is None
    want = ref_batch_norm(x, gamma, beta, 1e-3, z=z, relu=True, mean=running_mean, var=running_var)[0]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(mask_bits(out.mask, x.size)[0], y.ravel() > 0)
    # inference leaves the running statistics alone, and takes none of the training outputs
    y2 = ctx.batch_norm_forward_inference(x, running_mean, running_var).y
    np.testing.assert_allclose(y2, ref_batch_norm(x, 1.0, 0.0, 1e-5, mean=running_mean, var=running_var)[0],
                               rtol=1e-5, atol=1e-5)


def test_batch_norm_mask_words():
    assert xvk.batch_norm_mask_words((4, 3, 5)) == 2
    assert xvk.batch_norm_mask_words((2, 16)) == 1
    assert xvk.batch_norm_mask_words((2, 17)) == 2
    assert xvk.batch_norm_mask_words((8, 3, 0)) == 0
    assert xvk.batch_norm_mask_words(np.empty((5, 7, 3))) == 4  # a tensor: only its shape is read
    with pytest.raises(xvk.InvalidArgumentError, match="^xvk_batch_norm_mask_words: x has a negative size"):
        xvk.batch_norm_mask_words((2, -1))


def test_batch_norm_errors(ctx):
    x, y = rand(4, 3), np.full((4, 3), 7.0, np.float32)
    with pytest.raises(xvk.InvalidArgumentError) as e:
        ctx.batch_norm_forward_training(x, rand(2), None, y, mask=True, activation=xvk.Activation.RELU)
    assert str(e.value) == "xvk_batch_norm_forward_training: gamma has 2 elements, expected 3 (the number of channels)"
    assert e.value.status == xvk.Status.ERROR_INVALID_ARGUMENT
    assert np.all(y == 7.0)  # nothing written
    with pytest.raises(xvk.InvalidArgumentError, match="mask has 3 elements, expected 1"):
        ctx.batch_norm_forward_training(x, mask=np.zeros(3, np.uint32), activation=xvk.Activation.RELU)
    with pytest.raises(xvk.InvalidArgumentError, match="mask is given but options->activation"):
        ctx.batch_norm_forward_training(x, mask=True)
    with pytest.raises(xvk.InvalidArgumentError, match="options->momentum"):
        ctx.batch_norm_forward_training(x, momentum=1.5)
    with pytest.raises(xvk.InvalidArgumentError, match="running_var is NULL"):
        ctx.batch_norm_forward_training(x, running_mean=np.zeros(3, np.float32))
    with pytest.raises(xvk.InvalidArgumentError, match="x has 1 value"):
        ctx.batch_norm_forward_training(rand(1, 3))  # training needs more than one value per channel
    s = np.ones(3, np.float32)
    with pytest.raises(xvk.InvalidArgumentError, match="mask and y are both NULL"):
        ctx.batch_norm_backward(x, x, s, s, activation=xvk.Activation.RELU)
    with pytest.raises(xvk.UnsupportedError, match="x's strides"):
        ctx.batch_norm_forward_training(rand(4, 6)[:, ::2])  # neither dense order


# errors -------------------------------------------------------------------------------------------

def test_wrong_gamma_length_raises_the_library_message(ctx):
    x, y = rand(2, 4), np.full((2, 4), 7.0, np.float32)
    with pytest.raises(xvk.InvalidArgumentError) as e:
        ctx.layer_norm_forward(x, rand(3), y=y)
    assert str(e.value) == "xvk_layer_norm_forward: gamma has 3 elements, expected 4 (the normalized size)"
    assert e.value.status == xvk.Status.ERROR_INVALID_ARGUMENT
    assert isinstance(e.value, ValueError)
    assert xvk.last_error_message() == str(e.value)
    assert np.all(y == 7.0)  # nothing written


def test_other_errors(ctx):
    x = rand(2, 4)
    with pytest.raises(xvk.InvalidArgumentError, match="options->epsilon"):
        ctx.layer_norm_forward(x, epsilon=0.0)
    with pytest.raises(xvk.UnsupportedError, match="dtype"):
        ctx.softmax_forward(np.ones((2, 2), np.float64))
    with pytest.raises(xvk.UnsupportedError, match="contiguous"):
        ctx.softmax_forward(np.asfortranarray(rand(3, 4)))
    readonly = rand(2, 4)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ctx.softmax_forward(x, readonly)
    ctx.softmax_forward(readonly, np.empty_like(x))  # read-only inputs are fine
    with pytest.raises(TypeError):
        ctx.softmax_forward([[1.0, 2.0]])


# float16 ----------------------------------------------------------------------------------------

def test_float16(ctx):
    x, gamma, beta = rand(3, 16, dtype=np.float16), rand(16), rand(16)  # fp16 x, float32 parameters
    out = ctx.layer_norm_forward(x, gamma, beta, rstd=True)
    assert out.y.dtype == np.float16 and out.rstd.dtype == np.float32
    # fp16 output: 11 significant bits, so a few units in the last place of values of order 1
    np.testing.assert_allclose(out.y, ref_layer_norm(x, gamma, beta, 1e-5)[0], rtol=2e-3, atol=4e-3)
    y = ctx.softmax_forward(x)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y, ref_softmax(x), rtol=2e-3, atol=1e-4)


# DLPack producers and device arrays ---------------------------------------------------------------

class Producer:
    """Exposes only the DLPack protocol of a NumPy array, like a foreign framework's tensor."""

    def __init__(self, array):
        self._array = array
        self.shape = array.shape
        self.ndim = array.ndim

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_dlpack_producers(ctx):
    x, gamma = rand(3, 5), rand(5)
    y, mean, rstd = np.empty_like(x), np.empty(3, np.float32), np.empty(3, np.float32)
    out = ctx.layer_norm_forward(Producer(x), Producer(gamma), None, Producer(y), mean=Producer(mean),
                                 rstd=Producer(rstd))
    assert isinstance(out.y, Producer)
    ry, rmean, rrstd = ref_layer_norm(x, gamma, None, 1e-5)
    np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mean, rmean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rstd, rrstd, rtol=1e-5)
    with pytest.raises(TypeError, match="only allocated for NumPy inputs"):
        ctx.softmax_forward(Producer(x))


def test_device_array(ctx):
    x = rand(2, 8)
    dx = ctx.to_device(x)
    dy = ctx.empty(x.shape, np.float32)
    assert ctx.softmax_forward(dx, dy) is dy
    np.testing.assert_allclose(dy.numpy(), ref_softmax(x), rtol=1e-5, atol=1e-6)
    dx.free()
    dy.free()
