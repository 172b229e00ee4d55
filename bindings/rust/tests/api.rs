//! Tests of the Rust binding on the CPU backend, against float64 references written here.
use xvk::{
    Activation, Backend, BatchNormOptions, Causal, Context, DType, LayerNormOptions, RmsNormOptions, SoftmaxOptions,
    Status, Tensor, TensorMut,
};

// A small deterministic generator (values in [-2, 2)), so the tests need no crates.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}

fn assert_close(got: &[f32], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tolerance = atol + rtol * w.abs();
        assert!((g as f64 - w).abs() <= tolerance, "element {}: got {}, want {} (tolerance {})", i, g, w, tolerance);
    }
}

// float64 references over rows of `cols` elements --------------------------------------------

fn ref_softmax(x: &[f32], cols: usize, scale: f64, mask: Option<&dyn Fn(usize, usize) -> f64>) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for (r, row) in x.chunks(cols).enumerate() {
        let z: Vec<f64> =
            row.iter().enumerate().map(|(c, &v)| scale * v as f64 + mask.map_or(0.0, |m| m(r, c))).collect();
        let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = z.iter().map(|&v| (v - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        out.extend(e.iter().map(|v| v / sum));
    }
    out
}

/// (y, mean, rstd) of LayerNorm (or RMSNorm with `rms`), g = gamma per column.
fn ref_norm(
    x: &[f32],
    cols: usize,
    gamma: &[f64],
    beta: &[f64],
    eps: f64,
    rms: bool,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut y, mut means, mut rstds) = (vec![], vec![], vec![]);
    for row in x.chunks(cols) {
        let h: Vec<f64> = row.iter().map(|&v| v as f64).collect();
        let mean = if rms { 0.0 } else { h.iter().sum::<f64>() / cols as f64 };
        let var = h.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / cols as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        y.extend(h.iter().enumerate().map(|(c, v)| (v - mean) * rstd * gamma[c] + beta[c]));
        means.push(mean);
        rstds.push(rstd);
    }
    (y, means, rstds)
}

/// (dx, dgamma, dbeta) of LayerNorm (RMSNorm with `rms`).
fn ref_norm_backward(
    dy: &[f32],
    x: &[f32],
    cols: usize,
    gamma: &[f64],
    eps: f64,
    rms: bool,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (_, means, rstds) = ref_norm(x, cols, gamma, &vec![0.0; cols], eps, rms);
    let (mut dx, mut dgamma, mut dbeta) = (vec![], vec![0.0; cols], vec![0.0; cols]);
    for (r, (dyr, xr)) in dy.chunks(cols).zip(x.chunks(cols)).enumerate() {
        let xhat: Vec<f64> = xr.iter().map(|&v| (v as f64 - means[r]) * rstds[r]).collect();
        let g: Vec<f64> = dyr.iter().enumerate().map(|(c, &v)| v as f64 * gamma[c]).collect();
        let mean_g = if rms { 0.0 } else { g.iter().sum::<f64>() / cols as f64 };
        let mean_gx = g.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / cols as f64;
        dx.extend((0..cols).map(|c| rstds[r] * (g[c] - mean_g - xhat[c] * mean_gx)));
        for c in 0..cols {
            dgamma[c] += dyr[c] as f64 * xhat[c];
            dbeta[c] += dyr[c] as f64;
        }
    }
    (dx, dgamma, dbeta)
}

// BatchNorm over x seen as (n, c, s) channels-first, or (n, s, c) with `last` ------------------

fn channel_of(e: usize, c: usize, s: usize, last: bool) -> usize {
    if last {
        e % c
    } else {
        (e / s) % c
    }
}

/// Per channel: (mean, biased variance, unbiased variance).
fn ref_bn_stats(x: &[f32], c: usize, s: usize, last: bool) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let m = (x.len() / c) as f64;
    let mut mean = vec![0.0; c];
    for (e, &v) in x.iter().enumerate() {
        mean[channel_of(e, c, s, last)] += v as f64 / m;
    }
    let mut sq = vec![0.0; c];
    for (e, &v) in x.iter().enumerate() {
        let ch = channel_of(e, c, s, last);
        sq[ch] += (v as f64 - mean[ch]) * (v as f64 - mean[ch]);
    }
    (mean, sq.iter().map(|q| q / m).collect(), sq.iter().map(|q| q / (m - 1.0)).collect())
}

/// y = activation((x - mean) / sqrt(var + eps) * gamma + beta + z)
#[allow(clippy::too_many_arguments)]
fn ref_bn_forward(
    x: &[f32],
    c: usize,
    s: usize,
    last: bool,
    (mean, var): (&[f64], &[f64]),
    (gamma, beta): (&[f64], &[f64]),
    eps: f64,
    z: Option<&[f32]>,
    relu: bool,
) -> Vec<f64> {
    let mut y = vec![];
    for (e, &v) in x.iter().enumerate() {
        let ch = channel_of(e, c, s, last);
        let mut out =
            (v as f64 - mean[ch]) / (var[ch] + eps).sqrt() * gamma[ch] + beta[ch] + z.map_or(0.0, |z| z[e] as f64);
        if relu && out < 0.0 {
            out = 0.0;
        }
        y.push(out);
    }
    y
}

