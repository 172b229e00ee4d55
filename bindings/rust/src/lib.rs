//! Rust binding of xvk: fused deep-learning kernels (softmax, LayerNorm, RMSNorm, BatchNorm with
//! fused ReLU and Add+ReLU) behind a stable C ABI.
//!
//! Two layers: [`sys`] declares the C header one to one; the crate root wraps it safely. A
//! [`Context`] owns an `xvk_context` (destroyed on drop); CPU tensors borrow slices
//! ([`Tensor`] for inputs, [`TensorMut`] for outputs); every failure is an [`Error`] carrying
//! `xvk_last_error_message()`. The operators run in the library, not here.
//!
//! ```no_run
//! let ctx = xvk::Context::cpu()?;
//! let x = [1.0f32, 2.0, 3.0, 4.0];
//! let mut y = [0.0f32; 4];
//! ctx.layer_norm_forward(
//!     &xvk::Tensor::f32(&x, &[1, 4])?, None, None, xvk::LayerNormOptions::default(),
//!     &mut xvk::TensorMut::f32(&mut y, &[1, 4])?, None, None)?;
//! # Ok::<(), xvk::Error>(())
//! ```
//!
//! libxvk is linked by name and found by the platform loader at run time (`LD_LIBRARY_PATH`
//! or the system's library directories); `XVK_LIB_DIR` tells the build where to link it from.

pub mod sys;

use std::ffi::CStr;
use std::fmt;
use std::marker::PhantomData;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::{self, NonNull};

// --- errors ------------------------------------------------------------------------------------

/// A non-success `xvk_status_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    InvalidArgument,
    Unsupported,
    BackendUnavailable,
    OutOfMemory,
    Device,
    Internal,
    /// A status this binding does not know (from a newer library).
    Other(i32),
}

impl Status {
    fn from_raw(status: sys::xvk_status_t) -> Status {
        match status {
            sys::XVK_ERROR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::XVK_ERROR_UNSUPPORTED => Status::Unsupported,
            sys::XVK_ERROR_BACKEND_UNAVAILABLE => Status::BackendUnavailable,
            sys::XVK_ERROR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::XVK_ERROR_DEVICE => Status::Device,
            sys::XVK_ERROR_INTERNAL => Status::Internal,
            other => Status::Other(other),
        }
    }

    /// The C value.
    pub fn raw(self) -> sys::xvk_status_t {
        match self {
            Status::InvalidArgument => sys::XVK_ERROR_INVALID_ARGUMENT,
            Status::Unsupported => sys::XVK_ERROR_UNSUPPORTED,
            Status::BackendUnavailable => sys::XVK_ERROR_BACKEND_UNAVAILABLE,
            Status::OutOfMemory => sys::XVK_ERROR_OUT_OF_MEMORY,
            Status::Device => sys::XVK_ERROR_DEVICE,
            Status::Internal => sys::XVK_ERROR_INTERNAL,
            Status::Other(v) => v,
        }
    }

    /// The library's name for the status ("XVK_ERROR_INVALID_ARGUMENT").
    pub fn name(self) -> &'static str {
        status_string(self.raw())
    }
}

/// A failed call: the status and the library's message, which names the argument at fault
/// ("xvk_layer_norm_forward: gamma has 3 elements, expected 4 (the normalized size)").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

impl Error {
    pub fn status(&self) -> Status {
        self.status
    }
    pub fn message(&self) -> &str {
        &self.message
    }
    /// An error found by this binding before calling the library (a slice whose length does not
    /// match its shape, say).
    fn binding(message: String) -> Error {
        Error { status: Status::InvalidArgument, message }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

fn static_str(p: *const c_char) -> &'static str {
    if p.is_null() {
        return "";
    }
    // SAFETY: the library returns static, NUL-terminated strings here.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("")
}

fn check(status: sys::xvk_status_t) -> Result<()> {
    if status == sys::XVK_SUCCESS {
        return Ok(());
    }
    // The message is thread-local in the library and this is the thread that failed.
    let message = unsafe { CStr::from_ptr(sys::xvk_last_error_message()) }.to_string_lossy().into_owned();
    Err(Error { status: Status::from_raw(status), message })
}

// --- library, backends ---------------------------------------------------------------------------

/// The loaded library's version, (major, minor, patch).
pub fn version() -> (u32, u32, u32) {
    let v = unsafe { sys::xvk_version() };
    (v / 10000, v / 100 % 100, v % 100)
}

/// `xvk_status_string`: a static name for any status value.
pub fn status_string(status: sys::xvk_status_t) -> &'static str {
    static_str(unsafe { sys::xvk_status_string(status) })
}

/// This thread's last failure message, "" if none (every [`Error`] carries it already).
pub fn last_error_message() -> String {
    unsafe { CStr::from_ptr(sys::xvk_last_error_message()) }.to_string_lossy().into_owned()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    Cpu,
    Cuda,
    Hip,
}

