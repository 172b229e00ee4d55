"""
    Xvk

Julia binding of xvk (fused deep-learning kernels behind a stable C ABI), through `ccall`.
UNTESTED: no Julia was available where it was written; see the README.

libxvk is opened by name through the platform loader (`libxvk.so.0` on Linux, found through
`LD_LIBRARY_PATH` or the system's directories), or from the path in `ENV["XVK_LIBRARY"]`.

Julia arrays are column-major, xvk's tensors row-major: an array of size `(d1, ..., dn)` is
passed as the row-major tensor of shape `(dn, ..., d1)`, without copying. So xvk's last
(normalized, softmax) dimension is a Julia array's *first* dimension: a `features × batch`
matrix is normalized per column. For BatchNorm, xvk's `(N, C, spatial...)` is a Julia array of
size `(spatial..., C, N)` (Flux's WHCN, or `features × batch`): the channels are its
second-to-last dimension (`channel_axis = 1`, the default), or its first with `channel_axis = -1`
(xvk's `(N, spatial..., C)`).
"""
module Xvk

using Libdl

export XvkError, Context, BackendInfo, DeviceTensor
export softmax_forward!, log_softmax_forward!, softmax_backward!, log_softmax_backward!
export layer_norm_forward!, layer_norm_backward!, rms_norm_forward!, rms_norm_backward!
export batch_norm_mask_words, batch_norm_forward_training!, batch_norm_forward_inference!, batch_norm_backward!

const ABI_MAJOR = 0

# --- loading ---------------------------------------------------------------------------------

const LIB = Ref{Ptr{Cvoid}}(C_NULL)

function default_library()
    Sys.isapple() && return "libxvk.$(ABI_MAJOR).dylib"
    Sys.iswindows() && return "xvk.dll"
    return "libxvk.so.$(ABI_MAJOR)"
end

function __init__()
    LIB[] = Libdl.dlopen(get(ENV, "XVK_LIBRARY", default_library()))
    v = ccall(sym(:xvk_version), UInt32, ())
    v ÷ 10000 == ABI_MAJOR || error("Xvk: the loaded library is version $v; this binding needs $(ABI_MAJOR).x")
end

sym(name::Symbol) = Libdl.dlsym(LIB[], name)

# --- DLPack 0.6 and xvk.h types ------------------------------------------------------------------

const kDLCPU = Cint(1)
const kDLCUDA = Cint(2)
const kDLROCM = Cint(10)
const kDLInt = UInt8(0)
const kDLUInt = UInt8(1)
const kDLFloat = UInt8(2)
const kDLBfloat = UInt8(4)

struct DLDevice
    device_type::Cint
    device_id::Int32
end

struct DLDataType
    code::UInt8
    bits::UInt8
    lanes::UInt16
end

struct DLTensor
    data::Ptr{Cvoid}
    device::DLDevice
    ndim::Int32
    dtype::DLDataType
    shape::Ptr{Int64}
    strides::Ptr{Int64}
    byte_offset::UInt64
end

struct SoftmaxOptions            # xvk_softmax_options
    struct_size::UInt32
    scale::Float32
    causal::Int32
    mask::Ptr{DLTensor}
end

struct NormOptions               # xvk_layer_norm_options and xvk_rms_norm_options
    struct_size::UInt32
    epsilon::Float32
    normalized_ndim::Int32
    zero_centered_gamma::Int32
    residual::Ptr{DLTensor}
    residual_out::Ptr{DLTensor}
end

struct BatchNormOptions          # xvk_batch_norm_options
    struct_size::UInt32
    epsilon::Float32
    momentum::Float32
    activation::Int32
    channel_axis::Int32
end

"The DLPack dtype of an element type; add methods for other 16-bit types (a BFloat16 type)."
dl_dtype(::Type{Float32}) = DLDataType(kDLFloat, 32, 1)
dl_dtype(::Type{Float16}) = DLDataType(kDLFloat, 16, 1)
# The words of BatchNorm's ReLU mask (Int32 for frameworks without unsigned types).
dl_dtype(::Type{UInt32}) = DLDataType(kDLUInt, 32, 1)
dl_dtype(::Type{Int32}) = DLDataType(kDLInt, 32, 1)