/// (dx, dgamma, dbeta) of training BatchNorm; `positive`: where y > 0 under ReLU.
fn ref_bn_backward(
    dy: &[f32],
    x: &[f32],
    c: usize,
    s: usize,
    gamma: &[f64],
    eps: f64,
    positive: Option<&[bool]>,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mean, var, _) = ref_bn_stats(x, c, s, false);
    let m = (x.len() / c) as f64;
    let g: Vec<f64> =
        dy.iter().enumerate().map(|(e, &d)| if positive.map_or(true, |p| p[e]) { d as f64 } else { 0.0 }).collect();
    let xhat: Vec<f64> =
        x.iter().enumerate().map(|(e, &v)| (v as f64 - mean[(e / s) % c]) / (var[(e / s) % c] + eps).sqrt()).collect();
    let (mut dgamma, mut dbeta) = (vec![0.0; c], vec![0.0; c]);
    for e in 0..x.len() {
        dbeta[(e / s) % c] += g[e];
        dgamma[(e / s) % c] += g[e] * xhat[e];
    }
    let dx = (0..x.len())
        .map(|e| {
            let ch = (e / s) % c;
            gamma[ch] / (var[ch] + eps).sqrt() * (g[e] - dbeta[ch] / m - xhat[e] * dgamma[ch] / m)
        })
        .collect();
    (dx, dgamma, dbeta)
}

/// Bit e of a ReLU mask: bit e % 32 of word e / 32.
fn mask_bit(mask: &[u32], e: usize) -> bool {
    (mask[e / 32] >> (e % 32)) & 1 == 1
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

// half precision bit patterns (round to nearest even; normal and subnormal values) -------------

fn f32_to_f16(v: f32) -> u16 {
    let bits = v.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let mant = bits & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    let (m, shift) = if e <= 0 {
        if e < -10 {
            return sign;
        }
        (mant | 0x80_0000, (14 - e) as u32)
    } else {
        (mant, 13)
    };
    let mut half = (m >> shift) as u16;
    let rest = m & ((1 << shift) - 1);
    let halfway = 1 << (shift - 1);
    if rest > halfway || (rest == halfway && half & 1 == 1) {
        half += 1; // may carry into the exponent, which is right
    }
    if e <= 0 {
        sign | half
    } else {
        sign | (((e as u16) << 10) + half)
    }
}

fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let mant = (h & 0x3ff) as f32;
    match exp {
        0 => sign * mant * 2f32.powi(-24),
        0x1f => {
            if mant == 0.0 {
                sign * f32::INFINITY
            } else {
                f32::NAN
            }
        }
        _ => sign * (1.0 + mant / 1024.0) * 2f32.powi(exp - 15),
    }
}

// library, errors, backends, contexts ----------------------------------------------------------

#[test]
fn version_and_names() {
    let (major, minor, _) = xvk::version();
    assert_eq!(major, xvk::sys::XVK_VERSION_MAJOR);
    assert!(minor >= xvk::sys::XVK_VERSION_MINOR);
    assert_eq!(Status::InvalidArgument.name(), "XVK_ERROR_INVALID_ARGUMENT");
    assert_eq!(Backend::Cuda.name(), "cuda");
    assert_eq!(Backend::Hip.name(), "hip");
}

#[test]
fn backend_query() {
    let cpu = xvk::backend_query(Backend::Cpu).unwrap();
    assert!(cpu.available && cpu.device_count == 1 && !cpu.reason.is_empty());
    for backend in [Backend::Cuda, Backend::Hip] {
        let info = xvk::backend_query(backend).unwrap();
        assert!(!info.reason.is_empty()); // says why, either way
    }
}

#[test]
fn context_lifecycle() {
    let ctx = Context::new(Backend::Cpu, 0).unwrap();
    assert_eq!(ctx.device().unwrap(), (Backend::Cpu, 0));
    unsafe { ctx.set_stream(std::ptr::null_mut()) }.unwrap();
    ctx.synchronize().unwrap();
    // The CPU backend takes the NULL stream only.
    let e = unsafe { ctx.set_stream(0x1000 as *mut std::os::raw::c_void) }.unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().starts_with("xvk_context_set_stream"), "{}", e);
    drop(ctx);
}

#[test]
fn unavailable_backend_is_an_error_with_the_reason() {
    if xvk::backend_query(Backend::Hip).unwrap().available {
        return; // a HIP device is present
    }
    let e = Context::new(Backend::Hip, 0).unwrap_err();
    assert_eq!(e.status(), Status::BackendUnavailable);
    assert!(e.message().starts_with("xvk_context_create"), "{}", e);
}

#[test]
fn device_buffers() {
    let ctx = Context::cpu().unwrap();
    let x = Rng(3).vec(2 * 8);
    let mut bx = ctx.alloc(x.len() * 4).unwrap();
    let mut by = ctx.alloc(x.len() * 4).unwrap();
    assert_eq!(bx.as_ptr() as usize % 256, 0);
    bx.copy_from_host(&x).unwrap();
    ctx.softmax_forward(
        &bx.tensor(DType::F32, &[2, 8]).unwrap(),
        &mut by.tensor_mut(DType::F32, &[2, 8]).unwrap(),
        &SoftmaxOptions::default(),
    )
    .unwrap();
    let mut y = vec![0.0f32; x.len()];
    by.copy_to_host(&mut y).unwrap();
    assert_close(&y, &ref_softmax(&x, 8, 1.0, None), 1e-5, 1e-6);
    assert!(bx.tensor(DType::F32, &[3, 8]).is_err());
}

