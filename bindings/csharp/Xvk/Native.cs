// The raw layer: P/Invoke declarations of include/xvk/xvk.h and the DLPack 0.6 structs it uses.
//
// The library is imported by the name "xvk": Mono maps it to libxvk.so.0 through Xvk.dll.config
// (next to Xvk.dll), .NET probes libxvk.so; either way the platform loader searches
// LD_LIBRARY_PATH and the system's directories. XVK_LIBRARY, when set, names a file that is
// loaded first (RTLD_GLOBAL), which the lookup by name then finds through its SONAME. See
// EnsureLoaded.
using System;
using System.Runtime.InteropServices;

namespace Xvk
{
    [StructLayout(LayoutKind.Sequential)]
    internal struct DLDevice
    {
        public int DeviceType;
        public int DeviceId;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct DLDataType
    {
        public byte Code;
        public byte Bits;
        public ushort Lanes;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct DLTensor
    {
        public IntPtr Data;
        public DLDevice Device;
        public int Ndim;
        public DLDataType DType;
        public IntPtr Shape;   // int64_t*
        public IntPtr Strides; // int64_t*, NULL for contiguous
        public ulong ByteOffset;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct xvk_softmax_options
    {
        public uint StructSize;
        public float Scale;
        public int Causal;
        public IntPtr Mask;
    }

    // xvk_layer_norm_options and xvk_rms_norm_options share this layout.
    [StructLayout(LayoutKind.Sequential)]
    internal struct xvk_norm_options
    {
        public uint StructSize;
        public float Epsilon;
        public int NormalizedNdim;
        public int ZeroCenteredGamma;
        public IntPtr Residual;
        public IntPtr ResidualOut;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct xvk_batch_norm_options
    {
        public uint StructSize;
        public float Epsilon;
        public float Momentum;
        public int Activation;
        public int ChannelAxis;
    }

    internal static class Native
    {
        const string Lib = "xvk";

        internal const int kDLCPU = 1, kDLCUDA = 2, kDLROCM = 10;
        internal const byte kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4;

        [DllImport("libdl.so.2", EntryPoint = "dlopen")]
        static extern IntPtr dlopen(string file, int mode);
        [DllImport("libdl.so.2", EntryPoint = "dlerror")]
        static extern IntPtr dlerror();

        static bool preloaded;

        // Opens libxvk (XVK_LIBRARY if set, else libxvk.so.0 through the loader's search) before the
        // first call into it, with RTLD_GLOBAL, so that the lookup by name finds it through its
        // SONAME, and RTLD_NODELETE: Mono unloads native libraries at exit, and unloading libxvk
        // also unloads libgomp under its still running worker threads, which crashes the process.
        // This method must not call into libxvk itself (see Library in Xvk.cs).
        internal static void EnsureLoaded()
        {
            if (preloaded)
                return;
            preloaded = true;
            string path = Environment.GetEnvironmentVariable("XVK_LIBRARY");
            bool explicitPath = !string.IsNullOrEmpty(path);
            if (!explicitPath)
                path = "libxvk.so.0";
            if (Environment.OSVersion.Platform != PlatformID.Unix)
                return;
            const int RTLD_NOW = 2, RTLD_GLOBAL = 0x100, RTLD_NODELETE = 0x1000; // glibc's values
            try
            {
                if (dlopen(path, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE) == IntPtr.Zero && explicitPath)
                    throw new DllNotFoundException("XVK_LIBRARY=" + path + ": " + Marshal.PtrToStringAnsi(dlerror()));
            }
            catch (DllNotFoundException) when (!explicitPath)
            {
                // no libdl.so.2 (not glibc): leave the loading to DllImport
            }
        }

        [DllImport(Lib)] internal static extern IntPtr xvk_last_error_message();
        [DllImport(Lib)] internal static extern IntPtr xvk_status_string(Status status);
        [DllImport(Lib)] internal static extern uint xvk_version();
        [DllImport(Lib)] internal static extern IntPtr xvk_backend_name(Backend backend);
        [DllImport(Lib)]
        internal static extern Status xvk_backend_query(Backend backend, out int available, out int deviceCount,
                                                        out IntPtr reason);

        [DllImport(Lib)] internal static extern Status xvk_context_create(Backend backend, int deviceId, out ContextHandle ctx);
        [DllImport(Lib)] internal static extern Status xvk_context_set_stream(ContextHandle ctx, IntPtr stream);
        [DllImport(Lib)] internal static extern Status xvk_context_synchronize(ContextHandle ctx);
        [DllImport(Lib)] internal static extern Status xvk_context_destroy(IntPtr ctx);
        [DllImport(Lib)] internal static extern Status xvk_context_get_device(ContextHandle ctx, out Backend backend, out int deviceId);

        [DllImport(Lib)] internal static extern Status xvk_memory_alloc(ContextHandle ctx, UIntPtr bytes, out IntPtr ptr);
        [DllImport(Lib)] internal static extern Status xvk_memory_free(ContextHandle ctx, IntPtr ptr);
        [DllImport(Lib)] internal static extern Status xvk_memory_copy(ContextHandle ctx, IntPtr dst, IntPtr src, UIntPtr bytes);

        [DllImport(Lib)]
        internal static extern Status xvk_softmax_forward(ContextHandle ctx, IntPtr x, ref xvk_softmax_options options, IntPtr y);
        [DllImport(Lib)]
        internal static extern Status xvk_log_softmax_forward(ContextHandle ctx, IntPtr x, ref xvk_softmax_options options, IntPtr y);
        [DllImport(Lib)]
        internal static extern Status xvk_softmax_backward(ContextHandle ctx, IntPtr y, IntPtr dy,
                                                           ref xvk_softmax_options options, IntPtr dx);
        [DllImport(Lib)]
        internal static extern Status xvk_log_softmax_backward(ContextHandle ctx, IntPtr y, IntPtr dy,
                                                               ref xvk_softmax_options options, IntPtr dx);

        [DllImport(Lib)]
        internal static extern Status xvk_layer_norm_forward(ContextHandle ctx, IntPtr x, IntPtr gamma, IntPtr beta,
                                                             ref xvk_norm_options options, IntPtr y, IntPtr mean, IntPtr rstd);
        [DllImport(Lib)]
        internal static extern Status xvk_layer_norm_backward(ContextHandle ctx, IntPtr dy, IntPtr x, IntPtr gamma, IntPtr mean,
                                                              IntPtr rstd, ref xvk_norm_options options, IntPtr dx,
                                                              IntPtr dgamma, IntPtr dbeta);
        [DllImport(Lib)]
        internal static extern Status xvk_rms_norm_forward(ContextHandle ctx, IntPtr x, IntPtr gamma,
                                                           ref xvk_norm_options options, IntPtr y, IntPtr rstd);
        [DllImport(Lib)]
        internal static extern Status xvk_rms_norm_backward(ContextHandle ctx, IntPtr dy, IntPtr x, IntPtr gamma, IntPtr rstd,
                                                            ref xvk_norm_options options, IntPtr dx, IntPtr dgamma);

        [DllImport(Lib)] internal static extern Status xvk_batch_norm_mask_words(ref DLTensor x, out long words);
        [DllImport(Lib)]
        internal static extern Status xvk_batch_norm_forward_training(ContextHandle ctx, IntPtr x, IntPtr z, IntPtr gamma,
                                                                      IntPtr beta, ref xvk_batch_norm_options options,
                                                                      IntPtr y, IntPtr mask, IntPtr runningMean,
                                                                      IntPtr runningVar, IntPtr savedMean, IntPtr savedRstd);
        [DllImport(Lib)]
        internal static extern Status xvk_batch_norm_forward_inference(ContextHandle ctx, IntPtr x, IntPtr z, IntPtr gamma,
                                                                       IntPtr beta, IntPtr runningMean, IntPtr runningVar,
                                                                       ref xvk_batch_norm_options options, IntPtr y,
                                                                       IntPtr mask);
        [DllImport(Lib)]
        internal static extern Status xvk_batch_norm_backward(ContextHandle ctx, IntPtr dy, IntPtr x, IntPtr mask, IntPtr y,
                                                              IntPtr gamma, IntPtr savedMean, IntPtr savedRstd,
                                                              ref xvk_batch_norm_options options, IntPtr dx, IntPtr dz,
                                                              IntPtr dgamma, IntPtr dbeta);
    }
}