impl Backend {
    pub fn raw(self) -> sys::xvk_backend_t {
        match self {
            Backend::Cpu => sys::XVK_BACKEND_CPU,
            Backend::Cuda => sys::XVK_BACKEND_CUDA,
            Backend::Hip => sys::XVK_BACKEND_HIP,
        }
    }
    fn from_raw(b: sys::xvk_backend_t) -> Backend {
        match b {
            sys::XVK_BACKEND_CUDA => Backend::Cuda,
            sys::XVK_BACKEND_HIP => Backend::Hip,
            _ => Backend::Cpu,
        }
    }
    /// "cpu", "cuda" or "hip".
    pub fn name(self) -> &'static str {
        static_str(unsafe { sys::xvk_backend_name(self.raw()) })
    }
    /// The DLPack device type of this backend's tensors.
    pub fn device_type(self) -> sys::DLDeviceType {
        match self {
            Backend::Cpu => sys::kDLCPU,
            Backend::Cuda => sys::kDLCUDA,
            Backend::Hip => sys::kDLROCM,
        }
    }
}

/// What `xvk_backend_query` says about a backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendInfo {
    pub available: bool,
    pub device_count: i32,
    /// Why it is (not) usable.
    pub reason: String,
}

/// Whether a backend can be used (loading its module on first use), and why not.
pub fn backend_query(backend: Backend) -> Result<BackendInfo> {
    let (mut available, mut count, mut reason): (c_int, c_int, *const c_char) = (0, 0, ptr::null());
    check(unsafe { sys::xvk_backend_query(backend.raw(), &mut available, &mut count, &mut reason) })?;
    Ok(BackendInfo { available: available != 0, device_count: count, reason: static_str(reason).to_string() })
}

// --- tensors -----------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    /// IEEE half precision, held as `u16` bit patterns on the Rust side.
    F16,
    /// bfloat16, held as `u16` bit patterns on the Rust side.
    BF16,
    /// 32-bit words (`u32`): the ReLU mask of BatchNorm, not an element type of the operators.
    U32,
}

impl DType {
    pub fn raw(self) -> sys::DLDataType {
        match self {
            DType::F32 => sys::DLDataType { code: sys::kDLFloat, bits: 32, lanes: 1 },
            DType::F16 => sys::DLDataType { code: sys::kDLFloat, bits: 16, lanes: 1 },
            DType::BF16 => sys::DLDataType { code: sys::kDLBfloat, bits: 16, lanes: 1 },
            DType::U32 => sys::DLDataType { code: sys::kDLUInt, bits: 32, lanes: 1 },
        }
    }
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }
}

fn element_count(shape: &[i64], what: &str) -> Result<usize> {
    let mut n: usize = 1;
    for &d in shape {
        if d < 0 {
            return Err(Error::binding(format!("{}: shape {:?} has a negative dimension", what, shape)));
        }
        n = n
            .checked_mul(d as usize)
            .ok_or_else(|| Error::binding(format!("{}: shape {:?} is too large", what, shape)))?;
    }
    Ok(n)
}

fn check_len(len: usize, shape: &[i64], what: &str) -> Result<()> {
    let n = element_count(shape, what)?;
    if n != len {
        return Err(Error::binding(format!(
            "{}: shape {:?} has {} elements but the slice has {}",
            what, shape, n, len
        )));
    }
    Ok(())
}

fn check_bits16(dtype: DType, what: &str) -> Result<()> {
    if dtype != DType::F16 && dtype != DType::BF16 {
        return Err(Error::binding(format!("{}: u16 bit patterns are F16 or BF16, not {:?}", what, dtype)));
    }
    Ok(())
}

/// The parts of a DLTensor a view owns; `raw` points into them, so the view must outlive the
/// DLTensor it returns (each call below keeps both on its stack).
#[derive(Clone, Debug)]
struct Layout {
    data: *mut c_void,
    dtype: DType,
    device: sys::DLDevice,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
}

impl Layout {
    fn cpu(data: *mut c_void, dtype: DType, shape: &[i64]) -> Layout {
        Layout {
            data,
            dtype,
            device: sys::DLDevice { device_type: sys::kDLCPU, device_id: 0 },
            shape: shape.to_vec(),
            strides: None,
        }
    }
    fn raw(&self) -> sys::DLTensor {
        sys::DLTensor {
            data: self.data,
            device: self.device,
            ndim: self.shape.len() as i32,
            dtype: self.dtype.raw(),
            shape: self.shape.as_ptr() as *mut i64,
            strides: self.strides.as_ref().map_or(ptr::null_mut(), |s| s.as_ptr() as *mut i64),
            byte_offset: 0,
        }
    }
}

/// An input tensor: a borrowed CPU slice with a shape (row-major), or device memory.
#[derive(Clone, Debug)]
pub struct Tensor<'a> {
    layout: Layout,
    _data: PhantomData<&'a [u8]>,
}

