// The safe layer of the C# binding of xvk: a Context (its native handle a SafeHandle), Tensors
// over pinned arrays or device pointers, option classes, and XvkException carrying
// xvk_last_error_message(). Every operator runs in the library.
using System;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using Microsoft.Win32.SafeHandles;

namespace Xvk
{
    public enum Status
    {
        Success = 0,
        InvalidArgument = 1,
        Unsupported = 2,
        BackendUnavailable = 3,
        OutOfMemory = 4,
        Device = 5,
        Internal = 6,
    }

    public enum Backend { Cpu = 0, Cuda = 1, Hip = 2 }

    public enum Causal
    {
        None = 0,
        TopLeft = 1,     // row i keeps columns j <= i (PyTorch's is_causal)
        BottomRight = 2, // row i keeps columns j <= i + (cols - rows): the KV-cache convention
    }

    // The activation BatchNorm applies after its (optional) add.
    public enum Activation
    {
        None = 0,
        Relu = 1, // max(v, 0); NaN stays NaN
    }

    // float16 and bfloat16 elements are held as ushort bit patterns on the C# side. UInt32 is the
    // dtype of BatchNorm's ReLU mask words, not an element type of the operators.
    public enum DType { Float32, Float16, BFloat16, UInt32 }

    /// <summary>A failed xvk call: Message is the library's message, Status its status.</summary>
    public class XvkException : Exception
    {
        public Status Status { get; private set; }

        public XvkException(Status status, string message) : base(message)
        {
            Status = status;
        }

        internal static void Check(Status status)
        {
            if (status != Status.Success)
                // The message is thread-local in the library; P/Invoke calls it on this same thread.
                throw new XvkException(status, Marshal.PtrToStringAnsi(Native.xvk_last_error_message()));
        }
    }

    public sealed class BackendInfo
    {
        public bool Available { get; internal set; }
        public int DeviceCount { get; internal set; }
        public string Reason { get; internal set; } // why the backend is (not) usable
    }

    public static class Library
    {
        // Each entry point of the binding (these and the Context constructor) loads XVK_LIBRARY
        // first, then calls a separate, non-inlined method: Mono binds a method's P/Invokes when it
        // compiles that method, which must happen after the library is loaded.

        /// <summary>The loaded library's version (major, minor, build = patch).</summary>
        public static Version Version
        {
            get
            {
                Native.EnsureLoaded();
                return GetVersion();
            }
        }

        public static string StatusString(Status status)
        {
            Native.EnsureLoaded();
            return GetStatusString(status);
        }

        public static string BackendName(Backend backend)
        {
            Native.EnsureLoaded();
            return GetBackendName(backend);
        }

        /// <summary>This thread's last failure message ("" if none).</summary>
        public static string LastErrorMessage
        {
            get
            {
                Native.EnsureLoaded();
                return GetLastErrorMessage();
            }
        }

        /// <summary>Whether a backend can be used (loading its module on first use), and why not.</summary>
        public static BackendInfo QueryBackend(Backend backend)
        {
            Native.EnsureLoaded();
            return Query(backend);
        }