@enum Status::Cint SUCCESS = 0 ERROR_INVALID_ARGUMENT = 1 ERROR_UNSUPPORTED = 2 ERROR_BACKEND_UNAVAILABLE = 3 ERROR_OUT_OF_MEMORY = 4 ERROR_DEVICE = 5 ERROR_INTERNAL = 6
@enum Backend::Cint CPU = 0 CUDA = 1 HIP = 2
@enum Causal::Int32 CAUSAL_NONE = 0 CAUSAL_TOP_LEFT = 1 CAUSAL_BOTTOM_RIGHT = 2
@enum Activation::Int32 ACTIVATION_NONE = 0 ACTIVATION_RELU = 1

# --- errors, library ---------------------------------------------------------------------------

"A failed xvk call: `status` and the library's message (`xvk_last_error_message()`)."
struct XvkError <: Exception
    status::Status
    msg::String
end
Base.showerror(io::IO, e::XvkError) = print(io, "XvkError(", e.status, "): ", e.msg)

last_error_message() = unsafe_string(ccall(sym(:xvk_last_error_message), Cstring, ()))

function check(status::Cint)
    # The message is thread-local in the library; read it right away, on this thread.
    status == 0 || throw(XvkError(Status(status), last_error_message()))
    return nothing
end

"The loaded library's version."
function version()
    v = ccall(sym(:xvk_version), UInt32, ())
    return VersionNumber(v ÷ 10000, v ÷ 100 % 100, v % 100)
end

status_string(s::Status) = unsafe_string(ccall(sym(:xvk_status_string), Cstring, (Cint,), Integer(s)))
backend_name(b::Backend) = unsafe_string(ccall(sym(:xvk_backend_name), Cstring, (Cint,), Integer(b)))

struct BackendInfo
    available::Bool
    device_count::Int
    reason::String
end

"Whether a backend can be used (loading its module on first use), and why not."
function backend_query(b::Backend)
    available, count, reason = Ref{Cint}(0), Ref{Cint}(0), Ref{Ptr{Cchar}}(Ptr{Cchar}(C_NULL))
    check(ccall(sym(:xvk_backend_query), Cint, (Cint, Ref{Cint}, Ref{Cint}, Ref{Ptr{Cchar}}),
                Integer(b), available, count, reason))
    return BackendInfo(available[] != 0, count[], reason[] == C_NULL ? "" : unsafe_string(reason[]))
end

# --- contexts ------------------------------------------------------------------------------------

"An xvk context (backend, device, stream); destroyed by `close` or the finalizer."
mutable struct Context
    ptr::Ptr{Cvoid}
    function Context(backend::Backend = CPU, device_id::Integer = 0)
        out = Ref{Ptr{Cvoid}}(C_NULL)
        check(ccall(sym(:xvk_context_create), Cint, (Cint, Cint, Ref{Ptr{Cvoid}}), Integer(backend), device_id, out))
        ctx = new(out[])
        finalizer(c -> c.ptr == C_NULL || ccall(sym(:xvk_context_destroy), Cint, (Ptr{Cvoid},), c.ptr), ctx)
        return ctx
    end
end

function Base.close(ctx::Context)
    ctx.ptr == C_NULL && return nothing
    p, ctx.ptr = ctx.ptr, C_NULL
    check(ccall(sym(:xvk_context_destroy), Cint, (Ptr{Cvoid},), p))
end

function handle(ctx::Context)
    ctx.ptr == C_NULL && throw(ArgumentError("this Xvk.Context is closed"))
    return ctx.ptr
end

function device(ctx::Context)
    b, d = Ref{Cint}(0), Ref{Cint}(0)
    check(ccall(sym(:xvk_context_get_device), Cint, (Ptr{Cvoid}, Ref{Cint}, Ref{Cint}), handle(ctx), b, d))
    return (Backend(b[]), Int(d[]))
end

"Enqueue on a cudaStream_t / hipStream_t (C_NULL: the default stream)."
set_stream!(ctx::Context, stream::Ptr{Cvoid}) =
    check(ccall(sym(:xvk_context_set_stream), Cint, (Ptr{Cvoid}, Ptr{Cvoid}), handle(ctx), stream))

synchronize(ctx::Context) = check(ccall(sym(:xvk_context_synchronize), Cint, (Ptr{Cvoid},), handle(ctx)))

function memory_alloc(ctx::Context, bytes::Integer)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall(sym(:xvk_memory_alloc), Cint, (Ptr{Cvoid}, Csize_t, Ref{Ptr{Cvoid}}), handle(ctx), bytes, out))
    return out[]