impl<'a> Tensor<'a> {
    /// A float32 CPU tensor of this shape over the whole slice.
    pub fn f32(data: &'a [f32], shape: &[i64]) -> Result<Tensor<'a>> {
        check_len(data.len(), shape, "Tensor::f32")?;
        Ok(Tensor { layout: Layout::cpu(data.as_ptr() as *mut c_void, DType::F32, shape), _data: PhantomData })
    }

    /// A float16 or bfloat16 CPU tensor over a slice of `u16` bit patterns.
    pub fn bits16(data: &'a [u16], dtype: DType, shape: &[i64]) -> Result<Tensor<'a>> {
        check_bits16(dtype, "Tensor::bits16")?;
        check_len(data.len(), shape, "Tensor::bits16")?;
        Ok(Tensor { layout: Layout::cpu(data.as_ptr() as *mut c_void, dtype, shape), _data: PhantomData })
    }

    /// A uint32 CPU tensor: the words of a BatchNorm ReLU mask (see [`batch_norm_mask_words`]).
    pub fn u32(data: &'a [u32], shape: &[i64]) -> Result<Tensor<'a>> {
        check_len(data.len(), shape, "Tensor::u32")?;
        Ok(Tensor { layout: Layout::cpu(data.as_ptr() as *mut c_void, DType::U32, shape), _data: PhantomData })
    }

    /// Any memory the library can address, for device memory from another framework.
    ///
    /// # Safety
    /// `data` must point to memory on `device` that holds the elements `shape` and `strides`
    /// (in elements; `None` is contiguous) describe, and stays valid and unwritten for `'a`.
    pub unsafe fn from_raw(
        data: *const c_void,
        dtype: DType,
        device: sys::DLDevice,
        shape: &[i64],
        strides: Option<&[i64]>,
    ) -> Tensor<'a> {
        Tensor {
            layout: Layout {
                data: data as *mut c_void,
                dtype,
                device,
                shape: shape.to_vec(),
                strides: strides.map(|s| s.to_vec()),
            },
            _data: PhantomData,
        }
    }

    pub fn shape(&self) -> &[i64] {
        &self.layout.shape
    }
    pub fn dtype(&self) -> DType {
        self.layout.dtype
    }
}

/// An output tensor: a mutably borrowed CPU slice with a shape (row-major), or device memory.
#[derive(Debug)]
pub struct TensorMut<'a> {
    layout: Layout,
    _data: PhantomData<&'a mut [u8]>,
}

impl<'a> TensorMut<'a> {
    pub fn f32(data: &'a mut [f32], shape: &[i64]) -> Result<TensorMut<'a>> {
        check_len(data.len(), shape, "TensorMut::f32")?;
        Ok(TensorMut { layout: Layout::cpu(data.as_mut_ptr() as *mut c_void, DType::F32, shape), _data: PhantomData })
    }

    pub fn bits16(data: &'a mut [u16], dtype: DType, shape: &[i64]) -> Result<TensorMut<'a>> {
        check_bits16(dtype, "TensorMut::bits16")?;
        check_len(data.len(), shape, "TensorMut::bits16")?;
        Ok(TensorMut { layout: Layout::cpu(data.as_mut_ptr() as *mut c_void, dtype, shape), _data: PhantomData })
    }

    /// A uint32 CPU output: the words of a BatchNorm ReLU mask (see [`batch_norm_mask_words`]).
    pub fn u32(data: &'a mut [u32], shape: &[i64]) -> Result<TensorMut<'a>> {
        check_len(data.len(), shape, "TensorMut::u32")?;
        Ok(TensorMut { layout: Layout::cpu(data.as_mut_ptr() as *mut c_void, DType::U32, shape), _data: PhantomData })
    }

    /// # Safety
    /// As [`Tensor::from_raw`], and the memory must be writable and used by nothing else for `'a`.
    pub unsafe fn from_raw(
        data: *mut c_void,
        dtype: DType,
        device: sys::DLDevice,
        shape: &[i64],
        strides: Option<&[i64]>,
    ) -> TensorMut<'a> {
        TensorMut {
            layout: Layout { data, dtype, device, shape: shape.to_vec(), strides: strides.map(|s| s.to_vec()) },
            _data: PhantomData,
        }
    }

    pub fn shape(&self) -> &[i64] {
        &self.layout.shape
    }
    pub fn dtype(&self) -> DType {
        self.layout.dtype
    }
}

// --- options -----------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Causal {
    None,
    /// Row i keeps columns j <= i (PyTorch's `is_causal`).
    TopLeft,
    /// Row i keeps columns j <= i + (cols - rows): the last query sees every key.
    BottomRight,
}

impl Causal {
    fn raw(self) -> sys::xvk_causal_t {
        match self {
            Causal::None => sys::XVK_CAUSAL_NONE,
            Causal::TopLeft => sys::XVK_CAUSAL_TOP_LEFT,
            Causal::BottomRight => sys::XVK_CAUSAL_BOTTOM_RIGHT,
        }
    }
}

/// `xvk_softmax_options`. The backward passes use `scale` only.
#[derive(Clone, Copy, Debug)]
pub struct SoftmaxOptions<'r, 'd> {
    pub scale: f32,
    pub causal: Causal,
    /// Additive mask of x's dtype, broadcast to x (NumPy rules); -inf masks an element out.
    pub mask: Option<&'r Tensor<'d>>,
}

impl Default for SoftmaxOptions<'_, '_> {
    fn default() -> Self {
        SoftmaxOptions { scale: 1.0, causal: Causal::None, mask: None }
    }
}

/// `xvk_layer_norm_options`. `residual` and `residual_out` are for the forward only.
#[derive(Debug)]
pub struct LayerNormOptions<'r, 'd> {
    /// > 0; default 1e-5.
    pub epsilon: f32,
    /// Trailing dimensions normalized over; default 1.
    pub normalized_ndim: i32,
    /// Scale by 1 + gamma instead of gamma.
    pub zero_centered_gamma: bool,
    /// Normalize x + residual.
    pub residual: Option<&'r Tensor<'d>>,
    /// Also write x + residual here.
    pub residual_out: Option<&'r mut TensorMut<'d>>,
}

impl Default for LayerNormOptions<'_, '_> {
    fn default() -> Self {
        LayerNormOptions {
            epsilon: 1e-5,
            normalized_ndim: 1,
            zero_centered_gamma: false,
            residual: None,
            residual_out: None,
        }
    }
}

/// `xvk_rms_norm_options`: as [`LayerNormOptions`], with epsilon 1e-6 by default.
#[derive(Debug)]
pub struct RmsNormOptions<'r, 'd> {
    pub epsilon: f32,
    pub normalized_ndim: i32,
    pub zero_centered_gamma: bool,
    pub residual: Option<&'r Tensor<'d>>,
    pub residual_out: Option<&'r mut TensorMut<'d>>,
}

impl Default for RmsNormOptions<'_, '_> {
    fn default() -> Self {
        RmsNormOptions {
            epsilon: 1e-6,
            normalized_ndim: 1,
            zero_centered_gamma: false,
            residual: None,
            residual_out: None,
        }
    }
}

/// The activation BatchNorm applies after its (optional) add.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    None,
    /// max(v, 0); NaN stays NaN.
    Relu,
}

impl Activation {
    fn raw(self) -> sys::xvk_activation_t {
        match self {
            Activation::None => sys::XVK_ACTIVATION_NONE,
            Activation::Relu => sys::XVK_ACTIVATION_RELU,
        }
    }
}

/// `xvk_batch_norm_options`. The backward uses `activation` and `channel_axis` only.
#[derive(Clone, Copy, Debug)]
pub struct BatchNormOptions {
    /// > 0; default 1e-5.
    pub epsilon: f32,
    /// Training: running = (1 - momentum) * running + momentum * batch statistic; default 0.1.
    pub momentum: f32,
    /// Applied after the optional add of z; default [`Activation::None`].
    pub activation: Activation,
    /// The channel dimension of x: 1 for (N, C, spatial...), -1 for (N, spatial..., C); default 1.
    pub channel_axis: i32,
}

impl Default for BatchNormOptions {
    fn default() -> Self {
        BatchNormOptions { epsilon: 1e-5, momentum: 0.1, activation: Activation::None, channel_axis: 1 }
    }
}

impl BatchNormOptions {
    fn raw(&self) -> sys::xvk_batch_norm_options {
        sys::xvk_batch_norm_options {
            epsilon: self.epsilon,
            momentum: self.momentum,
            activation: self.activation.raw(),
            channel_axis: self.channel_axis,
            ..Default::default()
        }
    }
}

/// The number of `u32` words of BatchNorm's ReLU mask for a tensor of this shape:
/// ceil(elements / 32). Bit i (bit i % 32 of word i / 32) is element i of y, in x's memory order.
pub fn batch_norm_mask_words(shape: &[i64]) -> Result<usize> {
    let x = sys::DLTensor {
        data: ptr::null_mut(),
        device: sys::DLDevice { device_type: sys::kDLCPU, device_id: 0 },
        ndim: shape.len() as i32,
        dtype: DType::F32.raw(),
        shape: shape.as_ptr() as *mut i64,
        strides: ptr::null_mut(),
        byte_offset: 0,
    };
    let mut words: i64 = 0;
    check(unsafe { sys::xvk_batch_norm_mask_words(&x, &mut words) })?;
    Ok(words as usize)
}

// DLTensors of optional arguments, living as long as the call's stack frame.
fn opt_raw(t: Option<&Tensor>) -> Option<sys::DLTensor> {
    t.map(|t| t.layout.raw())
}
fn opt_raw_mut(t: &Option<&mut TensorMut>) -> Option<sys::DLTensor> {
    t.as_ref().map(|t| t.layout.raw())
}
fn in_ptr(t: &Option<sys::DLTensor>) -> *const sys::DLTensor {
    t.as_ref().map_or(ptr::null(), |t| t as *const sys::DLTensor)
}
fn out_ptr(t: &mut Option<sys::DLTensor>) -> *mut sys::DLTensor {
    t.as_mut().map_or(ptr::null_mut(), |t| t as *mut sys::DLTensor)
}

// --- context -----------------------------------------------------------------------------------

/// An xvk context: a backend, a device and a stream; destroyed on drop (after its work).
///
/// It may move between threads but is not shared (`Send`, not `Sync`), as the C API requires.
#[derive(Debug)]
pub struct Context {
    raw: NonNull<sys::xvk_context>,
}

// SAFETY: a context may be used from any thread, one at a time; not being Sync enforces that.
unsafe impl Send for Context {}

impl Context {
    pub fn new(backend: Backend, device_id: i32) -> Result<Context> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::xvk_context_create(backend.raw(), device_id, &mut raw) })?;
        let raw = NonNull::new(raw).ok_or_else(|| Error {
            status: Status::Internal,
            message: "xvk_context_create returned success and no context".to_string(),
        })?;
        Ok(Context { raw })
    }

    /// A context on the CPU backend (always available).
    pub fn cpu() -> Result<Context> {
        Context::new(Backend::Cpu, 0)
    }

    pub fn as_raw(&self) -> *mut sys::xvk_context {
        self.raw.as_ptr()
    }

    /// The context's backend and device id.
    pub fn device(&self) -> Result<(Backend, i32)> {
        let (mut backend, mut device): (sys::xvk_backend_t, c_int) = (0, 0);
        check(unsafe { sys::xvk_context_get_device(self.as_raw(), &mut backend, &mut device) })?;
        Ok((Backend::from_raw(backend), device))
    }

    /// The DLPack device of this context's tensors.
    pub fn dl_device(&self) -> Result<sys::DLDevice> {
        let (backend, id) = self.device()?;
        Ok(sys::DLDevice { device_type: backend.device_type(), device_id: id })
    }

    /// Enqueue operators on `stream` (a `cudaStream_t` / `hipStream_t`; null for the default).
    ///
    /// # Safety
    /// The stream must be a valid stream of the context's device and outlive its use here.
    pub unsafe fn set_stream(&self, stream: *mut c_void) -> Result<()> {
        check(sys::xvk_context_set_stream(self.as_raw(), stream))
    }

    /// Blocks until the context's queued work is done.
    pub fn synchronize(&self) -> Result<()> {
        check(unsafe { sys::xvk_context_synchronize(self.as_raw()) })
    }

    /// `bytes` of memory on the context's device (host memory on the CPU backend).
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer<'_>> {
        let mut p = ptr::null_mut();
        check(unsafe { sys::xvk_memory_alloc(self.as_raw(), bytes, &mut p) })?;
        Ok(DeviceBuffer { ctx: self, ptr: p, bytes })
    }

    // softmax ---------------------------------------------------------------------------------

    fn softmax_options(options: &SoftmaxOptions, mask: &Option<sys::DLTensor>) -> sys::xvk_softmax_options {
        sys::xvk_softmax_options {
            scale: options.scale,
            causal: options.causal.raw(),
            mask: in_ptr(mask),
            ..Default::default()
        }
    }

    /// y = softmax(scale * x + mask) over the last dimension.
    pub fn softmax_forward(&self, x: &Tensor, y: &mut TensorMut, options: &SoftmaxOptions) -> Result<()> {
        let mask = opt_raw(options.mask);
        let o = Self::softmax_options(options, &mask);
        let (xr, mut yr) = (x.layout.raw(), y.layout.raw());
        check(unsafe { sys::xvk_softmax_forward(self.as_raw(), &xr, &o, &mut yr) })
    }

    /// y = log_softmax(scale * x + mask) over the last dimension.
    pub fn log_softmax_forward(&self, x: &Tensor, y: &mut TensorMut, options: &SoftmaxOptions) -> Result<()> {
        let mask = opt_raw(options.mask);
        let o = Self::softmax_options(options, &mask);
        let (xr, mut yr) = (x.layout.raw(), y.layout.raw());
        check(unsafe { sys::xvk_log_softmax_forward(self.as_raw(), &xr, &o, &mut yr) })
    }

    /// dx = scale * y * (dy - sum(dy * y)) from the forward's output y.
    pub fn softmax_backward(
        &self,
        y: &Tensor,
        dy: &Tensor,
        dx: &mut TensorMut,
        options: &SoftmaxOptions,
    ) -> Result<()> {
        let mask = opt_raw(options.mask);
        let o = Self::softmax_options(options, &mask);
        let (yr, dyr, mut dxr) = (y.layout.raw(), dy.layout.raw(), dx.layout.raw());
        check(unsafe { sys::xvk_softmax_backward(self.as_raw(), &yr, &dyr, &o, &mut dxr) })
    }

    /// dx = scale * (dy - exp(y) * sum(dy)) from the forward's output y.
    pub fn log_softmax_backward(
        &self,
        y: &Tensor,
        dy: &Tensor,
        dx: &mut TensorMut,
        options: &SoftmaxOptions,
    ) -> Result<()> {
        let mask = opt_raw(options.mask);
        let o = Self::softmax_options(options, &mask);
        let (yr, dyr, mut dxr) = (y.layout.raw(), dy.layout.raw(), dx.layout.raw());
        check(unsafe { sys::xvk_log_softmax_backward(self.as_raw(), &yr, &dyr, &o, &mut dxr) })
    }

    // LayerNorm -------------------------------------------------------------------------------

    /// LayerNorm of x (+ residual) over its trailing `normalized_ndim` dimensions; `mean` and
    /// `rstd` (float32, one per row) are written when given.
    #[allow(clippy::too_many_arguments)]
    pub fn layer_norm_forward(
        &self,
        x: &Tensor,
        gamma: Option<&Tensor>,
        beta: Option<&Tensor>,
        options: LayerNormOptions,
        y: &mut TensorMut,
        mean: Option<&mut TensorMut>,
        rstd: Option<&mut TensorMut>,
    ) -> Result<()> {
        let (g, b, res) = (opt_raw(gamma), opt_raw(beta), opt_raw(options.residual));
        let (mut m, mut s, mut res_out) = (opt_raw_mut(&mean), opt_raw_mut(&rstd), opt_raw_mut(&options.residual_out));
        let o = sys::xvk_layer_norm_options {
            epsilon: options.epsilon,
            normalized_ndim: options.normalized_ndim,
            zero_centered_gamma: options.zero_centered_gamma as i32,
            residual: in_ptr(&res),
            residual_out: out_ptr(&mut res_out),
            ..Default::default()
        };
        let (xr, mut yr) = (x.layout.raw(), y.layout.raw());
        check(unsafe {
            sys::xvk_layer_norm_forward(
                self.as_raw(),
                &xr,
                in_ptr(&g),
                in_ptr(&b),
                &o,
                &mut yr,
                out_ptr(&mut m),
                out_ptr(&mut s),
            )
        })
    }

    /// Gradient of [`Context::layer_norm_forward`] from its input x and saved mean and rstd;
    /// writes dx, and dgamma / dbeta when given.
    #[allow(clippy::too_many_arguments)]
    pub fn layer_norm_backward(
        &self,
        dy: &Tensor,
        x: &Tensor,
        gamma: Option<&Tensor>,
        mean: &Tensor,
        rstd: &Tensor,
        options: LayerNormOptions,
        dx: &mut TensorMut,
        dgamma: Option<&mut TensorMut>,
        dbeta: Option<&mut TensorMut>,
    ) -> Result<()> {
        let (g, res) = (opt_raw(gamma), opt_raw(options.residual));
        let (mut dg, mut db, mut res_out) =
            (opt_raw_mut(&dgamma), opt_raw_mut(&dbeta), opt_raw_mut(&options.residual_out));
        let o = sys::xvk_layer_norm_options {
            epsilon: options.epsilon,
            normalized_ndim: options.normalized_ndim,
            zero_centered_gamma: options.zero_centered_gamma as i32,
            residual: in_ptr(&res),
            residual_out: out_ptr(&mut res_out),
            ..Default::default()
        };
        let (dyr, xr, mr, sr, mut dxr) =
            (dy.layout.raw(), x.layout.raw(), mean.layout.raw(), rstd.layout.raw(), dx.layout.raw());
        check(unsafe {
            sys::xvk_layer_norm_backward(
                self.as_raw(),
                &dyr,
                &xr,
                in_ptr(&g),
                &mr,
                &sr,
                &o,
                &mut dxr,
                out_ptr(&mut dg),
                out_ptr(&mut db),
            )
        })
    }

    // RMSNorm ---------------------------------------------------------------------------------

    /// RMSNorm of x (+ residual) over its trailing `normalized_ndim` dimensions.
    pub fn rms_norm_forward(
        &self,
        x: &Tensor,
        gamma: Option<&Tensor>,
        options: RmsNormOptions,
        y: &mut TensorMut,
        rstd: Option<&mut TensorMut>,
    ) -> Result<()> {
        let (g, res) = (opt_raw(gamma), opt_raw(options.residual));
        let (mut s, mut res_out) = (opt_raw_mut(&rstd), opt_raw_mut(&options.residual_out));
        let o = sys::xvk_rms_norm_options {
            epsilon: options.epsilon,
            normalized_ndim: options.normalized_ndim,
            zero_centered_gamma: options.zero_centered_gamma as i32,
            residual: in_ptr(&res),
            residual_out: out_ptr(&mut res_out),
            ..Default::default()
        };
        let (xr, mut yr) = (x.layout.raw(), y.layout.raw());
        check(unsafe { sys::xvk_rms_norm_forward(self.as_raw(), &xr, in_ptr(&g), &o, &mut yr, out_ptr(&mut s)) })
    }

    /// Gradient of [`Context::rms_norm_forward`]; writes dx, and dgamma when given.
    #[allow(clippy::too_many_arguments)]
    pub fn rms_norm_backward(
        &self,
        dy: &Tensor,
        x: &Tensor,
        gamma: Option<&Tensor>,
        rstd: &Tensor,
        options: RmsNormOptions,
        dx: &mut TensorMut,
        dgamma: Option<&mut TensorMut>,
    ) -> Result<()> {
        let (g, res) = (opt_raw(gamma), opt_raw(options.residual));
        let (mut dg, mut res_out) = (opt_raw_mut(&dgamma), opt_raw_mut(&options.residual_out));
        let o = sys::xvk_rms_norm_options {
            epsilon: options.epsilon,
            normalized_ndim: options.normalized_ndim,
            zero_centered_gamma: options.zero_centered_gamma as i32,
            residual: in_ptr(&res),
            residual_out: out_ptr(&mut res_out),
            ..Default::default()
        };
        let (dyr, xr, sr, mut dxr) = (dy.layout.raw(), x.layout.raw(), rstd.layout.raw(), dx.layout.raw());
        check(unsafe {
            sys::xvk_rms_norm_backward(self.as_raw(), &dyr, &xr, in_ptr(&g), &sr, &o, &mut dxr, out_ptr(&mut dg))
        })
    }

    // BatchNorm -------------------------------------------------------------------------------

    /// BatchNorm of x with its batch statistics, per channel:
    /// y = activation((x - mean) * rstd * gamma + beta + z), with gamma, beta and z optional.
    /// `mask` (with [`Activation::Relu`]; [`batch_norm_mask_words`] `u32`s),
    /// `saved_mean` and `saved_rstd` are written when given; `running_mean` and `running_var`
    /// (given together) are updated in place. Parameters and statistics are float32, C elements.
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_forward_training(
        &self,
        x: &Tensor,
        z: Option<&Tensor>,
        gamma: Option<&Tensor>,
        beta: Option<&Tensor>,
        options: BatchNormOptions,
        y: &mut TensorMut,
        mask: Option<&mut TensorMut>,
        running_mean: Option<&mut TensorMut>,
        running_var: Option<&mut TensorMut>,
        saved_mean: Option<&mut TensorMut>,
        saved_rstd: Option<&mut TensorMut>,
    ) -> Result<()> {
        let (zr, g, b) = (opt_raw(z), opt_raw(gamma), opt_raw(beta));
        let (mut m, mut rm, mut rv) = (opt_raw_mut(&mask), opt_raw_mut(&running_mean), opt_raw_mut(&running_var));
        let (mut sm, mut ss) = (opt_raw_mut(&saved_mean), opt_raw_mut(&saved_rstd));
        let o = options.raw();
        let (xr, mut yr) = (x.layout.raw(), y.layout.raw());
        check(unsafe {
            sys::xvk_batch_norm_forward_training(
                self.as_raw(),
                &xr,
                in_ptr(&zr),
                in_ptr(&g),
                in_ptr(&b),
                &o,
                &mut yr,
                out_ptr(&mut m),
                out_ptr(&mut rm),
                out_ptr(&mut rv),
                out_ptr(&mut sm),
                out_ptr(&mut ss),
            )
        })
    }

    /// BatchNorm of x with the running statistics: mean = running_mean, rstd =
    /// 1 / sqrt(running_var + epsilon); otherwise as [`Context::batch_norm_forward_training`].
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_forward_inference(
        &self,
        x: &Tensor,
        z: Option<&Tensor>,
        gamma: Option<&Tensor>,
        beta: Option<&Tensor>,
        running_mean: &Tensor,
        running_var: &Tensor,
        options: BatchNormOptions,
        y: &mut TensorMut,
        mask: Option<&mut TensorMut>,
    ) -> Result<()> {
        let (zr, g, b) = (opt_raw(z), opt_raw(gamma), opt_raw(beta));
        let mut m = opt_raw_mut(&mask);
        let o = options.raw();
        let (xr, rmr, rvr, mut yr) =
            (x.layout.raw(), running_mean.layout.raw(), running_var.layout.raw(), y.layout.raw());
        check(unsafe {
            sys::xvk_batch_norm_forward_inference(
                self.as_raw(),
                &xr,
                in_ptr(&zr),
                in_ptr(&g),
                in_ptr(&b),
                &rmr,
                &rvr,
                &o,
                &mut yr,
                out_ptr(&mut m),
            )
        })
    }

    /// Gradient of [`Context::batch_norm_forward_training`] from dy, its input x and its saved
    /// mean and rstd. With [`Activation::Relu`] give exactly one of `mask` (the forward's) or `y`
    /// (its output). Writes dx and, when given, dz (dy where y > 0: the gradient of z), dgamma
    /// and dbeta.
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_backward(
        &self,
        dy: &Tensor,
        x: &Tensor,
        mask: Option<&Tensor>,
        y: Option<&Tensor>,
        gamma: Option<&Tensor>,
        saved_mean: &Tensor,
        saved_rstd: &Tensor,
        options: BatchNormOptions,
        dx: &mut TensorMut,
        dz: Option<&mut TensorMut>,
        dgamma: Option<&mut TensorMut>,
        dbeta: Option<&mut TensorMut>,
    ) -> Result<()> {
        let (m, yr, g) = (opt_raw(mask), opt_raw(y), opt_raw(gamma));
        let (mut dzr, mut dg, mut db) = (opt_raw_mut(&dz), opt_raw_mut(&dgamma), opt_raw_mut(&dbeta));
        let o = options.raw();
        let (dyr, xr, smr, ssr, mut dxr) =
            (dy.layout.raw(), x.layout.raw(), saved_mean.layout.raw(), saved_rstd.layout.raw(), dx.layout.raw());
        check(unsafe {
            sys::xvk_batch_norm_backward(
                self.as_raw(),
                &dyr,
                &xr,
                in_ptr(&m),
                in_ptr(&yr),
                in_ptr(&g),
                &smr,
                &ssr,
                &o,
                &mut dxr,
                out_ptr(&mut dzr),
                out_ptr(&mut dg),
                out_ptr(&mut db),
            )
        })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // Waits for the context's work; a failure here has nowhere to go.
        unsafe {
            sys::xvk_context_destroy(self.raw.as_ptr());
        }
    }
}

