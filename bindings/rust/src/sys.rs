//! The raw layer: `include/xvk/xvk.h` and the DLPack 0.6 types it uses, declared one to one.
//!
//! Everything here is `unsafe` to call and follows the C header's rules (which document every
//! function). The safe layer in the crate root is built on these declarations only.
#![allow(non_camel_case_types, non_upper_case_globals)]

use std::os::raw::{c_char, c_int, c_void};

// --- DLPack (dlpack/dlpack.h, version 0.6) --------------------------------------------------

pub type DLDeviceType = c_int;
pub const kDLCPU: DLDeviceType = 1;
pub const kDLCUDA: DLDeviceType = 2;
pub const kDLCUDAHost: DLDeviceType = 3;
pub const kDLROCM: DLDeviceType = 10;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: DLDeviceType,
    pub device_id: i32,
}

pub const kDLInt: u8 = 0;
pub const kDLUInt: u8 = 1;
pub const kDLFloat: u8 = 2;
pub const kDLBfloat: u8 = 4;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

// --- xvk.h ---------------------------------------------------------------------------------

pub const XVK_VERSION_MAJOR: u32 = 0;
pub const XVK_VERSION_MINOR: u32 = 1;
pub const XVK_VERSION_PATCH: u32 = 0;
pub const XVK_VERSION: u32 = XVK_VERSION_MAJOR * 10000 + XVK_VERSION_MINOR * 100 + XVK_VERSION_PATCH;

pub type xvk_status_t = c_int;
pub const XVK_SUCCESS: xvk_status_t = 0;
pub const XVK_ERROR_INVALID_ARGUMENT: xvk_status_t = 1;
pub const XVK_ERROR_UNSUPPORTED: xvk_status_t = 2;
pub const XVK_ERROR_BACKEND_UNAVAILABLE: xvk_status_t = 3;
pub const XVK_ERROR_OUT_OF_MEMORY: xvk_status_t = 4;
pub const XVK_ERROR_DEVICE: xvk_status_t = 5;
pub const XVK_ERROR_INTERNAL: xvk_status_t = 6;

pub type xvk_backend_t = c_int;
pub const XVK_BACKEND_CPU: xvk_backend_t = 0;
pub const XVK_BACKEND_CUDA: xvk_backend_t = 1;
pub const XVK_BACKEND_HIP: xvk_backend_t = 2;

pub type xvk_causal_t = c_int;
pub const XVK_CAUSAL_NONE: xvk_causal_t = 0;
pub const XVK_CAUSAL_TOP_LEFT: xvk_causal_t = 1;
pub const XVK_CAUSAL_BOTTOM_RIGHT: xvk_causal_t = 2;

pub type xvk_activation_t = c_int;
pub const XVK_ACTIVATION_NONE: xvk_activation_t = 0;
pub const XVK_ACTIVATION_RELU: xvk_activation_t = 1;