end
memory_free(ctx::Context, p::Ptr{Cvoid}) =
    check(ccall(sym(:xvk_memory_free), Cint, (Ptr{Cvoid}, Ptr{Cvoid}), handle(ctx), p))
memory_copy(ctx::Context, dst::Ptr, src::Ptr, bytes::Integer) =
    check(ccall(sym(:xvk_memory_copy), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Csize_t), handle(ctx), dst, src, bytes))

"""
    DeviceTensor(ptr, T, dims, ctx)

Memory at `ptr` on `ctx`'s device (from `memory_alloc`, or another framework) seen as an array of
element type `T` and Julia dimensions `dims` (column-major, contiguous). It does not own the memory.
"""
struct DeviceTensor{T}
    ptr::Ptr{Cvoid}
    dims::Vector{Int}
    device::DLDevice
end
function DeviceTensor(ptr::Ptr{Cvoid}, ::Type{T}, dims, ctx::Context) where {T}
    b, d = device(ctx)
    type = b == CUDA ? kDLCUDA : b == HIP ? kDLROCM : kDLCPU
    return DeviceTensor{T}(ptr, collect(Int, dims), DLDevice(type, d))
end

# --- tensor arguments ----------------------------------------------------------------------------

# A DLTensor for one call, with everything its pointers point into. Callers GC.@preserve it.
mutable struct Arg
    t::Base.RefValue{DLTensor}
    keep::Any
end

function Arg(a::StridedArray{T}) where {T}
    shape = Int64[reverse(size(a))...]
    strides_ = Int64[reverse(strides(a))...]
    t = DLTensor(Ptr{Cvoid}(pointer(a)), DLDevice(kDLCPU, 0), ndims(a), dl_dtype(T), pointer(shape), pointer(strides_), 0)
    return Arg(Ref(t), (a, shape, strides_))
end
function Arg(a::DeviceTensor{T}) where {T}
    shape = Int64[reverse(a.dims)...]
    t = DLTensor(a.ptr, a.device, length(shape), dl_dtype(T), pointer(shape), Ptr{Int64}(C_NULL), 0)
    return Arg(Ref(t), shape)
end
Arg(::Nothing) = nothing

ptr(a::Arg) = Base.unsafe_convert(Ptr{DLTensor}, a.t)
ptr(::Nothing) = Ptr{DLTensor}(C_NULL)

# --- softmax -------------------------------------------------------------------------------------

function softmax_call(f::Symbol, ctx::Context, out, x; scale = 1, causal::Causal = CAUSAL_NONE, mask = nothing)
    xa, oa, ma = Arg(x), Arg(out), Arg(mask)
    GC.@preserve xa oa ma begin
        o = Ref(SoftmaxOptions(sizeof(SoftmaxOptions), scale, Integer(causal), ptr(ma)))
        check(ccall(sym(f), Cint, (Ptr{Cvoid}, Ptr{DLTensor}, Ref{SoftmaxOptions}, Ptr{DLTensor}),
                    handle(ctx), ptr(xa), o, ptr(oa)))
    end
    return out
end

function softmax_grad_call(f::Symbol, ctx::Context, dx, y, dy; scale = 1)
    ya, dya, dxa = Arg(y), Arg(dy), Arg(dx)
    GC.@preserve ya dya dxa begin
        o = Ref(SoftmaxOptions(sizeof(SoftmaxOptions), scale, 0, Ptr{DLTensor}(C_NULL)))
        check(ccall(sym(f), Cint, (Ptr{Cvoid}, Ptr{DLTensor}, Ptr{DLTensor}, Ref{SoftmaxOptions}, Ptr{DLTensor}),
                    handle(ctx), ptr(ya), ptr(dya), o, ptr(dxa)))
    end
    return dx
end

"`y = softmax(scale * x + mask)` along the first dimension (xvk's last); `y` may be `x`."
softmax_forward!(ctx::Context, y, x; kw...) = softmax_call(:xvk_softmax_forward, ctx, y, x; kw...)
"`y = log_softmax(scale * x + mask)` along the first dimension."
log_softmax_forward!(ctx::Context, y, x; kw...) = softmax_call(:xvk_log_softmax_forward, ctx, y, x; kw...)
"`dx = scale * y .* (dy .- sum(dy .* y))` per column, from the forward's output `y`."
softmax_backward!(ctx::Context, dx, y, dy; kw...) = softmax_grad_call(:xvk_softmax_backward, ctx, dx, y, dy; kw...)
"`dx = scale * (dy .- exp.(y) .* sum(dy))` per column, from the forward's output `y`."
log_softmax_backward!(ctx::Context, dx, y, dy; kw...) =
    softmax_grad_call(:xvk_log_softmax_backward, ctx, dx, y, dy; kw...)

