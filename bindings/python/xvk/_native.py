"""ctypes declarations of xvk.h and DLPack 0.6, and the loading of libxvk.

libxvk is found by name through the platform's loader (LD_LIBRARY_PATH, the ld.so cache, ...):
libxvk.so.0 on Linux, libxvk.0.dylib on macOS, xvk.dll on Windows. The environment variable
XVK_LIBRARY, when set, names the library to load instead (a path or a file name).
"""
import ctypes
import os
import sys

# The major version (the SONAME's) this binding was written against; minor versions only add.
ABI_MAJOR = 0
ABI_MIN_MINOR = 1

# DLPack (dlpack/dlpack.h, version 0.6)
kDLCPU = 1
kDLCUDA = 2
kDLCUDAHost = 3
kDLROCM = 10
kDLInt = 0
kDLUInt = 1
kDLFloat = 2
kDLBfloat = 4


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))),
]

DLTensorP = ctypes.POINTER(DLTensor)


# xvk.h options structs (struct_size is set to ctypes.sizeof by the caller)
class SoftmaxOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("mask", DLTensorP),
    ]


class NormOptions(ctypes.Structure):
    """xvk_layer_norm_options and xvk_rms_norm_options (the same layout)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("epsilon", ctypes.c_float),
        ("normalized_ndim", ctypes.c_int32),
        ("zero_centered_gamma", ctypes.c_int32),
        ("residual", DLTensorP),
        ("residual_out", DLTensorP),
    ]


class BatchNormOptions(ctypes.Structure):
    """xvk_batch_norm_options."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("epsilon", ctypes.c_float),
        ("momentum", ctypes.c_float),
        ("activation", ctypes.c_int32),
        ("channel_axis", ctypes.c_int32),
    ]


def _library_names():
    override = os.environ.get("XVK_LIBRARY")
    if override:
        return [override]
    if sys.platform == "darwin":
        return ["libxvk.%d.dylib" % ABI_MAJOR]
    if sys.platform == "win32":
        return ["xvk.dll"]
    return ["libxvk.so.%d" % ABI_MAJOR]


def _load():
    errors = []
    for name in _library_names():
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            errors.append("%s: %s" % (name, e))
    raise OSError(
        "xvk: could not load the xvk library (%s). Put its directory on the loader's search path "
        "(LD_LIBRARY_PATH on Linux) or set XVK_LIBRARY to the library's path." % "; ".join(errors)
    )


lib = _load()

_c_int_p = ctypes.POINTER(ctypes.c_int)
_status = ctypes.c_int
_ctx = ctypes.c_void_p
_PROTOTYPES = {
    "xvk_last_error_message": (ctypes.c_char_p, []),
    "xvk_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "xvk_version": (ctypes.c_uint32, []),
    "xvk_backend_name": (ctypes.c_char_p, [ctypes.c_int]),
    "xvk_backend_query": (_status, [ctypes.c_int, _c_int_p, _c_int_p, ctypes.POINTER(ctypes.c_char_p)]),
    "xvk_context_create": (_status, [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]),
    "xvk_context_set_stream": (_status, [_ctx, ctypes.c_void_p]),
    "xvk_context_synchronize": (_status, [_ctx]),
    "xvk_context_destroy": (_status, [_ctx]),
    "xvk_context_get_device": (_status, [_ctx, _c_int_p, _c_int_p]),
    "xvk_memory_alloc": (_status, [_ctx, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]),
    "xvk_memory_free": (_status, [_ctx, ctypes.c_void_p]),
    "xvk_memory_copy": (_status, [_ctx, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]),
    "xvk_softmax_forward": (_status, [_ctx, DLTensorP, ctypes.POINTER(SoftmaxOptions), DLTensorP]),
    "xvk_log_softmax_forward": (_status, [_ctx, DLTensorP, ctypes.POINTER(SoftmaxOptions), DLTensorP]),
    "xvk_softmax_backward": (_status, [_ctx, DLTensorP, DLTensorP, ctypes.POINTER(SoftmaxOptions), DLTensorP]),
    "xvk_log_softmax_backward": (
        _status, [_ctx, DLTensorP, DLTensorP, ctypes.POINTER(SoftmaxOptions), DLTensorP]),
    "xvk_layer_norm_forward": (
        _status,
        [_ctx, DLTensorP, DLTensorP, DLTensorP, ctypes.POINTER(NormOptions), DLTensorP, DLTensorP, DLTensorP],
    ),
    "xvk_layer_norm_backward": (
        _status,
        [_ctx, DLTensorP, DLTensorP, DLTensorP, DLTensorP, DLTensorP, ctypes.POINTER(NormOptions),
         DLTensorP, DLTensorP, DLTensorP],
    ),
    "xvk_rms_norm_forward": (
        _status, [_ctx, DLTensorP, DLTensorP, ctypes.POINTER(NormOptions), DLTensorP, DLTensorP]),
    "xvk_rms_norm_backward": (
        _status,
        [_ctx, DLTensorP, DLTensorP, DLTensorP, DLTensorP, ctypes.POINTER(NormOptions), DLTensorP, DLTensorP],
    ),
    "xvk_batch_norm_mask_words": (_status, [DLTensorP, ctypes.POINTER(ctypes.c_int64)]),
    "xvk_batch_norm_forward_training": (
        _status,
        [_ctx, DLTensorP, DLTensorP, DLTensorP, DLTensorP, ctypes.POINTER(BatchNormOptions), DLTensorP, DLTensorP,
         DLTensorP, DLTensorP, DLTensorP, DLTensorP],
    ),
    "xvk_batch_norm_forward_inference": (
        _status,
        [_ctx, DLTensorP, DLTensorP, DLTensorP, DLTensorP, DLTensorP, DLTensorP, ctypes.POINTER(BatchNormOptions),
         DLTensorP, DLTensorP],
    ),
    "xvk_batch_norm_backward": (
        _status,
        [_ctx, DLTensorP, DLTensorP, DLTensorP, DLTensorP, DLTensorP, DLTensorP, DLTensorP,
         ctypes.POINTER(BatchNormOptions), DLTensorP, DLTensorP, DLTensorP, DLTensorP],
    ),
}
for _name, (_restype, _argtypes) in _PROTOTYPES.items():
    _f = getattr(lib, _name)
    _f.restype = _restype
    _f.argtypes = _argtypes

_v = lib.xvk_version()
if _v // 10000 != ABI_MAJOR or _v // 100 % 100 < ABI_MIN_MINOR:
    raise ImportError(
        "xvk: the loaded library is version %d.%d.%d; this binding needs %d.%d or a later %d.x"
        % (_v // 10000, _v // 100 % 100, _v % 100, ABI_MAJOR, ABI_MIN_MINOR, ABI_MAJOR)
    )

# Reading a PyCapsule's pointer without consuming it (the capsule keeps its name, so its
# destructor still calls the producer's deleter when the capsule goes away).
_PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def capsule_pointer(capsule, name):
    return _PyCapsule_GetPointer(capsule, name)
