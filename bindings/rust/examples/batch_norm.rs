//! BatchNorm + ReLU on the CPU backend from Rust: the training forward writes the ReLU mask, the
//! backward reads it. Checks the values shown in the README.
use xvk::{Activation, BatchNormOptions, Context, Tensor, TensorMut};

fn main() -> Result<(), xvk::Error> {
    let x = [1.0f32, 2.0, 3.0, -4.0, 5.0, 0.0, -1.0, 6.0]; // N = 4 rows, C = 2 channels
    let (mut y, mut dx, mut mean, mut rstd, mut dbeta) =
        ([0.0f32; 8], [0.0f32; 8], [0.0f32; 2], [0.0f32; 2], [0.0f32; 2]);
    let mut mask = vec![0u32; xvk::batch_norm_mask_words(&[4, 2])?]; // ceil(8 / 32) = 1 word
    let (ctx, tx) = (Context::cpu()?, Tensor::f32(&x, &[4, 2])?);
    let options = BatchNormOptions { activation: Activation::Relu, ..Default::default() };
    ctx.batch_norm_forward_training(
        &tx,
        None,
        None,
        None,
        options,
        &mut TensorMut::f32(&mut y, &[4, 2])?,
        Some(&mut TensorMut::u32(&mut mask, &[1])?),
        None,
        None,
        Some(&mut TensorMut::f32(&mut mean, &[2])?),
        Some(&mut TensorMut::f32(&mut rstd, &[2])?),
    )?;
    ctx.batch_norm_backward(
        &Tensor::f32(&[1.0; 8], &[4, 2])?,
        &tx,
        Some(&Tensor::u32(&mask, &[1])?),
        None,
        None,
        &Tensor::f32(&mean, &[2])?,
        &Tensor::f32(&rstd, &[2])?,
        options,
        &mut TensorMut::f32(&mut dx, &[4, 2])?,
        None,
        None,
        Some(&mut TensorMut::f32(&mut dbeta, &[2])?),
    )?;
    println!("{} {} {:?}", y[2], mask[0], dbeta); // 0.4472 150 [2.0, 2.0]
    println!("y: {:?}", y);

    // Channel 0 is [1, 3, 5, -1]: mean 2, variance 5. Bit i of the mask is y[i] > 0: bits 1, 2,
    // 4 and 7, so 150. dbeta counts the positive outputs of each channel (dy = 1).
    let ok = (y[2] as f64 - 1.0 / (5.0f64 + 1e-5).sqrt()).abs() < 1e-6 && mask == [150] && dbeta == [2.0, 2.0];
    println!("check: {}", if ok { "ok" } else { "WRONG" });
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