# --- LayerNorm and RMSNorm -------------------------------------------------------------------------

norm_options(eps, nd, zc, res::Union{Arg,Nothing}, res_out::Union{Arg,Nothing}) =
    Ref(NormOptions(sizeof(NormOptions), eps, nd, zc ? 1 : 0, ptr(res), ptr(res_out)))

"""
    layer_norm_forward!(ctx, y, x, gamma=nothing, beta=nothing; mean=nothing, rstd=nothing,
                        epsilon=1f-5, normalized_ndim=1, zero_centered_gamma=false,
                        residual=nothing, residual_out=nothing)

LayerNorm of `x` (+ `residual`) over its first `normalized_ndim` dimensions into `y`; `mean`
and `rstd` (Float32, one per normalized slice) are written when given. Returns `y`.
"""
function layer_norm_forward!(ctx::Context, y, x, gamma = nothing, beta = nothing; mean = nothing, rstd = nothing,
                             epsilon = 1.0f-5, normalized_ndim::Integer = 1, zero_centered_gamma::Bool = false,
                             residual = nothing, residual_out = nothing)
    xa, ya, ga, ba = Arg(x), Arg(y), Arg(gamma), Arg(beta)
    ma, sa, ra, roa = Arg(mean), Arg(rstd), Arg(residual), Arg(residual_out)
    GC.@preserve xa ya ga ba ma sa ra roa begin
        o = norm_options(epsilon, normalized_ndim, zero_centered_gamma, ra, roa)
        check(ccall(sym(:xvk_layer_norm_forward), Cint,
                    (Ptr{Cvoid}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor}, Ref{NormOptions}, Ptr{DLTensor},
                     Ptr{DLTensor}, Ptr{DLTensor}),
                    handle(ctx), ptr(xa), ptr(ga), ptr(ba), o, ptr(ya), ptr(ma), ptr(sa)))
    end
    return y
end

"Gradient of `layer_norm_forward!` from its input `x` and saved `mean`, `rstd`; writes `dx` and, when given, `dgamma`, `dbeta`."
function layer_norm_backward!(ctx::Context, dx, dy, x, mean, rstd, gamma = nothing; dgamma = nothing, dbeta = nothing,
                              normalized_ndim::Integer = 1, zero_centered_gamma::Bool = false)
    dya, xa, ga, ma = Arg(dy), Arg(x), Arg(gamma), Arg(mean)
    sa, dxa, dga, dba = Arg(rstd), Arg(dx), Arg(dgamma), Arg(dbeta)
    GC.@preserve dya xa ga ma sa dxa dga dba begin
        o = norm_options(1.0f-5, normalized_ndim, zero_centered_gamma, nothing, nothing)
        check(ccall(sym(:xvk_layer_norm_backward), Cint,
                    (Ptr{Cvoid}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor},
                     Ref{NormOptions}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor}),
                    handle(ctx), ptr(dya), ptr(xa), ptr(ga), ptr(ma), ptr(sa), o, ptr(dxa), ptr(dga), ptr(dba)))
    end
    return dx
end

"RMSNorm of `x` (+ `residual`) over its first `normalized_ndim` dimensions into `y`. Returns `y`."
function rms_norm_forward!(ctx::Context, y, x, gamma = nothing; rstd = nothing, epsilon = 1.0f-6,
                           normalized_ndim::Integer = 1, zero_centered_gamma::Bool = false, residual = nothing,
                           residual_out = nothing)
    xa, ya, ga, sa, ra, roa = Arg(x), Arg(y), Arg(gamma), Arg(rstd), Arg(residual), Arg(residual_out)
    GC.@preserve xa ya ga sa ra roa begin
        o = norm_options(epsilon, normalized_ndim, zero_centered_gamma, ra, roa)
        check(ccall(sym(:xvk_rms_norm_forward), Cint,
                    (Ptr{Cvoid}, Ptr{DLTensor}, Ptr{DLTensor}, Ref{NormOptions}, Ptr{DLTensor}, Ptr{DLTensor}),
                    handle(ctx), ptr(xa), ptr(ga), o, ptr(ya), ptr(sa)))
    end
    return y