// the example's values -------------------------------------------------------------------------

#[test]
fn example_values() {
    let ctx = Context::cpu().unwrap();
    let x = [1.0f32, 2.0, 3.0, 4.0, -1.0, 0.0, 1.0, 6.0];
    let (mut y, mut p) = ([0.0f32; 8], [0.0f32; 8]);
    let tx = Tensor::f32(&x, &[2, 4]).unwrap();
    ctx.layer_norm_forward(
        &tx,
        None,
        None,
        LayerNormOptions::default(),
        &mut TensorMut::f32(&mut y, &[2, 4]).unwrap(),
        None,
        None,
    )
    .unwrap();
    ctx.softmax_forward(&tx, &mut TensorMut::f32(&mut p, &[2, 4]).unwrap(), &SoftmaxOptions::default()).unwrap();
    assert!((y[0] as f64 + 1.5 / (1.25f64 + 1e-5).sqrt()).abs() < 1e-5, "{}", y[0]); // -1.3416
    let e = std::f64::consts::E;
    assert!((p[3] as f64 - 1.0 / (1.0 + 1.0 / e + 1.0 / (e * e) + 1.0 / (e * e * e))).abs() < 1e-6, "{}", p[3]);
    // 0.6439
}

// float32 against the references ---------------------------------------------------------------

#[test]
fn softmax_forward_backward() {
    let ctx = Context::cpu().unwrap();
    let mut rng = Rng(1);
    let (x, dy) = (rng.vec(4 * 7), rng.vec(4 * 7));
    let (mut y, mut dx) = (vec![f32::NAN; 28], vec![f32::NAN; 28]);
    let options = SoftmaxOptions { scale: 0.5, ..Default::default() };
    ctx.softmax_forward(&Tensor::f32(&x, &[4, 7]).unwrap(), &mut TensorMut::f32(&mut y, &[4, 7]).unwrap(), &options)
        .unwrap();
    let r = ref_softmax(&x, 7, 0.5, None);
    assert_close(&y, &r, 1e-5, 1e-6);
    ctx.softmax_backward(
        &Tensor::f32(&y, &[4, 7]).unwrap(),
        &Tensor::f32(&dy, &[4, 7]).unwrap(),
        &mut TensorMut::f32(&mut dx, &[4, 7]).unwrap(),
        &options,
    )
    .unwrap();
    let mut want = vec![];
    for (rr, dr) in r.chunks(7).zip(dy.chunks(7)) {
        let dot: f64 = rr.iter().zip(dr).map(|(a, &b)| a * b as f64).sum();
        want.extend(rr.iter().zip(dr).map(|(a, &b)| 0.5 * a * (b as f64 - dot)));
    }
    assert_close(&dx, &want, 1e-4, 1e-6);
}

#[test]
fn log_softmax_forward_backward() {
    let ctx = Context::cpu().unwrap();
    let mut rng = Rng(2);
    let (x, dy) = (rng.vec(3 * 9), rng.vec(3 * 9));
    let (mut y, mut dx) = (vec![0.0f32; 27], vec![0.0f32; 27]);
    let options = SoftmaxOptions::default();
    ctx.log_softmax_forward(
        &Tensor::f32(&x, &[3, 9]).unwrap(),
        &mut TensorMut::f32(&mut y, &[3, 9]).unwrap(),
        &options,
    )
    .unwrap();
    let r = ref_softmax(&x, 9, 1.0, None);
    assert_close(&y, &r.iter().map(|v| v.ln()).collect::<Vec<_>>(), 1e-5, 1e-5);
    ctx.log_softmax_backward(
        &Tensor::f32(&y, &[3, 9]).unwrap(),
        &Tensor::f32(&dy, &[3, 9]).unwrap(),
        &mut TensorMut::f32(&mut dx, &[3, 9]).unwrap(),
        &options,
    )
    .unwrap();
    let mut want = vec![];
    for (rr, dr) in r.chunks(9).zip(dy.chunks(9)) {
        let sum: f64 = dr.iter().map(|&v| v as f64).sum();
        want.extend(rr.iter().zip(dr).map(|(a, &b)| b as f64 - a * sum));
    }
    assert_close(&dx, &want, 1e-4, 1e-5);
}

