"""Python binding of xvk, fused deep-learning kernels behind a stable C ABI.

A thin ctypes layer over libxvk: every operator runs in the library, on the backend of the
Context it is called on. Tensors are NumPy arrays or any object that implements the DLPack
protocol (__dlpack__ and __dlpack_device__: NumPy >= 1.22, PyTorch, CuPy, JAX, ...). Results are
written into outputs the caller passes; with NumPy inputs, outputs left out are allocated.
A failing call raises XvkError (a subclass per status) carrying xvk_last_error_message().
Operators: softmax and log-softmax, LayerNorm, RMSNorm, and BatchNorm with fused ReLU and
Add+ReLU (whose ReLU mask is a uint32 tensor of batch_norm_mask_words(x) elements).

    import numpy as np, xvk
    with xvk.Context("cpu") as ctx:
        y = ctx.layer_norm_forward(np.array([[1, 2, 3, 4]], np.float32)).y
"""
import ctypes
import enum
from collections import namedtuple

from . import _native
from ._native import lib

try:
    import numpy as _np
except ImportError:  # NumPy is optional: DLPack producers work without it
    _np = None

__version__ = "0.1.0"

__all__ = [
    "Backend", "Causal", "Activation", "Status", "XvkError", "InvalidArgumentError", "UnsupportedError",
    "BackendUnavailableError", "OutOfMemoryError", "DeviceError", "InternalError",
    "BackendInfo", "NormForward", "NormBackward", "BatchNormForward", "BatchNormBackward", "Context",
    "DeviceArray", "version", "status_string", "backend_name", "backend_query", "last_error_message",
    "batch_norm_mask_words",
]


class Status(enum.IntEnum):
    SUCCESS = 0
    ERROR_INVALID_ARGUMENT = 1
    ERROR_UNSUPPORTED = 2
    ERROR_BACKEND_UNAVAILABLE = 3
    ERROR_OUT_OF_MEMORY = 4
    ERROR_DEVICE = 5
    ERROR_INTERNAL = 6


class Backend(enum.IntEnum):
    CPU = 0
    CUDA = 1
    HIP = 2


class Causal(enum.IntEnum):
    NONE = 0
    TOP_LEFT = 1  # row i keeps columns j <= i (PyTorch's is_causal)
    BOTTOM_RIGHT = 2  # row i keeps columns j <= i + (cols - rows): the KV-cache convention


class Activation(enum.IntEnum):
    NONE = 0
    RELU = 1  # max(v, 0), after BatchNorm's optional add; NaN stays NaN