end

"Gradient of `rms_norm_forward!` from its input `x` and saved `rstd`; writes `dx` and, when given, `dgamma`."
function rms_norm_backward!(ctx::Context, dx, dy, x, rstd, gamma = nothing; dgamma = nothing,
                            normalized_ndim::Integer = 1, zero_centered_gamma::Bool = false)
    dya, xa, ga, sa, dxa, dga = Arg(dy), Arg(x), Arg(gamma), Arg(rstd), Arg(dx), Arg(dgamma)
    GC.@preserve dya xa ga sa dxa dga begin
        o = norm_options(1.0f-6, normalized_ndim, zero_centered_gamma, nothing, nothing)
        check(ccall(sym(:xvk_rms_norm_backward), Cint,
                    (Ptr{Cvoid}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor}, Ref{NormOptions},
                     Ptr{DLTensor}, Ptr{DLTensor}),
                    handle(ctx), ptr(dya), ptr(xa), ptr(ga), ptr(sa), o, ptr(dxa), ptr(dga)))
    end
    return dx
end

# --- BatchNorm -------------------------------------------------------------------------------------

"""
    batch_norm_mask_words(x)

The number of `UInt32` words of BatchNorm's ReLU mask for an array shaped like `x` (or of size
`x`, a tuple of dimensions): `cld(length, 32)`. Bit `i` (0-based: bit `i % 32` of word `i ÷ 32 + 1`)
is element `i + 1` of `y` in memory order, i.e. `y[i + 1]` for an `Array`.
"""
function batch_norm_mask_words(dims::Tuple)
    shape = Int64[reverse(dims)...]
    words = Ref{Int64}(0)
    GC.@preserve shape begin
        t = Ref(DLTensor(C_NULL, DLDevice(kDLCPU, 0), length(shape), dl_dtype(Float32), pointer(shape),
                         Ptr{Int64}(C_NULL), 0))
        check(ccall(sym(:xvk_batch_norm_mask_words), Cint, (Ref{DLTensor}, Ref{Int64}), t, words))
    end
    return Int(words[])
end
batch_norm_mask_words(x::AbstractArray) = batch_norm_mask_words(size(x))
batch_norm_mask_words(x::DeviceTensor) = batch_norm_mask_words(Tuple(x.dims))

batch_norm_options(epsilon, momentum, activation::Activation, channel_axis) =
    Ref(BatchNormOptions(sizeof(BatchNormOptions), epsilon, momentum, Integer(activation), channel_axis))

"""
    batch_norm_forward_training!(ctx, y, x, gamma=nothing, beta=nothing; z=nothing, mask=nothing,
                                 running_mean=nothing, running_var=nothing, saved_mean=nothing,
                                 saved_rstd=nothing, epsilon=1f-5, momentum=0.1f0,
                                 activation=Xvk.ACTIVATION_NONE, channel_axis=1)

BatchNorm of `x` with its batch statistics, per channel (see the module's help for which
dimension that is): `y = activation((x - mean) * rstd * gamma + beta + z)`. `gamma`, `beta`,
`running_*`, `saved_*` are `Float32` vectors of one element per channel; `mask` (needs
`activation = ACTIVATION_RELU`) is a `Vector{UInt32}` of `batch_norm_mask_words(x)` elements.
`mask`, `saved_mean` and `saved_rstd` are written when given; `running_mean` and `running_var`
(given together) are updated in place with `momentum`. `y` may be `x` or `z`. Returns `y`.
"""
function batch_norm_forward_training!(ctx::Context, y, x, gamma = nothing, beta = nothing; z = nothing,
                                      mask = nothing, running_mean = nothing, running_var = nothing,
                                      saved_mean = nothing, saved_rstd = nothing, epsilon = 1.0f-5, momentum = 0.1f0,
                                      activation::Activation = ACTIVATION_NONE, channel_axis::Integer = 1)
    xa, za, ga, ba, ya, ma = Arg(x), Arg(z), Arg(gamma), Arg(beta), Arg(y), Arg(mask)
    rma, rva, sma, ssa = Arg(running_mean), Arg(running_var), Arg(saved_mean), Arg(saved_rstd)
    GC.@preserve xa za ga ba ya ma rma rva sma ssa begin
        o = batch_norm_options(epsilon, momentum, activation, channel_axis)
        check(ccall(sym(:xvk_batch_norm_forward_training), Cint,
                    (Ptr{Cvoid}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor}, Ref{BatchNormOptions},
                     Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor}),
                    handle(ctx), ptr(xa), ptr(za), ptr(ga), ptr(ba), o, ptr(ya), ptr(ma), ptr(rma), ptr(rva),
                    ptr(sma), ptr(ssa)))
    end
    return y