#[test]
fn softmax_causal_and_mask() {
    let ctx = Context::cpu().unwrap();
    let mut rng = Rng(4);
    let x = rng.vec(2 * 3 * 5);
    let tx = Tensor::f32(&x, &[2, 3, 5]).unwrap();
    let mut y = vec![0.0f32; 30];
    // rows r of x are row r % 3 of each 3 x 5 matrix
    let top_left = |r: usize, c: usize| if c <= r % 3 { 0.0 } else { f64::NEG_INFINITY };
    let options = SoftmaxOptions { causal: Causal::TopLeft, ..Default::default() };
    ctx.softmax_forward(&tx, &mut TensorMut::f32(&mut y, &[2, 3, 5]).unwrap(), &options).unwrap();
    assert_close(&y, &ref_softmax(&x, 5, 1.0, Some(&top_left)), 1e-5, 1e-6);
    let bottom_right = |r: usize, c: usize| if c <= r % 3 + 2 { 0.0 } else { f64::NEG_INFINITY };
    let options = SoftmaxOptions { causal: Causal::BottomRight, ..Default::default() };
    ctx.softmax_forward(&tx, &mut TensorMut::f32(&mut y, &[2, 3, 5]).unwrap(), &options).unwrap();
    assert_close(&y, &ref_softmax(&x, 5, 1.0, Some(&bottom_right)), 1e-5, 1e-6);
    // a 3 x 5 additive mask broadcast over the leading dimension, one element masked out
    let mut mask = rng.vec(15);
    mask[5 + 2] = f32::NEG_INFINITY;
    let tm = Tensor::f32(&mask, &[3, 5]).unwrap();
    let options = SoftmaxOptions { scale: 2.0, mask: Some(&tm), ..Default::default() };
    ctx.softmax_forward(&tx, &mut TensorMut::f32(&mut y, &[2, 3, 5]).unwrap(), &options).unwrap();
    let m = |r: usize, c: usize| mask[(r % 3) * 5 + c] as f64;
    assert_close(&y, &ref_softmax(&x, 5, 2.0, Some(&m)), 1e-5, 1e-6);
    assert_eq!((y[7], y[15 + 7]), (0.0, 0.0));
}

#[test]
fn layer_norm_forward_backward() {
    let ctx = Context::cpu().unwrap();
    let mut rng = Rng(5);
    let (x, gamma, beta, dy) = (rng.vec(5 * 8), rng.vec(8), rng.vec(8), rng.vec(5 * 8));
    let (mut y, mut mean, mut rstd) = (vec![0.0f32; 40], vec![0.0f32; 5], vec![0.0f32; 5]);
    let (tx, tg) = (Tensor::f32(&x, &[5, 8]).unwrap(), Tensor::f32(&gamma, &[8]).unwrap());
    ctx.layer_norm_forward(
        &tx,
        Some(&tg),
        Some(&Tensor::f32(&beta, &[8]).unwrap()),
        LayerNormOptions { epsilon: 1e-3, ..Default::default() },
        &mut TensorMut::f32(&mut y, &[5, 8]).unwrap(),
        Some(&mut TensorMut::f32(&mut mean, &[5]).unwrap()),
        Some(&mut TensorMut::f32(&mut rstd, &[5]).unwrap()),
    )
    .unwrap();
    let (ry, rmean, rrstd) = ref_norm(&x, 8, &f64s(&gamma), &f64s(&beta), 1e-3, false);
    assert_close(&y, &ry, 1e-5, 1e-5);
    assert_close(&mean, &rmean, 1e-5, 1e-6);
    assert_close(&rstd, &rrstd, 1e-5, 0.0);

    let (mut dx, mut dgamma, mut dbeta) = (vec![0.0f32; 40], vec![0.0f32; 8], vec![0.0f32; 8]);
    ctx.layer_norm_backward(
        &Tensor::f32(&dy, &[5, 8]).unwrap(),
        &tx,
        Some(&tg),
        &Tensor::f32(&mean, &[5]).unwrap(),
        &Tensor::f32(&rstd, &[5]).unwrap(),
        LayerNormOptions::default(),
        &mut TensorMut::f32(&mut dx, &[5, 8]).unwrap(),
        Some(&mut TensorMut::f32(&mut dgamma, &[8]).unwrap()),
        Some(&mut TensorMut::f32(&mut dbeta, &[8]).unwrap()),
    )
    .unwrap();
    let (rdx, rdgamma, rdbeta) = ref_norm_backward(&dy, &x, 8, &f64s(&gamma), 1e-3, false);
    assert_close(&dx, &rdx, 1e-4, 1e-5);
    assert_close(&dgamma, &rdgamma, 1e-4, 1e-5);
    assert_close(&dbeta, &rdbeta, 1e-4, 1e-5);
}

#[test]
fn layer_norm_options() {
    // normalized over the last two dimensions (3 x 4), zero-centered gamma, fused residual
    let ctx = Context::cpu().unwrap();
    let mut rng = Rng(6);
    let (x, r, gamma) = (rng.vec(24), rng.vec(24), rng.vec(12));
    let (mut y, mut h, mut mean) = (vec![0.0f32; 24], vec![0.0f32; 24], vec![0.0f32; 2]);
    let tr = Tensor::f32(&r, &[2, 3, 4]).unwrap();
    let mut th = TensorMut::f32(&mut h, &[2, 3, 4]).unwrap();
    let options = LayerNormOptions {
        normalized_ndim: 2,
        zero_centered_gamma: true,
        residual: Some(&tr),
        residual_out: Some(&mut th),
        ..Default::default()
    };
    ctx.layer_norm_forward(
        &Tensor::f32(&x, &[2, 3, 4]).unwrap(),
        Some(&Tensor::f32(&gamma, &[3, 4]).unwrap()),
        None,
        options,
        &mut TensorMut::f32(&mut y, &[2, 3, 4]).unwrap(),
        Some(&mut TensorMut::f32(&mut mean, &[2]).unwrap()),
        None,
    )
    .unwrap();
    drop(th);
    let sum: Vec<f32> = x.iter().zip(&r).map(|(a, b)| a + b).collect();
    let g: Vec<f64> = gamma.iter().map(|&v| 1.0 + v as f64).collect();
    let (ry, rmean, _) = ref_norm(&sum, 12, &g, &[0.0; 12], 1e-5, false);
    assert_close(&y, &ry, 1e-5, 1e-5);
    assert_close(&mean, &rmean, 1e-5, 1e-6);
    assert_close(&h, &f64s(&sum), 1e-6, 0.0);
}