// --- device memory -------------------------------------------------------------------------------

mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u16 {}
    impl Sealed for u32 {}
}

/// Element types that can be copied to and from a [`DeviceBuffer`] (`f32`, `u16` for 16-bit
/// float bit patterns, and `u32` for BatchNorm's ReLU mask words).
pub trait Element: Copy + private::Sealed {}
impl Element for f32 {}
impl Element for u16 {}
impl Element for u32 {}

/// Memory from `xvk_memory_alloc` on a context's device, freed on drop.
#[derive(Debug)]
pub struct DeviceBuffer<'c> {
    ctx: &'c Context,
    ptr: *mut c_void,
    bytes: usize,
}

impl<'c> DeviceBuffer<'c> {
    pub fn len_bytes(&self) -> usize {
        self.bytes
    }
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }

    fn check_bytes(&self, bytes: usize, what: &str) -> Result<()> {
        if bytes != self.bytes {
            return Err(Error::binding(format!("{}: {} bytes for a {}-byte buffer", what, bytes, self.bytes)));
        }
        Ok(())
    }

    /// Copies `src` in (it must fill the buffer) and waits for the copy.
    pub fn copy_from_host<T: Element>(&mut self, src: &[T]) -> Result<()> {
        let bytes = std::mem::size_of_val(src);
        self.check_bytes(bytes, "DeviceBuffer::copy_from_host")?;
        check(unsafe { sys::xvk_memory_copy(self.ctx.as_raw(), self.ptr, src.as_ptr() as *const c_void, bytes) })?;
        self.ctx.synchronize()
    }

    /// Copies the buffer out (after the context's queued work) and waits for the copy.
    pub fn copy_to_host<T: Element>(&self, dst: &mut [T]) -> Result<()> {
        let bytes = std::mem::size_of_val(dst);
        self.check_bytes(bytes, "DeviceBuffer::copy_to_host")?;
        check(unsafe { sys::xvk_memory_copy(self.ctx.as_raw(), dst.as_mut_ptr() as *mut c_void, self.ptr, bytes) })?;
        self.ctx.synchronize()
    }

    fn layout(&self, dtype: DType, shape: &[i64], what: &str) -> Result<Layout> {
        let n = element_count(shape, what)?;
        self.check_bytes(n * dtype.size(), what)?;
        Ok(Layout { data: self.ptr, dtype, device: self.ctx.dl_device()?, shape: shape.to_vec(), strides: None })
    }

    /// The buffer as an input tensor of this dtype and shape (which must fill it).
    pub fn tensor(&self, dtype: DType, shape: &[i64]) -> Result<Tensor<'_>> {
        Ok(Tensor { layout: self.layout(dtype, shape, "DeviceBuffer::tensor")?, _data: PhantomData })
    }

    /// The buffer as an output tensor of this dtype and shape (which must fill it).
    pub fn tensor_mut(&mut self, dtype: DType, shape: &[i64]) -> Result<TensorMut<'_>> {
        Ok(TensorMut { layout: self.layout(dtype, shape, "DeviceBuffer::tensor_mut")?, _data: PhantomData })
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        unsafe {
            sys::xvk_memory_free(self.ctx.as_raw(), self.ptr);
        }
    }
}