end

"""
    batch_norm_forward_inference!(ctx, y, x, running_mean, running_var, gamma=nothing, beta=nothing;
                                  z=nothing, mask=nothing, epsilon=1f-5,
                                  activation=Xvk.ACTIVATION_NONE, channel_axis=1)

BatchNorm of `x` with the running statistics (`mean = running_mean`,
`rstd = 1 / sqrt(running_var + epsilon)`); otherwise as `batch_norm_forward_training!`. Returns `y`.
"""
function batch_norm_forward_inference!(ctx::Context, y, x, running_mean, running_var, gamma = nothing,
                                       beta = nothing; z = nothing, mask = nothing, epsilon = 1.0f-5,
                                       activation::Activation = ACTIVATION_NONE, channel_axis::Integer = 1)
    xa, za, ga, ba, ya, ma = Arg(x), Arg(z), Arg(gamma), Arg(beta), Arg(y), Arg(mask)
    rma, rva = Arg(running_mean), Arg(running_var)
    GC.@preserve xa za ga ba ya ma rma rva begin
        o = batch_norm_options(epsilon, 0.1f0, activation, channel_axis)
        check(ccall(sym(:xvk_batch_norm_forward_inference), Cint,
                    (Ptr{Cvoid}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor},
                     Ptr{DLTensor}, Ref{BatchNormOptions}, Ptr{DLTensor}, Ptr{DLTensor}),
                    handle(ctx), ptr(xa), ptr(za), ptr(ga), ptr(ba), ptr(rma), ptr(rva), o, ptr(ya), ptr(ma)))
    end
    return y
end

"""
    batch_norm_backward!(ctx, dx, dy, x, saved_mean, saved_rstd, gamma=nothing; mask=nothing,
                         y=nothing, dz=nothing, dgamma=nothing, dbeta=nothing,
                         activation=Xvk.ACTIVATION_NONE, channel_axis=1)

Gradient of `batch_norm_forward_training!` from `dy`, its input `x` and its `saved_mean` and
`saved_rstd`. With `activation = ACTIVATION_RELU` pass exactly one of `mask` (the forward's) or
`y` (its output). Writes `dx` and, when given, `dz` (`dy` where `y > 0`: the gradient of `z`),
`dgamma` and `dbeta`. Returns `dx`.
"""
function batch_norm_backward!(ctx::Context, dx, dy, x, saved_mean, saved_rstd, gamma = nothing; mask = nothing,
                              y = nothing, dz = nothing, dgamma = nothing, dbeta = nothing,
                              activation::Activation = ACTIVATION_NONE, channel_axis::Integer = 1)
    dya, xa, ma, ya, ga = Arg(dy), Arg(x), Arg(mask), Arg(y), Arg(gamma)
    sma, ssa, dxa, dza, dga, dba = Arg(saved_mean), Arg(saved_rstd), Arg(dx), Arg(dz), Arg(dgamma), Arg(dbeta)
    GC.@preserve dya xa ma ya ga sma ssa dxa dza dga dba begin
        o = batch_norm_options(1.0f-5, 0.1f0, activation, channel_axis)
        check(ccall(sym(:xvk_batch_norm_backward), Cint,
                    (Ptr{Cvoid}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor},
                     Ptr{DLTensor}, Ptr{DLTensor}, Ref{BatchNormOptions}, Ptr{DLTensor}, Ptr{DLTensor},
                     Ptr{DLTensor}, Ptr{DLTensor}),
                    handle(ctx), ptr(dya), ptr(xa), ptr(ma), ptr(ya), ptr(ga), ptr(sma), ptr(ssa), o, ptr(dxa),
                    ptr(dza), ptr(dga), ptr(dba)))
    end
    return dx
end

end # module