#[test]
fn rms_norm_forward_backward() {
    let ctx = Context::cpu().unwrap();
    let mut rng = Rng(7);
    let (x, gamma, dy) = (rng.vec(4 * 6), rng.vec(6), rng.vec(4 * 6));
    let (mut y, mut rstd) = (vec![0.0f32; 24], vec![0.0f32; 4]);
    let (tx, tg) = (Tensor::f32(&x, &[4, 6]).unwrap(), Tensor::f32(&gamma, &[6]).unwrap());
    ctx.rms_norm_forward(
        &tx,
        Some(&tg),
        RmsNormOptions::default(),
        &mut TensorMut::f32(&mut y, &[4, 6]).unwrap(),
        Some(&mut TensorMut::f32(&mut rstd, &[4]).unwrap()),
    )
    .unwrap();
    let (ry, _, rrstd) = ref_norm(&x, 6, &f64s(&gamma), &[0.0; 6], 1e-6, true);
    assert_close(&y, &ry, 1e-5, 1e-5);
    assert_close(&rstd, &rrstd, 1e-5, 0.0);
    let (mut dx, mut dgamma) = (vec![0.0f32; 24], vec![0.0f32; 6]);
    ctx.rms_norm_backward(
        &Tensor::f32(&dy, &[4, 6]).unwrap(),
        &tx,
        Some(&tg),
        &Tensor::f32(&rstd, &[4]).unwrap(),
        RmsNormOptions::default(),
        &mut TensorMut::f32(&mut dx, &[4, 6]).unwrap(),
        Some(&mut TensorMut::f32(&mut dgamma, &[6]).unwrap()),
    )
    .unwrap();
    let (rdx, rdgamma, _) = ref_norm_backward(&dy, &x, 6, &f64s(&gamma), 1e-6, true);
    assert_close(&dx, &rdx, 1e-4, 1e-5);
    assert_close(&dgamma, &rdgamma, 1e-4, 1e-5);
}

#[test]
fn rms_norm_residual() {
    let ctx = Context::cpu().unwrap();
    let mut rng = Rng(8);
    let (x, r) = (rng.vec(15), rng.vec(15));
    let (mut y, mut h) = (vec![0.0f32; 15], vec![0.0f32; 15]);
    let tr = Tensor::f32(&r, &[3, 5]).unwrap();
    let mut th = TensorMut::f32(&mut h, &[3, 5]).unwrap();
    let options =
        RmsNormOptions { epsilon: 1e-4, residual: Some(&tr), residual_out: Some(&mut th), ..Default::default() };
    ctx.rms_norm_forward(
        &Tensor::f32(&x, &[3, 5]).unwrap(),
        None,
        options,
        &mut TensorMut::f32(&mut y, &[3, 5]).unwrap(),
        None,
    )
    .unwrap();
    drop(th);
    let sum: Vec<f32> = x.iter().zip(&r).map(|(a, b)| a + b).collect();
    assert_close(&y, &ref_norm(&sum, 5, &[1.0; 5], &[0.0; 5], 1e-4, true).0, 1e-5, 1e-5);
    assert_close(&h, &f64s(&sum), 1e-6, 0.0);
}

// BatchNorm --------------------------------------------------------------------------------------

