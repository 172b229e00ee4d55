//! LayerNorm and softmax on the CPU backend from Rust; checks one value of each.
use xvk::{Context, LayerNormOptions, SoftmaxOptions, Tensor, TensorMut};

fn main() -> Result<(), xvk::Error> {
    let x = [1.0f32, 2.0, 3.0, 4.0, -1.0, 0.0, 1.0, 6.0];
    let (mut y, mut p) = ([0.0f32; 8], [0.0f32; 8]);
    let ctx = Context::cpu()?;
    let tx = Tensor::f32(&x, &[2, 4])?;
    let options = LayerNormOptions { epsilon: 1e-5, ..Default::default() };
    ctx.layer_norm_forward(&tx, None, None, options, &mut TensorMut::f32(&mut y, &[2, 4])?, None, None)?;
    ctx.softmax_forward(&tx, &mut TensorMut::f32(&mut p, &[2, 4])?, &SoftmaxOptions::default())?;
    let (major, minor, patch) = xvk::version();
    println!("xvk {}.{}.{}", major, minor, patch);
    println!("layer_norm: {:?}", y);
    println!("softmax:    {:?}", p);

    // Row 0 has mean 2.5 and variance 1.25; its softmax ends in 1 / (1 + e^-1 + e^-2 + e^-3).
    let ok = (y[0] as f64 + 1.5 / (1.25f64 + 1e-5).sqrt()).abs() < 1e-5 && (p[3] - 0.643_914_3).abs() < 1e-6;
    println!("check: {}", if ok { "ok" } else { "WRONG" });
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