class XvkError(RuntimeError):
    """A non-success xvk_status_t. str(error) is the library's message; .status the status."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


class InvalidArgumentError(XvkError, ValueError):
    pass


class UnsupportedError(XvkError):
    pass


class BackendUnavailableError(XvkError):
    pass


class OutOfMemoryError(XvkError, MemoryError):
    pass


class DeviceError(XvkError):
    pass


class InternalError(XvkError):
    pass


_ERRORS = {
    Status.ERROR_INVALID_ARGUMENT: InvalidArgumentError,
    Status.ERROR_UNSUPPORTED: UnsupportedError,
    Status.ERROR_BACKEND_UNAVAILABLE: BackendUnavailableError,
    Status.ERROR_OUT_OF_MEMORY: OutOfMemoryError,
    Status.ERROR_DEVICE: DeviceError,
    Status.ERROR_INTERNAL: InternalError,
}


def _check(status):
    if status != 0:
        # The message is thread-local in the library; ctypes calls it on this same thread.
        message = lib.xvk_last_error_message().decode("utf-8", "replace")
        try:
            status = Status(status)
        except ValueError:
            pass
        raise _ERRORS.get(status, XvkError)(status, message)


def version():
    """The loaded library's version as (major, minor, patch)."""
    v = lib.xvk_version()
    return (v // 10000, v // 100 % 100, v % 100)


def status_string(status):
    return lib.xvk_status_string(int(status)).decode()


def backend_name(backend):
    return lib.xvk_backend_name(int(_backend(backend))).decode()


def last_error_message():
    """This thread's last failure message, "" if none (the errors raised here carry it too)."""
    return lib.xvk_last_error_message().decode("utf-8", "replace")


BackendInfo = namedtuple("BackendInfo", "available device_count reason")


def backend_query(backend):
    """Whether a backend can be used, how many devices it has, and why (not)."""
    available, count, reason = ctypes.c_int(), ctypes.c_int(), ctypes.c_char_p()
    _check(lib.xvk_backend_query(int(_backend(backend)), ctypes.byref(available), ctypes.byref(count),
                                 ctypes.byref(reason)))
    return BackendInfo(bool(available.value), count.value, (reason.value or b"").decode())


def _backend(backend):
    if isinstance(backend, str):
        try:
            return Backend[backend.upper()]
        except KeyError:
            raise ValueError("unknown backend %r: expected 'cpu', 'cuda' or 'hip'" % backend) from None
    return Backend(backend)


_DEVICE_TYPE = {Backend.CPU: _native.kDLCPU, Backend.CUDA: _native.kDLCUDA, Backend.HIP: _native.kDLROCM}

# Results of the norm operators: the outputs, None where not asked for.
NormForward = namedtuple("NormForward", "y mean rstd residual_out")
NormBackward = namedtuple("NormBackward", "dx dgamma dbeta")
# Results of the BatchNorm operators, likewise (the running statistics are updated in place).
BatchNormForward = namedtuple("BatchNormForward", "y mask saved_mean saved_rstd")
BatchNormBackward = namedtuple("BatchNormBackward", "dx dz dgamma dbeta")


def batch_norm_mask_words(x):
    """The number of 32-bit words of BatchNorm's ReLU mask for a tensor shaped like x:
    ceil(elements / 32). x is a tensor (only its .shape is read) or a shape."""
    shape = tuple(int(d) for d in (x.shape if hasattr(x, "shape") else x))
    dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    t = _native.DLTensor()
    t.device = _native.DLDevice(_native.kDLCPU, 0)
    t.ndim = len(shape)
    t.dtype = _native.DLDataType(_native.kDLFloat, 32, 1)
    t.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
    words = ctypes.c_int64()
    _check(lib.xvk_batch_norm_mask_words(ctypes.byref(t), ctypes.byref(words)))
    return words.value


# ---------------------------------------------------------------------------------------------
# Tensors: NumPy arrays, DLPack producers and DeviceArray, each turned into a DLTensor pointer
# for one call. _Args keeps every object that call's pointers depend on alive until it is done.
# ---------------------------------------------------------------------------------------------

def _numpy_dl_dtype(dtype, name):
    if dtype.name == "bfloat16":  # ml_dtypes' bfloat16
        return _native.DLDataType(_native.kDLBfloat, 16, 1)
    codes = {"f": _native.kDLFloat, "i": _native.kDLInt, "u": _native.kDLUInt}
    if dtype.kind not in codes:
        raise TypeError("%s has NumPy dtype %s, which has no DLPack equivalent" % (name, dtype))
    return _native.DLDataType(codes[dtype.kind], dtype.itemsize * 8, 1)


class _Args:
    def __init__(self, ctx):
        self._ctx = ctx
        self._keep = []

    def tensor(self, obj, name, output=False):
        """A DLTensor* for obj (None gives NULL)."""
        if obj is None:
            return None
        if isinstance(obj, DeviceArray):
            self._keep.append(obj)
            return ctypes.pointer(obj._dl)
        if _np is not None and isinstance(obj, _np.ndarray):
            if output and not obj.flags.writeable:
                raise ValueError("%s is a read-only NumPy array; outputs must be writable" % name)
            return self._from_numpy(obj, name)
        if hasattr(obj, "__dlpack__"):
            return self._from_dlpack(obj, name)
        raise TypeError("%s: expected a NumPy array or an object implementing __dlpack__, got %s"
                        % (name, type(obj).__name__))

    def _from_numpy(self, a, name):
        # Straight from __array_interface__: works for read-only inputs too, which NumPy's
        # __dlpack__ refuses to export.
        interface = a.__array_interface__
        shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
        strides = None
        if interface.get("strides") is not None:
            if any(s % a.itemsize for s in interface["strides"]):
                raise ValueError("%s has strides %s that are not a multiple of its %d-byte elements"
                                 % (name, interface["strides"], a.itemsize))
            strides = (ctypes.c_int64 * max(a.ndim, 1))(*(s // a.itemsize for s in interface["strides"]))
        t = _native.DLTensor()
        t.data = interface["data"][0]
        t.device = _native.DLDevice(_native.kDLCPU, 0)
        t.ndim = a.ndim
        t.dtype = _numpy_dl_dtype(a.dtype, name)
        t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)) if strides is not None else None
        t.byte_offset = 0
        self._keep.extend((a, shape, strides, t))
        return ctypes.pointer(t)

    def _from_dlpack(self, obj, name):
        device_type, _ = obj.__dlpack_device__()
        if int(device_type) in (_native.kDLCPU, _native.kDLCUDAHost):
            capsule = obj.__dlpack__()
        else:
            # The producer orders its pending work before the context's stream (None: the
            # default stream).
            capsule = obj.__dlpack__(stream=self._ctx._stream)
        pointer = _native.capsule_pointer(capsule, b"dltensor")
        # Not consumed: the capsule keeps its name, and its destructor releases the tensor once
        # the call is done with it. DLManagedTensor starts with its DLTensor.
        self._keep.extend((obj, capsule))
        return ctypes.cast(pointer, _native.DLTensorP)


def _shape_of(obj):
    return tuple(int(d) for d in obj.shape)


def _alloc_like(obj, name, shape=None, dtype=None, same_layout=False):
    """A new NumPy array for an output the caller left out (NumPy inputs only). same_layout:
    obj's shape, dtype and memory order (BatchNorm's channels-first or channels-last)."""
    if _np is None or not isinstance(obj, _np.ndarray):
        raise TypeError("%s was not given, and is only allocated for NumPy inputs: pass an output "
                        "tensor on the input's device" % name)
    if same_layout:
        return _np.empty_like(obj)
    return _np.empty(obj.shape if shape is None else shape, obj.dtype if dtype is None else dtype)


def _want(arg, like, name, shape, dtype, same_layout=False):
    """An optional output: None (not computed), True (allocate) or the caller's tensor.
    shape is a function giving the shape to allocate, None for like's."""
    if arg is True:
        return _alloc_like(like, name, shape() if shape else None, dtype, same_layout)
    if arg is False:
        return None
    return arg


class Context:
    """An xvk context: a backend, a device and a stream. Use from one thread at a time.

    Context("cpu") or Context(Backend.CUDA, device_id). close() (or a with block) destroys it.
    """

    def __init__(self, backend=Backend.CPU, device_id=0):
        self._handle = None
        self._stream = None
        handle = ctypes.c_void_p()
        _check(lib.xvk_context_create(int(_backend(backend)), int(device_id), ctypes.byref(handle)))
        self._handle = handle

    def _h(self):
        if self._handle is None:
            raise ValueError("this xvk Context is closed")
        return self._handle

    def close(self):
        """Waits for the context's work, then destroys it. Closing twice is a no-op."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            _check(lib.xvk_context_destroy(handle))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            lib.xvk_context_destroy(self._handle)
            self._handle = None

    @property
    def backend(self):
        backend = ctypes.c_int()
        _check(lib.xvk_context_get_device(self._h(), ctypes.byref(backend), None))
        return Backend(backend.value)

    @property
    def device_id(self):
        device = ctypes.c_int()
        _check(lib.xvk_context_get_device(self._h(), None, ctypes.byref(device)))
        return device.value

    def set_stream(self, stream):
        """Enqueue on this stream: a cudaStream_t/hipStream_t as an int (e.g.
        torch.cuda.current_stream().cuda_stream), or None for the default stream."""
        stream = None if stream in (None, 0) else int(stream)
        _check(lib.xvk_context_set_stream(self._h(), stream))
        self._stream = stream

    def synchronize(self):
        _check(lib.xvk_context_synchronize(self._h()))

    # Memory on the context's device (host memory on the CPU backend) --------------------------

    def memory_alloc(self, nbytes):
        """xvk_memory_alloc: an address (int, 0 for 0 bytes); free it with memory_free."""
        out = ctypes.c_void_p()
        _check(lib.xvk_memory_alloc(self._h(), int(nbytes), ctypes.byref(out)))
        return out.value or 0

    def memory_free(self, address):
        _check(lib.xvk_memory_free(self._h(), address or None))

    def memory_copy(self, dst, src, nbytes):
        """xvk_memory_copy between host memory and this context's device, on its stream."""
        _check(lib.xvk_memory_copy(self._h(), dst or None, src or None, int(nbytes)))

    def empty(self, shape, dtype="float32"):
        """A DeviceArray of this shape and NumPy dtype on the context's device."""
        return DeviceArray(self, shape, dtype)

    def to_device(self, array):
        """A DeviceArray holding a copy of a NumPy array."""
        a = _np.ascontiguousarray(array)
        d = DeviceArray(self, a.shape, a.dtype)
        d.copy_from(a)
        return d

    # Softmax ------------------------------------------------------------------------------------

    def _softmax_options(self, args, scale, causal, mask):
        o = _native.SoftmaxOptions()
        o.struct_size = ctypes.sizeof(o)
        o.scale = scale
        o.causal = int(causal)
        o.mask = args.tensor(mask, "mask")
        return ctypes.pointer(o)

    def _softmax(self, function, x, y, scale, causal, mask):
        args = _Args(self)
        y = _alloc_like(x, "y") if y is None else y
        options = self._softmax_options(args, scale, causal, mask)
        _check(function(self._h(), args.tensor(x, "x"), options, args.tensor(y, "y", output=True)))
        return y

    def softmax_forward(self, x, y=None, *, scale=1.0, causal=Causal.NONE, mask=None):
        """y = softmax(scale * x + mask) over the last dimension (causal masking if asked).
        y may be x (in-place); returns y."""
        return self._softmax(lib.xvk_softmax_forward, x, y, scale, causal, mask)

    def log_softmax_forward(self, x, y=None, *, scale=1.0, causal=Causal.NONE, mask=None):
        """y = log_softmax(scale * x + mask) over the last dimension; returns y."""
        return self._softmax(lib.xvk_log_softmax_forward, x, y, scale, causal, mask)

    def _softmax_grad(self, function, y, dy, dx, scale):
        args = _Args(self)
        dx = _alloc_like(dy, "dx") if dx is None else dx
        options = self._softmax_options(args, scale, Causal.NONE, None)
        _check(function(self._h(), args.tensor(y, "y"), args.tensor(dy, "dy"), options,
                        args.tensor(dx, "dx", output=True)))
        return dx

    def softmax_backward(self, y, dy, dx=None, *, scale=1.0):
        """dx = scale * y * (dy - sum(dy * y)) from the forward's output y; returns dx."""
        return self._softmax_grad(lib.xvk_softmax_backward, y, dy, dx, scale)

    def log_softmax_backward(self, y, dy, dx=None, *, scale=1.0):
        """dx = scale * (dy - exp(y) * sum(dy)) from the forward's output y; returns dx."""
        return self._softmax_grad(lib.xvk_log_softmax_backward, y, dy, dx, scale)

    # LayerNorm and RMSNorm ----------------------------------------------------------------------

    @staticmethod
    def _norm_options(args, epsilon, normalized_ndim, zero_centered_gamma, residual=None,
                      residual_out=None):
        o = _native.NormOptions()
        o.struct_size = ctypes.sizeof(o)
        o.epsilon = epsilon
        o.normalized_ndim = normalized_ndim
        o.zero_centered_gamma = 1 if zero_centered_gamma else 0
        o.residual = args.tensor(residual, "residual")
        o.residual_out = args.tensor(residual_out, "residual_out", output=True)
        return ctypes.pointer(o)

    @staticmethod
    def _rows(x, normalized_ndim):
        """The shape of x's rows (its leading dimensions): the shape of allocated mean/rstd."""
        return lambda: _shape_of(x)[:x.ndim - (normalized_ndim or 1)]

    @staticmethod
    def _cols(x, normalized_ndim):
        """The normalized shape of x: the shape of allocated dgamma/dbeta."""
        return lambda: _shape_of(x)[x.ndim - (normalized_ndim or 1):]

    def layer_norm_forward(self, x, gamma=None, beta=None, y=None, *, mean=None, rstd=None,
                           epsilon=1e-5, normalized_ndim=1, zero_centered_gamma=False, residual=None,
                           residual_out=None):
        """LayerNorm over the trailing normalized_ndim dimensions of x (+ residual).

        mean, rstd and residual_out: None (not computed), True (allocated, NumPy inputs only) or
        an output tensor. y may be x or residual (in-place). Returns NormForward(y, mean, rstd,
        residual_out)."""
        rows = self._rows(x, normalized_ndim)
        y = _alloc_like(x, "y") if y is None else y
        mean = _want(mean, x, "mean", rows, "float32")
        rstd = _want(rstd, x, "rstd", rows, "float32")
        residual_out = _want(residual_out, x, "residual_out", None, None)
        args = _Args(self)
        options = self._norm_options(args, epsilon, normalized_ndim, zero_centered_gamma, residual,
                                     residual_out)
        _check(lib.xvk_layer_norm_forward(
            self._h(), args.tensor(x, "x"), args.tensor(gamma, "gamma"), args.tensor(beta, "beta"), options,
            args.tensor(y, "y", output=True), args.tensor(mean, "mean", output=True),
            args.tensor(rstd, "rstd", output=True)))
        return NormForward(y, mean, rstd, residual_out)

    def layer_norm_backward(self, dy, x, mean, rstd, gamma=None, dx=None, *, dgamma=None, dbeta=None,
                            normalized_ndim=1, zero_centered_gamma=False):
        """Gradient of layer_norm_forward from its input x (x + residual if fused) and its saved
        mean and rstd. dgamma, dbeta: None, True (allocated in gamma's dtype, else x's) or an
        output tensor. dx may be dy or x. Returns NormBackward(dx, dgamma, dbeta)."""
        cols = self._cols(x, normalized_ndim)
        dx = _alloc_like(dy, "dx") if dx is None else dx
        param_dtype = gamma.dtype if _np is not None and isinstance(gamma, _np.ndarray) else None
        dgamma = _want(dgamma, x, "dgamma", cols, param_dtype)
        dbeta = _want(dbeta, x, "dbeta", cols, param_dtype)
        args = _Args(self)
        options = self._norm_options(args, 1e-5, normalized_ndim, zero_centered_gamma)
        _check(lib.xvk_layer_norm_backward(
            self._h(), args.tensor(dy, "dy"), args.tensor(x, "x"), args.tensor(gamma, "gamma"),
            args.tensor(mean, "mean"), args.tensor(rstd, "rstd"), options,
            args.tensor(dx, "dx", output=True), args.tensor(dgamma, "dgamma", output=True),
            args.tensor(dbeta, "dbeta", output=True)))
        return NormBackward(dx, dgamma, dbeta)

    def rms_norm_forward(self, x, gamma=None, y=None, *, rstd=None, epsilon=1e-6, normalized_ndim=1,
                         zero_centered_gamma=False, residual=None, residual_out=None):
        """RMSNorm over the trailing normalized_ndim dimensions of x (+ residual). Returns
        NormForward(y, None, rstd, residual_out); see layer_norm_forward."""
        rows = self._rows(x, normalized_ndim)
        y = _alloc_like(x, "y") if y is None else y
        rstd = _want(rstd, x, "rstd", rows, "float32")
        residual_out = _want(residual_out, x, "residual_out", None, None)
        args = _Args(self)
        options = self._norm_options(args, epsilon, normalized_ndim, zero_centered_gamma, residual,
                                     residual_out)
        _check(lib.xvk_rms_norm_forward(
            self._h(), args.tensor(x, "x"), args.tensor(gamma, "gamma"), options,
            args.tensor(y, "y", output=True), args.tensor(rstd, "rstd", output=True)))
        return NormForward(y, None, rstd, residual_out)

    def rms_norm_backward(self, dy, x, rstd, gamma=None, dx=None, *, dgamma=None, normalized_ndim=1,
                          zero_centered_gamma=False):
        """Gradient of rms_norm_forward. Returns NormBackward(dx, dgamma, None)."""
        cols = self._cols(x, normalized_ndim)
        dx = _alloc_like(dy, "dx") if dx is None else dx
        param_dtype = gamma.dtype if _np is not None and isinstance(gamma, _np.ndarray) else None
        dgamma = _want(dgamma, x, "dgamma", cols, param_dtype)
        args = _Args(self)
        options = self._norm_options(args, 1e-6, normalized_ndim, zero_centered_gamma)
        _check(lib.xvk_rms_norm_backward(
            self._h(), args.tensor(dy, "dy"), args.tensor(x, "x"), args.tensor(gamma, "gamma"),
            args.tensor(rstd, "rstd"), options, args.tensor(dx, "dx", output=True),
            args.tensor(dgamma, "dgamma", output=True)))
        return NormBackward(dx, dgamma, None)

    # BatchNorm ----------------------------------------------------------------------------------

    @staticmethod
    def _batch_norm_options(epsilon, momentum, activation, channel_axis):
        o = _native.BatchNormOptions()
        o.struct_size = ctypes.sizeof(o)
        o.epsilon = epsilon
        o.momentum = momentum
        o.activation = int(activation)
        o.channel_axis = int(channel_axis)
        return ctypes.pointer(o)

    @staticmethod
    def _channels(x, channel_axis):
        """The shape of allocated per-channel outputs: (C,). A bad x or channel_axis is left
        for the library to report."""
        def shape():
            dims = _shape_of(x)
            return (dims[channel_axis],) if len(dims) >= 2 and -len(dims) <= channel_axis < len(dims) else (0,)
        return shape

    @staticmethod
    def _mask_words(x):
        return lambda: (batch_norm_mask_words(x),)

    def batch_norm_forward_training(self, x, gamma=None, beta=None, y=None, *, z=None, mask=None,
                                    running_mean=None, running_var=None, saved_mean=None, saved_rstd=None,
                                    epsilon=1e-5, momentum=0.1, activation=Activation.NONE, channel_axis=1):
        """BatchNorm of x with batch statistics: y = activation((x - mean) * rstd * gamma + beta + z).

        Channels are x's dimension channel_axis (1: (N, C, spatial...), -1: (N, spatial..., C)); x
        is dense channels-first or channels-last. gamma, beta (float32, C elements) and z (the
        residual of Add+ReLU) are optional. running_mean and running_var (float32, given together)
        are updated in place with momentum. mask (needs activation=RELU), saved_mean and
        saved_rstd: None (not computed), True (allocated, NumPy inputs only: the mask as uint32
        of batch_norm_mask_words(x) elements) or an output tensor (the mask uint32 or int32).
        y may be x or z (in-place); allocated like x. Returns BatchNormForward(y, mask,
        saved_mean, saved_rstd)."""
        channels = self._channels(x, channel_axis)
        y = _alloc_like(x, "y", same_layout=True) if y is None else y
        mask = _want(mask, x, "mask", self._mask_words(x), "uint32")
        saved_mean = _want(saved_mean, x, "saved_mean", channels, "float32")
        saved_rstd = _want(saved_rstd, x, "saved_rstd", channels, "float32")
        args = _Args(self)
        options = self._batch_norm_options(epsilon, momentum, activation, channel_axis)
        _check(lib.xvk_batch_norm_forward_training(
            self._h(), args.tensor(x, "x"), args.tensor(z, "z"), args.tensor(gamma, "gamma"),
            args.tensor(beta, "beta"), options, args.tensor(y, "y", output=True),
            args.tensor(mask, "mask", output=True), args.tensor(running_mean, "running_mean", output=True),
            args.tensor(running_var, "running_var", output=True),
            args.tensor(saved_mean, "saved_mean", output=True), args.tensor(saved_rstd, "saved_rstd", output=True)))
        return BatchNormForward(y, mask, saved_mean, saved_rstd)

    def batch_norm_forward_inference(self, x, running_mean, running_var, gamma=None, beta=None, y=None, *,
                                     z=None, mask=None, epsilon=1e-5, activation=Activation.NONE, channel_axis=1):
        """BatchNorm of x with the running statistics (mean = running_mean, rstd =
        1 / sqrt(running_var + epsilon)); otherwise as batch_norm_forward_training. Returns
        BatchNormForward(y, mask, None, None)."""
        y = _alloc_like(x, "y", same_layout=True) if y is None else y
        mask = _want(mask, x, "mask", self._mask_words(x), "uint32")
        args = _Args(self)
        options = self._batch_norm_options(epsilon, 0.1, activation, channel_axis)
        _check(lib.xvk_batch_norm_forward_inference(
            self._h(), args.tensor(x, "x"), args.tensor(z, "z"), args.tensor(gamma, "gamma"),
            args.tensor(beta, "beta"), args.tensor(running_mean, "running_mean"),
            args.tensor(running_var, "running_var"), options, args.tensor(y, "y", output=True),
            args.tensor(mask, "mask", output=True)))
        return BatchNormForward(y, mask, None, None)

    def batch_norm_backward(self, dy, x, saved_mean, saved_rstd, gamma=None, dx=None, *, mask=None, y=None,
                            dz=None, dgamma=None, dbeta=None, activation=Activation.NONE, channel_axis=1):
        """Gradient of batch_norm_forward_training from dy, its input x and its saved_mean and
        saved_rstd. With activation=RELU pass exactly one of mask (the forward's) or y (its
        output). dz (the gradient of z: dy where y > 0), dgamma, dbeta: None, True (allocated;
        dgamma and dbeta float32) or an output tensor. dx may be dy or x; allocated like dy.
        Returns BatchNormBackward(dx, dz, dgamma, dbeta)."""
        channels = self._channels(x, channel_axis)
        dx = _alloc_like(dy, "dx", same_layout=True) if dx is None else dx
        dz = _want(dz, dy, "dz", None, None, same_layout=True)
        dgamma = _want(dgamma, x, "dgamma", channels, "float32")
        dbeta = _want(dbeta, x, "dbeta", channels, "float32")
        args = _Args(self)
        options = self._batch_norm_options(1e-5, 0.1, activation, channel_axis)
        _check(lib.xvk_batch_norm_backward(
            self._h(), args.tensor(dy, "dy"), args.tensor(x, "x"), args.tensor(mask, "mask"), args.tensor(y, "y"),
            args.tensor(gamma, "gamma"), args.tensor(saved_mean, "saved_mean"), args.tensor(saved_rstd, "saved_rstd"),
            options, args.tensor(dx, "dx", output=True), args.tensor(dz, "dz", output=True),
            args.tensor(dgamma, "dgamma", output=True), args.tensor(dbeta, "dbeta", output=True)))
        return BatchNormBackward(dx, dz, dgamma, dbeta)


class DeviceArray:
    """Memory from xvk_memory_alloc on a context's device, with a shape and a NumPy dtype.

    For moving NumPy data to a GPU backend without a GPU framework: ctx.to_device(array), run
    operators on it, then .numpy(). On the CPU backend it is host memory. Free it (or let it be
    collected) before closing its context."""

    def __init__(self, ctx, shape, dtype):
        if _np is None:
            raise TypeError("DeviceArray needs NumPy")
        self._ctx = ctx
        self.shape = tuple(int(d) for d in shape)
        self.dtype = _np.dtype(dtype)
        self.nbytes = int(_np.prod(self.shape, dtype=_np.int64)) * self.dtype.itemsize
        self._address = ctx.memory_alloc(self.nbytes)
        self._shape = (ctypes.c_int64 * max(len(self.shape), 1))(*self.shape)
        backend = ctx.backend
        t = _native.DLTensor()
        t.data = self._address or None
        t.device = _native.DLDevice(_DEVICE_TYPE[backend], ctx.device_id)
        t.ndim = len(self.shape)
        t.dtype = _numpy_dl_dtype(self.dtype, "DeviceArray")
        t.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = None
        self._dl = t

    @property
    def address(self):
        return self._address

    def copy_from(self, array):
        """Copies a NumPy array of the same size in, and waits for the copy."""
        a = _np.ascontiguousarray(array, dtype=self.dtype)
        if a.nbytes != self.nbytes:
            raise ValueError("copy_from: %d bytes into a %d-byte DeviceArray" % (a.nbytes, self.nbytes))
        self._ctx.memory_copy(self._address, a.ctypes.data, self.nbytes)
        self._ctx.synchronize()

    def numpy(self):
        """A NumPy copy, after the context's queued work."""
        out = _np.empty(self.shape, self.dtype)
        self._ctx.memory_copy(out.ctypes.data, self._address, self.nbytes)
        self._ctx.synchronize()
        return out

    def free(self):
        if self._address:
            address, self._address = self._address, 0
            self._dl.data = None
            self._ctx.memory_free(address)

    def __del__(self):
        try:
            if getattr(self, "_address", 0) and self._ctx._handle is not None:
                self.free()
        except XvkError:
            pass