#[test]
fn batch_norm_training_relu_mask_then_backward() {
    let ctx = Context::cpu().unwrap();
    let mut rng = Rng(11);
    let shape = [4i64, 3, 5]; // N, C, spatial: 60 elements
    let (x, gamma, beta, dy) = (rng.vec(60), rng.vec(3), rng.vec(3), rng.vec(60));
    let words = xvk::batch_norm_mask_words(&shape).unwrap();
    assert_eq!(words, 2);
    let (mut y, mut mask) = (vec![f32::NAN; 60], vec![0xdead_beefu32; words]);
    let (mut running_mean, mut running_var) = (vec![0.0f32; 3], vec![1.0f32; 3]);
    let (mut saved_mean, mut saved_rstd) = (vec![0.0f32; 3], vec![0.0f32; 3]);
    let (tx, tg) = (Tensor::f32(&x, &shape).unwrap(), Tensor::f32(&gamma, &[3]).unwrap());
    let options = BatchNormOptions { momentum: 0.25, activation: Activation::Relu, ..Default::default() };
    ctx.batch_norm_forward_training(
        &tx,
        None,
        Some(&tg),
        Some(&Tensor::f32(&beta, &[3]).unwrap()),
        options,
        &mut TensorMut::f32(&mut y, &shape).unwrap(),
        Some(&mut TensorMut::u32(&mut mask, &[words as i64]).unwrap()),
        Some(&mut TensorMut::f32(&mut running_mean, &[3]).unwrap()),
        Some(&mut TensorMut::f32(&mut running_var, &[3]).unwrap()),
        Some(&mut TensorMut::f32(&mut saved_mean, &[3]).unwrap()),
        Some(&mut TensorMut::f32(&mut saved_rstd, &[3]).unwrap()),
    )
    .unwrap();
    let (mean, var, unbiased) = ref_bn_stats(&x, 3, 5, false);
    let ry = ref_bn_forward(&x, 3, 5, false, (&mean, &var), (&f64s(&gamma), &f64s(&beta)), 1e-5, None, true);
    assert_close(&y, &ry, 1e-5, 1e-5);
    assert_close(&saved_mean, &mean, 1e-5, 1e-6);
    assert_close(&saved_rstd, &var.iter().map(|v| 1.0 / (v + 1e-5).sqrt()).collect::<Vec<_>>(), 1e-5, 0.0);
    assert_close(&running_mean, &mean.iter().map(|m| 0.25 * m).collect::<Vec<_>>(), 1e-5, 1e-6);
    assert_close(&running_var, &unbiased.iter().map(|v| 0.75 + 0.25 * v).collect::<Vec<_>>(), 1e-5, 0.0);
    // bit e of the mask is y[e] > 0; the 4 bits past the 60 elements are 0
    let positive: Vec<bool> = y.iter().map(|&v| v > 0.0).collect();
    let bits: Vec<bool> = (0..64).map(|e| mask_bit(&mask, e)).collect();
    assert_eq!(&bits[..60], &positive[..]);
    assert!(!bits[60..].iter().any(|&b| b));
    assert!(positive.iter().any(|&p| p) && !positive.iter().all(|&p| p));

    let (mut dx, mut dz, mut dgamma, mut dbeta) =
        (vec![0.0f32; 60], vec![f32::NAN; 60], vec![0.0f32; 3], vec![0.0f32; 3]);
    let (tsm, tss) = (Tensor::f32(&saved_mean, &[3]).unwrap(), Tensor::f32(&saved_rstd, &[3]).unwrap());
    let tdy = Tensor::f32(&dy, &shape).unwrap();
    ctx.batch_norm_backward(
        &tdy,
        &tx,
        Some(&Tensor::u32(&mask, &[words as i64]).unwrap()),
        None,
        Some(&tg),
        &tsm,
        &tss,
        options,
        &mut TensorMut::f32(&mut dx, &shape).unwrap(),
        Some(&mut TensorMut::f32(&mut dz, &shape).unwrap()),
        Some(&mut TensorMut::f32(&mut dgamma, &[3]).unwrap()),
        Some(&mut TensorMut::f32(&mut dbeta, &[3]).unwrap()),
    )
    .unwrap();
    for e in 0..60 {
        assert_eq!(dz[e], if positive[e] { dy[e] } else { 0.0 }, "dz[{}]: dy masked", e);
    }
    let (rdx, rdgamma, rdbeta) = ref_bn_backward(&dy, &x, 3, 5, &f64s(&gamma), 1e-5, Some(&positive));
    assert_close(&dx, &rdx, 1e-4, 1e-5);
    assert_close(&dgamma, &rdgamma, 1e-4, 1e-5);
    assert_close(&dbeta, &rdbeta, 1e-4, 1e-5);
    // from y instead of the mask: the same bits, so bitwise the same dx
    let mut dx2 = vec![0.0f32; 60];
    ctx.batch_norm_backward(
        &tdy,
        &tx,
        None,
        Some(&Tensor::f32(&y, &shape).unwrap()),
        Some(&tg),
        &tsm,
        &tss,
        options,
        &mut TensorMut::f32(&mut dx2, &shape).unwrap(),
        None,
        None,
        None,
    )
    .unwrap();
    assert_eq!(dx, dx2);
}

#[test]
fn batch_norm_channels_last_mean_is_beta() {
    // (N, H, W, C) = (3, 2, 4, 5) with channel_axis -1; without activation each channel of y has
    // mean beta and (biased) standard deviation |gamma|
    let ctx = Context::cpu().unwrap();
    let mut rng = Rng(12);
    let shape = [3i64, 2, 4, 5];
    let x = rng.vec(120);
    let gamma: Vec<f32> = rng.vec(5).iter().map(|g| g + 3.0).collect();
    let beta = rng.vec(5);
    let mut y = vec![0.0f32; 120];
    ctx.batch_norm_forward_training(
        &Tensor::f32(&x, &shape).unwrap(),
        None,
        Some(&Tensor::f32(&gamma, &[5]).unwrap()),
        Some(&Tensor::f32(&beta, &[5]).unwrap()),
        BatchNormOptions { channel_axis: -1, ..Default::default() },
        &mut TensorMut::f32(&mut y, &shape).unwrap(),
        None,
        None,
        None,
        None,
        None,
    )
    .unwrap();
    let (mean, var, _) = ref_bn_stats(&y, 5, 24, true);
    assert_close(&beta, &mean, 0.0, 1e-5);
    let std: Vec<f64> = var.iter().map(|v| v.sqrt()).collect();
    assert_close(&gamma, &std, 1e-4, 0.0);
    let (xm, xv, _) = ref_bn_stats(&x, 5, 24, true);
    assert_close(
        &y,
        &ref_bn_forward(&x, 5, 24, true, (&xm, &xv), (&f64s(&gamma), &f64s(&beta)), 1e-5, None, false),
        1e-5,
        1e-5,
    );
}