/// Opaque context.
#[repr(C)]
pub struct xvk_context {
    _private: [u8; 0],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct xvk_softmax_options {
    pub struct_size: u32,
    pub scale: f32,
    pub causal: i32,
    pub mask: *const DLTensor,
}

/// `XVK_SOFTMAX_OPTIONS_INIT`
impl Default for xvk_softmax_options {
    fn default() -> Self {
        xvk_softmax_options {
            struct_size: std::mem::size_of::<xvk_softmax_options>() as u32,
            scale: 1.0,
            causal: XVK_CAUSAL_NONE,
            mask: std::ptr::null(),
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct xvk_layer_norm_options {
    pub struct_size: u32,
    pub epsilon: f32,
    pub normalized_ndim: i32,
    pub zero_centered_gamma: i32,
    pub residual: *const DLTensor,
    pub residual_out: *mut DLTensor,
}

/// `XVK_LAYER_NORM_OPTIONS_INIT`
impl Default for xvk_layer_norm_options {
    fn default() -> Self {
        xvk_layer_norm_options {
            struct_size: std::mem::size_of::<xvk_layer_norm_options>() as u32,
            epsilon: 1e-5,
            normalized_ndim: 1,
            zero_centered_gamma: 0,
            residual: std::ptr::null(),
            residual_out: std::ptr::null_mut(),
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct xvk_rms_norm_options {
    pub struct_size: u32,
    pub epsilon: f32,
    pub normalized_ndim: i32,
    pub zero_centered_gamma: i32,
    pub residual: *const DLTensor,
    pub residual_out: *mut DLTensor,
}

/// `XVK_RMS_NORM_OPTIONS_INIT`
impl Default for xvk_rms_norm_options {
    fn default() -> Self {
        xvk_rms_norm_options {
            struct_size: std::mem::size_of::<xvk_rms_norm_options>() as u32,
            epsilon: 1e-6,
            normalized_ndim: 1,
            zero_centered_gamma: 0,
            residual: std::ptr::null(),
            residual_out: std::ptr::null_mut(),
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct xvk_batch_norm_options {
    pub struct_size: u32,
    pub epsilon: f32,
    pub momentum: f32,
    pub activation: i32,
    pub channel_axis: i32,
}

/// `XVK_BATCH_NORM_OPTIONS_INIT`
impl Default for xvk_batch_norm_options {
    fn default() -> Self {
        xvk_batch_norm_options {
            struct_size: std::mem::size_of::<xvk_batch_norm_options>() as u32,
            epsilon: 1e-5,
            momentum: 0.1,
            activation: XVK_ACTIVATION_NONE,
            channel_axis: 1,
        }
    }
}

#[link(name = "xvk")]
extern "C" {
    pub fn xvk_last_error_message() -> *const c_char;
    pub fn xvk_status_string(status: xvk_status_t) -> *const c_char;
    pub fn xvk_version() -> u32;

    pub fn xvk_backend_name(backend: xvk_backend_t) -> *const c_char;
    pub fn xvk_backend_query(
        backend: xvk_backend_t,
        available: *mut c_int,
        device_count: *mut c_int,
        reason: *mut *const c_char,
    ) -> xvk_status_t;

    pub fn xvk_context_create(backend: xvk_backend_t, device_id: c_int, out: *mut *mut xvk_context) -> xvk_status_t;
    pub fn xvk_context_set_stream(ctx: *mut xvk_context, stream: *mut c_void) -> xvk_status_t;
    pub fn xvk_context_synchronize(ctx: *mut xvk_context) -> xvk_status_t;
    pub fn xvk_context_destroy(ctx: *mut xvk_context) -> xvk_status_t;
    pub fn xvk_context_get_device(
        ctx: *const xvk_context,
        backend: *mut xvk_backend_t,
        device_id: *mut c_int,
    ) -> xvk_status_t;

    pub fn xvk_memory_alloc(ctx: *mut xvk_context, bytes: usize, out: *mut *mut c_void) -> xvk_status_t;
    pub fn xvk_memory_free(ctx: *mut xvk_context, ptr: *mut c_void) -> xvk_status_t;
    pub fn xvk_memory_copy(ctx: *mut xvk_context, dst: *mut c_void, src: *const c_void, bytes: usize) -> xvk_status_t;

    pub fn xvk_softmax_forward(
        ctx: *mut xvk_context,
        x: *const DLTensor,
        options: *const xvk_softmax_options,
        y: *mut DLTensor,
    ) -> xvk_status_t;
    pub fn xvk_log_softmax_forward(
        ctx: *mut xvk_context,
        x: *const DLTensor,
        options: *const xvk_softmax_options,
        y: *mut DLTensor,
    ) -> xvk_status_t;
    pub fn xvk_softmax_backward(
        ctx: *mut xvk_context,
        y: *const DLTensor,
        dy: *const DLTensor,
        options: *const xvk_softmax_options,
        dx: *mut DLTensor,
    ) -> xvk_status_t;
    pub fn xvk_log_softmax_backward(
        ctx: *mut xvk_context,
        y: *const DLTensor,
        dy: *const DLTensor,
        options: *const xvk_softmax_options,
        dx: *mut DLTensor,
    ) -> xvk_status_t;

    pub fn xvk_layer_norm_forward(
        ctx: *mut xvk_context,
        x: *const DLTensor,
        gamma: *const DLTensor,
        beta: *const DLTensor,
        options: *const xvk_layer_norm_options,
        y: *mut DLTensor,
        mean: *mut DLTensor,
        rstd: *mut DLTensor,
    ) -> xvk_status_t;
    pub fn xvk_layer_norm_backward(
        ctx: *mut xvk_context,
        dy: *const DLTensor,
        x: *const DLTensor,
        gamma: *const DLTensor,
        mean: *const DLTensor,
        rstd: *const DLTensor,
        options: *const xvk_layer_norm_options,
        dx: *mut DLTensor,
        dgamma: *mut DLTensor,
        dbeta: *mut DLTensor,
    ) -> xvk_status_t;

    pub fn xvk_rms_norm_forward(
        ctx: *mut xvk_context,
        x: *const DLTensor,
        gamma: *const DLTensor,
        options: *const xvk_rms_norm_options,
        y: *mut DLTensor,
        rstd: *mut DLTensor,
    ) -> xvk_status_t;
    pub fn xvk_rms_norm_backward(
        ctx: *mut xvk_context,
        dy: *const DLTensor,
        x: *const DLTensor,
        gamma: *const DLTensor,
        rstd: *const DLTensor,
        options: *const xvk_rms_norm_options,
        dx: *mut DLTensor,
        dgamma: *mut DLTensor,
    ) -> xvk_status_t;

    pub fn xvk_batch_norm_mask_words(x: *const DLTensor, words: *mut i64) -> xvk_status_t;
    pub fn xvk_batch_norm_forward_training(
        ctx: *mut xvk_context,
        x: *const DLTensor,
        z: *const DLTensor,
        gamma: *const DLTensor,
        beta: *const DLTensor,
        options: *const xvk_batch_norm_options,
        y: *mut DLTensor,
        mask: *mut DLTensor,
        running_mean: *mut DLTensor,
        running_var: *mut DLTensor,
        saved_mean: *mut DLTensor,
        saved_rstd: *mut DLTensor,
    ) -> xvk_status_t;
    pub fn xvk_batch_norm_forward_inference(
        ctx: *mut xvk_context,
        x: *const DLTensor,
        z: *const DLTensor,
        gamma: *const DLTensor,
        beta: *const DLTensor,
        running_mean: *const DLTensor,
        running_var: *const DLTensor,
        options: *const xvk_batch_norm_options,
        y: *mut DLTensor,
        mask: *mut DLTensor,
    ) -> xvk_status_t;
    pub fn xvk_batch_norm_backward(
        ctx: *mut xvk_context,
        dy: *const DLTensor,
        x: *const DLTensor,
        mask: *const DLTensor,
        y: *const DLTensor,
        gamma: *const DLTensor,
        saved_mean: *const DLTensor,
        saved_rstd: *const DLTensor,
        options: *const xvk_batch_norm_options,
        dx: *mut DLTensor,
        dz: *mut DLTensor,
        dgamma: *mut DLTensor,
        dbeta: *mut DLTensor,
    ) -> xvk_status_t;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    // The C layouts on LP64 targets; a mismatch here would corrupt every call.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn layouts_match_the_c_header() {
        assert_eq!(size_of::<DLDevice>(), 8);
        assert_eq!(size_of::<DLDataType>(), 4);
        assert_eq!(size_of::<DLTensor>(), 48);
        assert_eq!(size_of::<xvk_softmax_options>(), 24);
        assert_eq!(size_of::<xvk_layer_norm_options>(), 32);
        assert_eq!(size_of::<xvk_rms_norm_options>(), 32);
        assert_eq!(size_of::<xvk_batch_norm_options>(), 20);
    }
}
