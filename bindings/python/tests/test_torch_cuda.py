"""PyTorch CUDA tensors through DLPack on the CUDA backend, checked against PyTorch.

Skipped unless torch imports, torch sees a CUDA device and xvk's CUDA backend is available
(libxvk_cuda.so next to libxvk or in XVK_BACKEND_PATH)."""
import pytest

import xvk

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("torch has no CUDA device", allow_module_level=True)
_cuda = xvk.backend_query("cuda")
if not _cuda.available:
    pytest.skip("xvk's CUDA backend is unavailable: " + _cuda.reason, allow_module_level=True)


@pytest.fixture
def ctx():
    device = torch.cuda.current_device()
    with xvk.Context("cuda", device) as c:
        # Enqueue on torch's current stream, so that torch's own work orders with ours.
        c.set_stream(torch.cuda.current_stream().cuda_stream)
        yield c


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 4e-3), (torch.bfloat16, 3e-2)])
def test_layer_norm_and_softmax(ctx, dtype, tol):
    torch.manual_seed(5)
    x = torch.randn(64, 1000, device="cuda", dtype=dtype)
    gamma = torch.randn(1000, device="cuda", dtype=dtype)
    beta = torch.randn(1000, device="cuda", dtype=dtype)
    y = torch.full_like(x, float("nan"))
    mean = torch.empty(64, device="cuda", dtype=torch.float32)
    rstd = torch.empty(64, device="cuda", dtype=torch.float32)
    ctx.layer_norm_forward(x, gamma, beta, y, mean=mean, rstd=rstd)
    expected = torch.nn.functional.layer_norm(x.float(), (1000,), gamma.float(), beta.float(), 1e-5)
    torch.testing.assert_close(y.float(), expected, rtol=tol, atol=tol)
    torch.testing.assert_close(mean, x.float().mean(-1), rtol=1e-4, atol=1e-4)

    p = torch.empty_like(x)
    ctx.softmax_forward(x, p, scale=0.5)
    torch.testing.assert_close(p.float(), torch.softmax(0.5 * x.float(), -1), rtol=tol, atol=tol)


def test_wrong_device_id_is_an_error(ctx):
    x = torch.randn(2, 4)  # a CPU tensor on a CUDA context
    with pytest.raises(xvk.InvalidArgumentError, match="device"):
        ctx.softmax_forward(x, torch.empty_like(x))


def test_device_array(ctx):
    np = pytest.importorskip("numpy")
    x = np.random.default_rng(1).standard_normal((4, 33)).astype(np.float32)
    d = ctx.to_device(x)
    out = ctx.empty(x.shape, np.float32)
    ctx.softmax_forward(d, out)
    expected = torch.softmax(torch.from_numpy(x).double(), -1).numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