#[test]
fn batch_norm_inference_add_relu() {
    let ctx = Context::cpu().unwrap();
    let mut rng = Rng(13);
    let shape = [2i64, 3, 4];
    let (x, z, gamma, beta, running_mean) = (rng.vec(24), rng.vec(24), rng.vec(3), rng.vec(3), rng.vec(3));
    let running_var: Vec<f32> = rng.vec(3).iter().map(|v| v.abs() + 0.5).collect();
    let mut y = vec![f32::NAN; 24];
    let mut mask = vec![0u32; xvk::batch_norm_mask_words(&shape).unwrap()];
    ctx.batch_norm_forward_inference(
        &Tensor::f32(&x, &shape).unwrap(),
        Some(&Tensor::f32(&z, &shape).unwrap()),
        Some(&Tensor::f32(&gamma, &[3]).unwrap()),
        Some(&Tensor::f32(&beta, &[3]).unwrap()),
        &Tensor::f32(&running_mean, &[3]).unwrap(),
        &Tensor::f32(&running_var, &[3]).unwrap(),
        BatchNormOptions { epsilon: 1e-3, activation: Activation::Relu, ..Default::default() },
        &mut TensorMut::f32(&mut y, &shape).unwrap(),
        Some(&mut TensorMut::u32(&mut mask, &[1]).unwrap()),
    )
    .unwrap();
    let stats = (&f64s(&running_mean)[..], &f64s(&running_var)[..]);
    let want = ref_bn_forward(&x, 3, 4, false, stats, (&f64s(&gamma), &f64s(&beta)), 1e-3, Some(&z), true);
    assert_close(&y, &want, 1e-5, 1e-5);
    for (e, &v) in y.iter().enumerate() {
        assert_eq!(mask_bit(&mask, e), v > 0.0, "mask bit {}", e);
    }
}

#[test]
fn batch_norm_mask_words() {
    assert_eq!(xvk::batch_norm_mask_words(&[4, 3, 5]).unwrap(), 2);
    assert_eq!(xvk::batch_norm_mask_words(&[2, 16]).unwrap(), 1);
    assert_eq!(xvk::batch_norm_mask_words(&[2, 17]).unwrap(), 2);
    assert_eq!(xvk::batch_norm_mask_words(&[8, 3, 0]).unwrap(), 0);
    let e = xvk::batch_norm_mask_words(&[2, -1]).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().starts_with("xvk_batch_norm_mask_words: x has a negative size"), "{}", e);
}

#[test]
fn batch_norm_errors() {
    let ctx = Context::cpu().unwrap();
    let x = Rng(14).vec(12);
    let tx = Tensor::f32(&x, &[4, 3]).unwrap();
    let gamma = [1.0f32; 2];
    let (mut y, mut mask) = ([7.0f32; 12], [7u32; 1]);
    let relu = BatchNormOptions { activation: Activation::Relu, ..Default::default() };
    let e = ctx
        .batch_norm_forward_training(
            &tx,
            None,
            Some(&Tensor::f32(&gamma, &[2]).unwrap()),
            None,
            relu,
            &mut TensorMut::f32(&mut y, &[4, 3]).unwrap(),
            Some(&mut TensorMut::u32(&mut mask, &[1]).unwrap()),
            None,
            None,
            None,
            None,
        )
        .unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert_eq!(
        e.message(),
        "xvk_batch_norm_forward_training: gamma has 2 elements, expected 3 (the number of channels)"
    );
    assert!(y.iter().all(|&v| v == 7.0) && mask[0] == 7); // nothing written
                                                          // a mask of the wrong size, a mask without ReLU
    let mut big = [0u32; 3];
    let e = ctx
        .batch_norm_forward_training(
            &tx,
            None,
            None,
            None,
            relu,
            &mut TensorMut::f32(&mut y, &[4, 3]).unwrap(),
            Some(&mut TensorMut::u32(&mut big, &[3]).unwrap()),
            None,
            None,
            None,
            None,
        )
        .unwrap_err();
    assert!(e.message().contains("mask has 3 elements, expected 1"), "{}", e);
    let e = ctx
        .batch_norm_forward_training(
            &tx,
            None,
            None,
            None,
            BatchNormOptions::default(),
            &mut TensorMut::f32(&mut y, &[4, 3]).unwrap(),
            Some(&mut TensorMut::u32(&mut mask, &[1]).unwrap()),
            None,
            None,
            None,
            None,
        )
        .unwrap_err();
    assert!(e.message().contains("mask is given but options->activation"), "{}", e);
    // the backward under ReLU needs the mask or y
    let s = [1.0f32; 3];
    let ts = Tensor::f32(&s, &[3]).unwrap();
    let mut dx = [0.0f32; 12];
    let e = ctx
        .batch_norm_backward(
            &tx,
            &tx,
            None,
            None,
            None,
            &ts,
            &ts,
            relu,
            &mut TensorMut::f32(&mut dx, &[4, 3]).unwrap(),
            None,
            None,
            None,
        )
        .unwrap_err();
    assert!(e.message().contains("mask and y are both NULL"), "{}", e);
    // u16 bit patterns are not mask words
    assert!(Tensor::bits16(&[0u16; 4], DType::U32, &[4]).is_err());
}