        /// <summary>The number of uint words of BatchNorm's ReLU mask for a tensor of this shape:
        /// ceil(elements / 32). Bit i (bit i % 32 of word i / 32) is element i of y, in x's memory order.</summary>
        public static long BatchNormMaskWords(params long[] shape)
        {
            Native.EnsureLoaded();
            return MaskWords(shape);
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static Version GetVersion()
        {
            uint v = Native.xvk_version();
            return new Version((int)(v / 10000), (int)(v / 100 % 100), (int)(v % 100));
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static string GetStatusString(Status status) { return Marshal.PtrToStringAnsi(Native.xvk_status_string(status)); }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static string GetBackendName(Backend backend) { return Marshal.PtrToStringAnsi(Native.xvk_backend_name(backend)); }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static string GetLastErrorMessage() { return Marshal.PtrToStringAnsi(Native.xvk_last_error_message()); }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static long MaskWords(long[] shape)
        {
            GCHandle pin = GCHandle.Alloc(shape, GCHandleType.Pinned);
            try
            {
                var x = new DLTensor
                {
                    Device = new DLDevice { DeviceType = Native.kDLCPU, DeviceId = 0 },
                    Ndim = shape.Length,
                    DType = new DLDataType { Code = Native.kDLFloat, Bits = 32, Lanes = 1 },
                    Shape = pin.AddrOfPinnedObject(),
                };
                long words;
                XvkException.Check(Native.xvk_batch_norm_mask_words(ref x, out words));
                return words;
            }
            finally
            {
                pin.Free();
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static BackendInfo Query(Backend backend)
        {
            int available, count;
            IntPtr reason;
            XvkException.Check(Native.xvk_backend_query(backend, out available, out count, out reason));
            return new BackendInfo { Available = available != 0, DeviceCount = count, Reason = Marshal.PtrToStringAnsi(reason) };
        }
    }

    /// <summary>The native xvk_context*; destroying it waits for its work.</summary>
    public sealed class ContextHandle : SafeHandleZeroOrMinusOneIsInvalid
    {
        public ContextHandle() : base(true) { }

        protected override bool ReleaseHandle()
        {
            return Native.xvk_context_destroy(handle) == Status.Success;
        }
    }

    /// <summary>
    /// A DLTensor: a pinned managed array (row-major, with a shape) or memory at a pointer (device
    /// memory from xvk_memory_alloc or another framework). Dispose it to unpin the array.
    /// </summary>
    public sealed class Tensor : IDisposable
    {
        GCHandle pin;
        IntPtr block; // the DLTensor, then its shape and strides
        public long[] Shape { get; private set; }
        public DType DType { get; private set; }

        Tensor(IntPtr data, DType dtype, int deviceType, int deviceId, long[] shape, long[] strides)
        {
            Shape = (long[])shape.Clone();
            DType = dtype;
            int header = Marshal.SizeOf(typeof(DLTensor));
            int dims = shape.Length * 8;
            block = Marshal.AllocHGlobal(header + 2 * dims + 8);
            IntPtr shapePtr = block + header, stridesPtr = block + header + dims;
            if (shape.Length > 0)
                Marshal.Copy(shape, 0, shapePtr, shape.Length);
            if (strides != null && strides.Length > 0)
                Marshal.Copy(strides, 0, stridesPtr, strides.Length);
            var t = new DLTensor
            {
                Data = data,
                Device = new DLDevice { DeviceType = deviceType, DeviceId = deviceId },
                Ndim = shape.Length,
                DType = new DLDataType
                {
                    Code = dtype == DType.BFloat16 ? Native.kDLBfloat : dtype == DType.UInt32 ? Native.kDLUInt : Native.kDLFloat,
                    Bits = (byte)(dtype == DType.Float32 || dtype == DType.UInt32 ? 32 : 16),
                    Lanes = 1,
                },
                Shape = shapePtr,
                Strides = strides == null ? IntPtr.Zero : stridesPtr,
                ByteOffset = 0,
            };
            Marshal.StructureToPtr(t, block, false);
        }

        static long Count(long[] shape)
        {
            long n = 1;
            foreach (long d in shape)
            {
                if (d < 0)
                    throw new ArgumentException("negative dimension in shape");
                n = checked(n * d);
            }
            return n;
        }

        static Tensor Pinned(Array data, DType dtype, long[] shape)
        {
            if (Count(shape) != data.LongLength)
                throw new ArgumentException(string.Format("shape [{0}] has {1} elements but the array has {2}",
                                                          string.Join(", ", shape), Count(shape), data.LongLength));
            GCHandle pin = GCHandle.Alloc(data, GCHandleType.Pinned);
            var t = new Tensor(pin.AddrOfPinnedObject(), dtype, Native.kDLCPU, 0, shape, null);
            t.pin = pin;
            return t;
        }

        /// <summary>A float32 CPU tensor of this shape over the whole array.</summary>
        public static Tensor FromArray(float[] data, params long[] shape)
        {
            return Pinned(data, DType.Float32, shape);
        }

        /// <summary>A float16 or bfloat16 CPU tensor over an array of bit patterns.</summary>
        public static Tensor FromBits(ushort[] data, DType dtype, params long[] shape)
        {
            if (dtype != DType.Float16 && dtype != DType.BFloat16)
                throw new ArgumentException("ushort bit patterns are Float16 or BFloat16");
            return Pinned(data, dtype, shape);
        }

        /// <summary>A uint32 CPU tensor: the words of a BatchNorm ReLU mask (Library.BatchNormMaskWords).</summary>
        public static Tensor FromArray(uint[] data, params long[] shape)
        {
            return Pinned(data, DType.UInt32, shape);
        }

        /// <summary>Memory at a pointer on a context's device; strides in elements (null: contiguous).
        /// The memory must stay valid while the tensor is used.</summary>
        public static Tensor FromPointer(IntPtr data, DType dtype, Context ctx, long[] shape, long[] strides = null)
        {
            int type = ctx.Backend == Backend.Cuda ? Native.kDLCUDA : ctx.Backend == Backend.Hip ? Native.kDLROCM : Native.kDLCPU;
            return new Tensor(data, dtype, type, ctx.DeviceId, shape, strides);
        }

        internal IntPtr Handle
        {
            get
            {
                if (block == IntPtr.Zero)
                    throw new ObjectDisposedException("Tensor");
                return block;
            }
        }

        internal static IntPtr Of(Tensor t)
        {
            return t == null ? IntPtr.Zero : t.Handle;
        }

        public void Dispose()
        {
            Release();
            GC.SuppressFinalize(this);
        }

        ~Tensor()
        {
            Release();
        }

        void Release()
        {
            if (block != IntPtr.Zero)
            {
                Marshal.FreeHGlobal(block);
                block = IntPtr.Zero;
            }
            if (pin.IsAllocated)
                pin.Free();
        }
    }

    /// <summary>xvk_softmax_options. The backward passes use Scale only.</summary>
    public sealed class SoftmaxOptions
    {
        public float Scale = 1.0f;
        public Causal Causal = Causal.None;
        public Tensor Mask; // additive, x's dtype, broadcast to x; -inf masks an element out

        internal xvk_softmax_options ToNative()
        {
            return new xvk_softmax_options
            {
                StructSize = (uint)Marshal.SizeOf(typeof(xvk_softmax_options)),
                Scale = Scale,
                Causal = (int)Causal,
                Mask = Tensor.Of(Mask),
            };
        }
    }

    /// <summary>xvk_layer_norm_options (Residual and ResidualOut are for the forward only).</summary>
    public class LayerNormOptions
    {
        public float Epsilon = 1e-5f;
        public int NormalizedNdim = 1; // trailing dimensions normalized over
        public bool ZeroCenteredGamma; // scale by 1 + gamma
        public Tensor Residual;        // normalize x + residual
        public Tensor ResidualOut;     // also write x + residual here

        internal xvk_norm_options ToNative()
        {
            return new xvk_norm_options
            {
                StructSize = (uint)Marshal.SizeOf(typeof(xvk_norm_options)),
                Epsilon = Epsilon,
                NormalizedNdim = NormalizedNdim,
                ZeroCenteredGamma = ZeroCenteredGamma ? 1 : 0,
                Residual = Tensor.Of(Residual),
                ResidualOut = Tensor.Of(ResidualOut),
            };
        }
    }

    /// <summary>xvk_rms_norm_options: as LayerNormOptions, with epsilon 1e-6 by default.</summary>
    public sealed class RmsNormOptions : LayerNormOptions
    {
        public RmsNormOptions()
        {
            Epsilon = 1e-6f;
        }
    }

    /// <summary>xvk_batch_norm_options. The backward uses Activation and ChannelAxis only.</summary>
    public sealed class BatchNormOptions
    {
        public float Epsilon = 1e-5f;
        public float Momentum = 0.1f;                 // running = (1 - momentum) * running + momentum * batch
        public Activation Activation = Activation.None; // applied after the optional add of z
        public int ChannelAxis = 1;                   // 1: (N, C, spatial...); -1: (N, spatial..., C)

        internal xvk_batch_norm_options ToNative()
        {
            return new xvk_batch_norm_options
            {
                StructSize = (uint)Marshal.SizeOf(typeof(xvk_batch_norm_options)),
                Epsilon = Epsilon,
                Momentum = Momentum,
                Activation = (int)Activation,
                ChannelAxis = ChannelAxis,
            };
        }
    }

    /// <summary>An xvk context: a backend, a device and a stream. Use from one thread at a time.</summary>
    public sealed class Context : IDisposable
    {
        readonly ContextHandle handle;

        public Context(Backend backend = Backend.Cpu, int deviceId = 0)
        {
            Native.EnsureLoaded(); // before compiling a method that calls into the library (see Library)
            handle = Create(backend, deviceId);
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static ContextHandle Create(Backend backend, int deviceId)
        {
            ContextHandle h;
            XvkException.Check(Native.xvk_context_create(backend, deviceId, out h));
            return h;
        }

        public ContextHandle Handle { get { return handle; } }

        public Backend Backend
        {
            get
            {
                Backend b;
                int d;
                XvkException.Check(Native.xvk_context_get_device(handle, out b, out d));
                return b;
            }
        }

        public int DeviceId
        {
            get
            {
                Backend b;
                int d;
                XvkException.Check(Native.xvk_context_get_device(handle, out b, out d));
                return d;
            }
        }

        /// <summary>Enqueue on this cudaStream_t / hipStream_t (IntPtr.Zero: the default stream).</summary>
        public void SetStream(IntPtr stream) { XvkException.Check(Native.xvk_context_set_stream(handle, stream)); }

        public void Synchronize() { XvkException.Check(Native.xvk_context_synchronize(handle)); }

        /// <summary>Memory on the context's device (host memory on the CPU backend).</summary>
        public IntPtr MemoryAlloc(long bytes)
        {
            IntPtr p;
            XvkException.Check(Native.xvk_memory_alloc(handle, new UIntPtr((ulong)bytes), out p));
            return p;
        }

        public void MemoryFree(IntPtr ptr) { XvkException.Check(Native.xvk_memory_free(handle, ptr)); }

        /// <summary>Copies between host memory and the context's device, ordered on its stream.</summary>
        public void MemoryCopy(IntPtr dst, IntPtr src, long bytes)
        {
            XvkException.Check(Native.xvk_memory_copy(handle, dst, src, new UIntPtr((ulong)bytes)));
        }

        static SoftmaxOptions Or(SoftmaxOptions o) { return o ?? new SoftmaxOptions(); }

        // Checks a call's status. The tensors (and options holding tensors) are passed here, after
        // the call, so that the collector cannot finalize them while the library uses them.
        static void Done(Status status, params object[] alive)
        {
            GC.KeepAlive(alive);
            XvkException.Check(status);
        }

        /// <summary>y = softmax(scale * x + mask) over the last dimension.</summary>
        public void SoftmaxForward(Tensor x, Tensor y, SoftmaxOptions options = null)
        {
            var o = Or(options).ToNative();
            Done(Native.xvk_softmax_forward(handle, x.Handle, ref o, y.Handle), x, y, options);
        }

        /// <summary>y = log_softmax(scale * x + mask) over the last dimension.</summary>
        public void LogSoftmaxForward(Tensor x, Tensor y, SoftmaxOptions options = null)
        {
            var o = Or(options).ToNative();
            Done(Native.xvk_log_softmax_forward(handle, x.Handle, ref o, y.Handle), x, y, options);
        }

        /// <summary>dx = scale * y * (dy - sum(dy * y)) from the forward's output y.</summary>
        public void SoftmaxBackward(Tensor y, Tensor dy, Tensor dx, SoftmaxOptions options = null)
        {
            var o = Or(options).ToNative();
            Done(Native.xvk_softmax_backward(handle, y.Handle, dy.Handle, ref o, dx.Handle), y, dy, dx, options);
        }

        /// <summary>dx = scale * (dy - exp(y) * sum(dy)) from the forward's output y.</summary>
        public void LogSoftmaxBackward(Tensor y, Tensor dy, Tensor dx, SoftmaxOptions options = null)
        {
            var o = Or(options).ToNative();
            Done(Native.xvk_log_softmax_backward(handle, y.Handle, dy.Handle, ref o, dx.Handle), y, dy, dx, options);
        }

        /// <summary>LayerNorm of x (+ residual) over its trailing NormalizedNdim dimensions; gamma,
        /// beta, mean and rstd may be null.</summary>
        public void LayerNormForward(Tensor x, Tensor gamma, Tensor beta, Tensor y, Tensor mean = null,
                                     Tensor rstd = null, LayerNormOptions options = null)
        {
            var o = (options ?? new LayerNormOptions()).ToNative();
            Done(Native.xvk_layer_norm_forward(handle, x.Handle, Tensor.Of(gamma), Tensor.Of(beta), ref o, y.Handle,
                                               Tensor.Of(mean), Tensor.Of(rstd)),
                 x, gamma, beta, y, mean, rstd, options);
        }

        /// <summary>Gradient of LayerNormForward from its input x and saved mean and rstd.</summary>
        public void LayerNormBackward(Tensor dy, Tensor x, Tensor gamma, Tensor mean, Tensor rstd, Tensor dx,
                                      Tensor dgamma = null, Tensor dbeta = null, LayerNormOptions options = null)
        {
            var o = (options ?? new LayerNormOptions()).ToNative();
            Done(Native.xvk_layer_norm_backward(handle, dy.Handle, x.Handle, Tensor.Of(gamma), Tensor.Of(mean),
                                                Tensor.Of(rstd), ref o, dx.Handle, Tensor.Of(dgamma), Tensor.Of(dbeta)),
                 dy, x, gamma, mean, rstd, dx, dgamma, dbeta, options);
        }

        /// <summary>RMSNorm of x (+ residual) over its trailing NormalizedNdim dimensions.</summary>
        public void RmsNormForward(Tensor x, Tensor gamma, Tensor y, Tensor rstd = null, RmsNormOptions options = null)
        {
            var o = (options ?? new RmsNormOptions()).ToNative();
            Done(Native.xvk_rms_norm_forward(handle, x.Handle, Tensor.Of(gamma), ref o, y.Handle, Tensor.Of(rstd)),
                 x, gamma, y, rstd, options);
        }

        /// <summary>Gradient of RmsNormForward from its input x and saved rstd.</summary>
        public void RmsNormBackward(Tensor dy, Tensor x, Tensor gamma, Tensor rstd, Tensor dx, Tensor dgamma = null,
                                    RmsNormOptions options = null)
        {
            var o = (options ?? new RmsNormOptions()).ToNative();
            Done(Native.xvk_rms_norm_backward(handle, dy.Handle, x.Handle, Tensor.Of(gamma), Tensor.Of(rstd), ref o,
                                              dx.Handle, Tensor.Of(dgamma)),
                 dy, x, gamma, rstd, dx, dgamma, options);
        }

        /// <summary>BatchNorm of x with its batch statistics, per channel:
        /// y = activation((x - mean) * rstd * gamma + beta + z). z, gamma and beta may be null; mask (with
        /// Activation.Relu; Library.BatchNormMaskWords uint words), savedMean and savedRstd are written when
        /// given; runningMean and runningVar (given together) are updated in place. Parameters and
        /// statistics are float32 with C elements.</summary>
        public void BatchNormForwardTraining(Tensor x, Tensor z, Tensor gamma, Tensor beta, Tensor y, Tensor mask = null,
                                             Tensor runningMean = null, Tensor runningVar = null, Tensor savedMean = null,
                                             Tensor savedRstd = null, BatchNormOptions options = null)
        {
            var o = (options ?? new BatchNormOptions()).ToNative();
            Done(Native.xvk_batch_norm_forward_training(handle, x.Handle, Tensor.Of(z), Tensor.Of(gamma), Tensor.Of(beta),
                                                        ref o, y.Handle, Tensor.Of(mask), Tensor.Of(runningMean),
                                                        Tensor.Of(runningVar), Tensor.Of(savedMean), Tensor.Of(savedRstd)),
                 x, z, gamma, beta, y, mask, runningMean, runningVar, savedMean, savedRstd);
        }

        /// <summary>BatchNorm of x with the running statistics (mean = runningMean, rstd =
        /// 1 / sqrt(runningVar + epsilon)); otherwise as BatchNormForwardTraining.</summary>
        public void BatchNormForwardInference(Tensor x, Tensor z, Tensor gamma, Tensor beta, Tensor runningMean,
                                              Tensor runningVar, Tensor y, Tensor mask = null, BatchNormOptions options = null)
        {
            var o = (options ?? new BatchNormOptions()).ToNative();
            Done(Native.xvk_batch_norm_forward_inference(handle, x.Handle, Tensor.Of(z), Tensor.Of(gamma), Tensor.Of(beta),
                                                         runningMean.Handle, runningVar.Handle, ref o, y.Handle,
                                                         Tensor.Of(mask)),
                 x, z, gamma, beta, runningMean, runningVar, y, mask);
        }

        /// <summary>Gradient of BatchNormForwardTraining from dy, its input x and its saved mean and rstd.
        /// With Activation.Relu pass exactly one of mask (the forward's) or y (its output), the other null.
        /// Writes dx and, when given, dz (dy where y > 0: the gradient of z), dgamma and dbeta.</summary>
        public void BatchNormBackward(Tensor dy, Tensor x, Tensor mask, Tensor y, Tensor gamma, Tensor savedMean,
                                      Tensor savedRstd, Tensor dx, Tensor dz = null, Tensor dgamma = null,
                                      Tensor dbeta = null, BatchNormOptions options = null)
        {
            var o = (options ?? new BatchNormOptions()).ToNative();
            Done(Native.xvk_batch_norm_backward(handle, dy.Handle, x.Handle, Tensor.Of(mask), Tensor.Of(y), Tensor.Of(gamma),
                                                savedMean.Handle, savedRstd.Handle, ref o, dx.Handle, Tensor.Of(dz),
                                                Tensor.Of(dgamma), Tensor.Of(dbeta)),
                 dy, x, mask, y, gamma, savedMean, savedRstd, dx, dz, dgamma, dbeta);
        }

        /// <summary>Waits for the context's work, then destroys it.</summary>
        public void Dispose() { handle.Dispose(); }
    }
}
