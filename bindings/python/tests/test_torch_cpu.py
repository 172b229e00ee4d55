"""PyTorch CPU tensors through DLPack on the CPU backend, checked against PyTorch.

Skipped unless torch imports. (test_torch_cuda.py does the same for CUDA tensors on a GPU.)"""
import pytest

import xvk

torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.fixture
def ctx():
    with xvk.Context("cpu") as c:
        yield c


def test_layer_norm_and_softmax(ctx):
    torch.manual_seed(3)
    x, gamma = torch.randn(6, 40), torch.randn(40)
    y = torch.empty_like(x)
    ctx.layer_norm_forward(x, gamma, None, y)
    torch.testing.assert_close(y, F.layer_norm(x, (40,), gamma, None, 1e-5), rtol=1e-5, atol=1e-5)
    p = torch.empty_like(x)
    ctx.softmax_forward(x, p, scale=0.5)
    torch.testing.assert_close(p, torch.softmax(0.5 * x, -1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_batch_norm_relu_mask_then_backward(ctx, memory_format):
    torch.manual_seed(4)
    x = torch.randn(4, 3, 5, 6).to(memory_format=memory_format)
    dy = torch.randn(4, 3, 5, 6).to(memory_format=memory_format)
    gamma, beta = torch.randn(3), torch.randn(3)
    running_mean, running_var = torch.zeros(3), torch.ones(3)
    y, dx = torch.empty_like(x), torch.empty_like(x)  # empty_like keeps x's memory format
    # PyTorch has no uint32 tensors (before 2.3): the mask words may be int32.
    mask = torch.empty(xvk.batch_norm_mask_words(x), dtype=torch.int32)
    saved_mean, saved_rstd, dgamma, dbeta = (torch.empty(3) for _ in range(4))
    relu = xvk.Activation.RELU
    ctx.batch_norm_forward_training(x, gamma, beta, y, mask=mask, running_mean=running_mean,
                                    running_var=running_var, saved_mean=saved_mean, saved_rstd=saved_rstd,
                                    activation=relu)
    ctx.batch_norm_backward(dy, x, saved_mean, saved_rstd, gamma, dx, mask=mask, dgamma=dgamma, dbeta=dbeta,
                            activation=relu)

    # PyTorch's BatchNorm + ReLU in float64, with autograd
    xr, gr, br = (t.double().requires_grad_() for t in (x, gamma, beta))
    rm, rv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    yr = torch.relu(F.batch_norm(xr, rm, rv, gr, br, training=True, momentum=0.1, eps=1e-5))
    yr.backward(dy.double())
    torch.testing.assert_close(y.double(), yr.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(running_mean.double(), rm, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(running_var.double(), rv, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(dx.double(), xr.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dgamma.double(), gr.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dbeta.double(), br.grad, rtol=1e-4, atol=1e-5)

    # bit i of the mask is element i of y in its memory order
    in_memory = y.permute(0, 2, 3, 1) if memory_format == torch.channels_last else y
    positive = in_memory.reshape(-1) > 0
    i = torch.arange(mask.numel() * 32)
    bits = ((mask[i // 32] >> (i % 32)) & 1).bool()
    assert torch.equal(bits[:y.numel()], positive)
    assert not bits[y.numel():].any()


def test_batch_norm_channels_last_backward_needs_the_forward_order(ctx):
    x = torch.randn(2, 3, 4, 4).to(memory_format=torch.channels_last)
    s = torch.ones(3)
    with pytest.raises(xvk.InvalidArgumentError, match="x's strides do not give dy's memory order"):
        ctx.batch_norm_backward(torch.randn(2, 3, 4, 4), x, s, s, None, torch.empty(2, 3, 4, 4))