// errors -----------------------------------------------------------------------------------------

#[test]
fn wrong_gamma_length_is_an_error_with_the_library_message() {
    let ctx = Context::cpu().unwrap();
    let x = Rng(9).vec(8);
    let gamma = [1.0f32; 3];
    let mut y = [7.0f32; 8];
    let e = ctx
        .layer_norm_forward(
            &Tensor::f32(&x, &[2, 4]).unwrap(),
            Some(&Tensor::f32(&gamma, &[3]).unwrap()),
            None,
            LayerNormOptions::default(),
            &mut TensorMut::f32(&mut y, &[2, 4]).unwrap(),
            None,
            None,
        )
        .unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert_eq!(e.message(), "xvk_layer_norm_forward: gamma has 3 elements, expected 4 (the normalized size)");
    assert_eq!(e.to_string(), e.message());
    assert_eq!(xvk::last_error_message(), e.message());
    assert!(y.iter().all(|&v| v == 7.0)); // nothing written
}

#[test]
fn other_errors() {
    let ctx = Context::cpu().unwrap();
    let x = [0.5f32; 8];
    let mut y = [0.0f32; 8];
    let e = ctx
        .layer_norm_forward(
            &Tensor::f32(&x, &[2, 4]).unwrap(),
            None,
            None,
            LayerNormOptions { epsilon: 0.0, ..Default::default() },
            &mut TensorMut::f32(&mut y, &[2, 4]).unwrap(),
            None,
            None,
        )
        .unwrap_err();
    assert!(e.message().contains("options->epsilon"), "{}", e);
    // the binding's own check: a shape that does not match the slice
    let e = Tensor::f32(&x, &[3, 4]).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(Tensor::bits16(&[0u16; 4], DType::F32, &[4]).is_err());
    // dtypes must match
    let h = [0u16; 8];
    let e = ctx
        .softmax_forward(
            &Tensor::bits16(&h, DType::F16, &[2, 4]).unwrap(),
            &mut TensorMut::f32(&mut y, &[2, 4]).unwrap(),
            &SoftmaxOptions::default(),
        )
        .unwrap_err();
    assert!(e.message().contains("dtype"), "{}", e);
}

// float16 ------------------------------------------------------------------------------------------

#[test]
fn float16() {
    let ctx = Context::cpu().unwrap();
    let mut rng = Rng(10);
    let xs = rng.vec(3 * 16);
    let x: Vec<u16> = xs.iter().map(|&v| f32_to_f16(v)).collect();
    let x_rounded: Vec<f32> = x.iter().map(|&h| f16_to_f32(h)).collect();
    let (gamma, beta) = (rng.vec(16), rng.vec(16)); // float32 parameters with fp16 activations
    let mut y = vec![0u16; 48];
    let tx = Tensor::bits16(&x, DType::F16, &[3, 16]).unwrap();
    ctx.layer_norm_forward(
        &tx,
        Some(&Tensor::f32(&gamma, &[16]).unwrap()),
        Some(&Tensor::f32(&beta, &[16]).unwrap()),
        LayerNormOptions::default(),
        &mut TensorMut::bits16(&mut y, DType::F16, &[3, 16]).unwrap(),
        None,
        None,
    )
    .unwrap();
    let yf: Vec<f32> = y.iter().map(|&h| f16_to_f32(h)).collect();
    // fp16 output: 11 significant bits, a few units in the last place for values of order 1
    assert_close(&yf, &ref_norm(&x_rounded, 16, &f64s(&gamma), &f64s(&beta), 1e-5, false).0, 2e-3, 4e-3);
    let mut p = vec![0u16; 48];
    ctx.softmax_forward(&tx, &mut TensorMut::bits16(&mut p, DType::F16, &[3, 16]).unwrap(), &SoftmaxOptions::default())
        .unwrap();
    let pf: Vec<f32> = p.iter().map(|&h| f16_to_f32(h)).collect();
    assert_close(&pf, &ref_softmax(&x_rounded, 16, 1.0, None), 2e-3, 1e-4);
}

#[test]
fn half_conversions() {
    for &(v, bits) in &[
        (1.0f32, 0x3c00u16),
        (-2.0, 0xc000),
        (65504.0, 0x7bff),
        (6.1035156e-5, 0x0400),
        (5.9604645e-8, 0x0001),
        (0.0, 0),
    ] {
        assert_eq!(f32_to_f16(v), bits, "{}", v);
        assert_eq!(f16_to_f32(bits), v);
    }
}
