# Tests of the Julia binding on the CPU backend, against Float64 references written here. They
# mirror the Python, Rust and C# tests. UNTESTED: no Julia was available where they were written.
#
# Julia arrays are column-major: a `cols × rows` matrix here is xvk's `rows × cols` tensor, and
# each column is one normalized (softmax) row.
using Test
using Xvk

# A small deterministic generator (values in [-2, 2)), as in the other bindings' tests.
mutable struct Rng
    state::UInt64
end
function next!(r::Rng)
    r.state = r.state * 0x5851f42d4c957f2d + 0x14057b7ef767814f
    return Float32((r.state >> 40) / 2.0^24 * 4 - 2)
end
vec!(r::Rng, dims...) = reshape(Float32[next!(r) for _ in 1:prod(dims)], dims...)

# Float64 references, one column at a time ------------------------------------------------------

function ref_softmax(x::AbstractMatrix, scale = 1.0, mask = (r, c) -> 0.0)
    y = zeros(size(x))
    for r in axes(x, 2)
        z = [scale * Float64(x[c, r]) + mask(r, c) for c in axes(x, 1)]
        e = exp.(z .- maximum(z))
        y[:, r] = e ./ sum(e)
    end
    return y
end

# (y, mean, rstd) of LayerNorm, or RMSNorm with rms = true
function ref_norm(x::AbstractMatrix, gamma, beta, eps; rms = false)
    h = Float64.(x)
    mean = rms ? zeros(size(h, 2)) : vec(sum(h; dims = 1)) ./ size(h, 1)
    var = vec(sum((h .- mean') .^ 2; dims = 1)) ./ size(h, 1)
    rstd = 1 ./ sqrt.(var .+ eps)
    return (h .- mean') .* rstd' .* gamma .+ beta, mean, rstd
end

# (dx, dgamma, dbeta) of LayerNorm, or RMSNorm with rms = true
function ref_norm_backward(dy, x, gamma, eps; rms = false)
    _, mean, rstd = ref_norm(x, gamma, 0.0, eps; rms = rms)
    xhat = (Float64.(x) .- mean') .* rstd'
    g = Float64.(dy) .* gamma
    n = size(x, 1)
    mean_g = rms ? zeros(1, size(x, 2)) : sum(g; dims = 1) ./ n
    mean_gx = sum(g .* xhat; dims = 1) ./ n
    dx = rstd' .* (g .- mean_g .- xhat .* mean_gx)
    return dx, vec(sum(Float64.(dy) .* xhat; dims = 2)), vec(sum(Float64.(dy); dims = 2))
end

# BatchNorm over x of size (spatial, C, N) (xvk's (N, C, spatial)): statistics over dimensions 1
# and 3. Returns (y, mean, biased variance); mean and var given: inference.
function ref_bn(x, gamma, beta, eps; z = nothing, relu = false, mean = nothing, var = nothing)
    h = Float64.(x)
    m = size(h, 1) * size(h, 3)
    if mean === nothing
        mean = vec(sum(h; dims = (1, 3))) ./ m
        var = vec(sum((h .- reshape(mean, 1, :, 1)) .^ 2; dims = (1, 3))) ./ m
    end
    c = (1, length(mean), 1)
    v = (h .- reshape(Float64.(mean), c)) ./ sqrt.(reshape(Float64.(var), c) .+ eps) .* reshape(Float64.(gamma), c) .+
        reshape(Float64.(beta), c)
    z === nothing || (v = v .+ Float64.(z))
    relu && (v = max.(v, 0.0))
    return v, mean, var
end

# (dx, dgamma, dbeta) of training BatchNorm; positive: where y > 0 under ReLU
function ref_bn_backward(dy, x, gamma, eps, positive)
    h = Float64.(x)
    m = size(h, 1) * size(h, 3)
    mean = sum(h; dims = (1, 3)) ./ m
    rstd = 1 ./ sqrt.(sum((h .- mean) .^ 2; dims = (1, 3)) ./ m .+ eps)
    xhat = (h .- mean) .* rstd
    g = Float64.(dy) .* positive
    dbeta, dgamma = sum(g; dims = (1, 3)), sum(g .* xhat; dims = (1, 3))
    dx = reshape(Float64.(gamma), 1, :, 1) .* rstd .* (g .- dbeta ./ m .- xhat .* dgamma ./ m)
    return dx, vec(dgamma), vec(dbeta)
end

# Bit i (1-based) of a ReLU mask: bit (i - 1) % 32 of word (i - 1) ÷ 32 + 1.
mask_bit(mask, i) = ((mask[(i - 1) ÷ 32 + 1] >> ((i - 1) % 32)) & 0x1) == 0x1

close_to(got, want; rtol, atol) = all(abs.(Float64.(got) .- want) .<= atol .+ rtol .* abs.(want))

@testset "Xvk" begin
    @testset "version and names" begin
        @test Xvk.version().major == 0 && Xvk.version() >= v"0.1.0"
        @test Xvk.status_string(Xvk.ERROR_INVALID_ARGUMENT) == "XVK_ERROR_INVALID_ARGUMENT"
        @test Xvk.backend_name(Xvk.CUDA) == "cuda" && Xvk.backend_name(Xvk.HIP) == "hip"
    end

    @testset "backend query" begin
        cpu = Xvk.backend_query(Xvk.CPU)
        @test cpu.available && cpu.device_count == 1 && !isempty(cpu.reason)
        for b in (Xvk.CUDA, Xvk.HIP)
            @test !isempty(Xvk.backend_query(b).reason)  # says why, either way
        end
    end

    @testset "context lifecycle" begin
        ctx = Context(Xvk.CPU, 0)
        @test Xvk.device(ctx) == (Xvk.CPU, 0)
        Xvk.set_stream!(ctx, C_NULL)
        Xvk.synchronize(ctx)
        e = try
            Xvk.set_stream!(ctx, Ptr{Cvoid}(0x1000))  # the CPU backend takes the NULL stream only
            nothing
        catch err
            err
        end
        @test e isa XvkError && e.status == Xvk.ERROR_INVALID_ARGUMENT && startswith(e.msg, "xvk_context_set_stream")
        close(ctx)
        close(ctx)
        @test_throws ArgumentError Xvk.synchronize(ctx)
    end

    @testset "unavailable backend" begin
        if !Xvk.backend_query(Xvk.HIP).available
            e = try
                Context(Xvk.HIP)
                nothing
            catch err
                err
            end
            @test e isa XvkError && e.status == Xvk.ERROR_BACKEND_UNAVAILABLE && startswith(e.msg, "xvk_context_create")
        end
    end

    @testset "device memory" begin
        ctx = Context()
        x = vec!(Rng(3), 8, 2)
        y = zeros(Float32, 8, 2)
        px, py = Xvk.memory_alloc(ctx, 64), Xvk.memory_alloc(ctx, 64)
        @test UInt(px) % 256 == 0
        GC.@preserve x y begin
            Xvk.memory_copy(ctx, px, pointer(x), 64)
            softmax_forward!(ctx, DeviceTensor(py, Float32, (8, 2), ctx), DeviceTensor(px, Float32, (8, 2), ctx))
            Xvk.memory_copy(ctx, pointer(y), py, 64)
            Xvk.synchronize(ctx)
        end
        Xvk.memory_free(ctx, px)
        Xvk.memory_free(ctx, py)
        @test close_to(y, ref_softmax(x); rtol = 1e-5, atol = 1e-6)
        close(ctx)
    end

    @testset "example values" begin
        ctx = Context()
        x = Float32[1 -1; 2 0; 3 1; 4 6]  # xvk's [[1, 2, 3, 4], [-1, 0, 1, 6]]
        y = layer_norm_forward!(ctx, similar(x), x)
        p = softmax_forward!(ctx, similar(x), x)
        @test abs(y[1, 1] + 1.5 / sqrt(1.25 + 1e-5)) < 1e-5              # -1.3416
        @test abs(p[4, 1] - 1 / (1 + exp(-1) + exp(-2) + exp(-3))) < 1e-6  # 0.6439
        close(ctx)
    end

    @testset "softmax forward and backward" begin
        ctx = Context()
        rng = Rng(1)
        x, dy = vec!(rng, 7, 4), vec!(rng, 7, 4)
        y = fill(NaN32, 7, 4)
        softmax_forward!(ctx, y, x; scale = 0.5)
        r = ref_softmax(x, 0.5)
        @test close_to(y, r; rtol = 1e-5, atol = 1e-6)
        dx = softmax_backward!(ctx, similar(x), y, dy; scale = 0.5)
        @test close_to(dx, 0.5 .* r .* (dy .- sum(dy .* r; dims = 1)); rtol = 1e-4, atol = 1e-6)
        close(ctx)
    end

    @testset "log_softmax forward and backward" begin
        ctx = Context()
        rng = Rng(2)
        x, dy = vec!(rng, 9, 3), vec!(rng, 9, 3)
        y = log_softmax_forward!(ctx, similar(x), x)
        r = ref_softmax(x)
        @test close_to(y, log.(r); rtol = 1e-5, atol = 1e-5)
        dx = log_softmax_backward!(ctx, similar(x), y, dy)
        @test close_to(dx, dy .- r .* sum(dy; dims = 1); rtol = 1e-4, atol = 1e-5)
        close(ctx)
    end

    @testset "softmax causal and mask" begin
        ctx = Context()
        rng = Rng(4)
        x = vec!(rng, 5, 3, 2)  # xvk's 2 x 3 x 5
        x2 = reshape(x, 5, 6)   # column r is row r % 3 of one 3 x 5 matrix
        y = similar(x)
        softmax_forward!(ctx, y, x; causal = Xvk.CAUSAL_TOP_LEFT)
        @test close_to(reshape(y, 5, 6), ref_softmax(x2, 1.0, (r, c) -> c - 1 <= (r - 1) % 3 ? 0.0 : -Inf);
                       rtol = 1e-5, atol = 1e-6)
        softmax_forward!(ctx, y, x; causal = Xvk.CAUSAL_BOTTOM_RIGHT)
        @test close_to(reshape(y, 5, 6), ref_softmax(x2, 1.0, (r, c) -> c - 1 <= (r - 1) % 3 + 2 ? 0.0 : -Inf);
                       rtol = 1e-5, atol = 1e-6)
        mask = vec!(rng, 5, 3)  # broadcast over xvk's leading dimension
        mask[3, 2] = -Inf32
        softmax_forward!(ctx, y, x; scale = 2, mask = mask)
        @test close_to(reshape(y, 5, 6), ref_softmax(x2, 2.0, (r, c) -> mask[c, (r - 1) % 3 + 1]); rtol = 1e-5, atol = 1e-6)
        @test y[3, 2, 1] == 0 && y[3, 2, 2] == 0
        close(ctx)
    end

    @testset "layer_norm forward and backward" begin
        ctx = Context()
        rng = Rng(5)
        x, gamma, beta, dy = vec!(rng, 8, 5), vec!(rng, 8), vec!(rng, 8), vec!(rng, 8, 5)
        y, mean, rstd = similar(x), zeros(Float32, 5), zeros(Float32, 5)
        layer_norm_forward!(ctx, y, x, gamma, beta; mean = mean, rstd = rstd, epsilon = 1.0f-3)
        ry, rmean, rrstd = ref_norm(x, gamma, beta, 1e-3)
        @test close_to(y, ry; rtol = 1e-5, atol = 1e-5)
        @test close_to(mean, rmean; rtol = 1e-5, atol = 1e-6)
        @test close_to(rstd, rrstd; rtol = 1e-5, atol = 0)
        dx, dgamma, dbeta = similar(x), zeros(Float32, 8), zeros(Float32, 8)
        layer_norm_backward!(ctx, dx, dy, x, mean, rstd, gamma; dgamma = dgamma, dbeta = dbeta)
        rdx, rdgamma, rdbeta = ref_norm_backward(dy, x, gamma, 1e-3)
        @test close_to(dx, rdx; rtol = 1e-4, atol = 1e-5)
        @test close_to(dgamma, rdgamma; rtol = 1e-4, atol = 1e-5)
        @test close_to(dbeta, rdbeta; rtol = 1e-4, atol = 1e-5)
        close(ctx)
    end

    @testset "layer_norm options" begin
        # normalized over xvk's last two dimensions (Julia's first two), zero-centered gamma, residual
        ctx = Context()
        rng = Rng(6)
        x, res, gamma = vec!(rng, 4, 3, 2), vec!(rng, 4, 3, 2), vec!(rng, 4, 3)
        y, h, mean = similar(x), similar(x), zeros(Float32, 2)
        layer_norm_forward!(ctx, y, x, gamma; mean = mean, normalized_ndim = 2, zero_centered_gamma = true,
                            residual = res, residual_out = h)
        ry, rmean, _ = ref_norm(reshape(x .+ res, 12, 2), 1 .+ Float64.(vec(gamma)), 0.0, 1e-5)
        @test close_to(reshape(y, 12, 2), ry; rtol = 1e-5, atol = 1e-5)
        @test close_to(mean, rmean; rtol = 1e-5, atol = 1e-6)
        @test close_to(h, Float64.(x .+ res); rtol = 1e-6, atol = 0)
        close(ctx)
    end

    @testset "rms_norm forward and backward" begin
        ctx = Context()
        rng = Rng(7)
        x, gamma, dy = vec!(rng, 6, 4), vec!(rng, 6), vec!(rng, 6, 4)
        y, rstd = similar(x), zeros(Float32, 4)
        rms_norm_forward!(ctx, y, x, gamma; rstd = rstd)
        ry, _, rrstd = ref_norm(x, gamma, 0.0, 1e-6; rms = true)
        @test close_to(y, ry; rtol = 1e-5, atol = 1e-5)
        @test close_to(rstd, rrstd; rtol = 1e-5, atol = 0)
        dx, dgamma = similar(x), zeros(Float32, 6)
        rms_norm_backward!(ctx, dx, dy, x, rstd, gamma; dgamma = dgamma)
        rdx, rdgamma, _ = ref_norm_backward(dy, x, gamma, 1e-6; rms = true)
        @test close_to(dx, rdx; rtol = 1e-4, atol = 1e-5)
        @test close_to(dgamma, rdgamma; rtol = 1e-4, atol = 1e-5)
        close(ctx)
    end

    @testset "rms_norm residual" begin
        ctx = Context()
        rng = Rng(8)
        x, res = vec!(rng, 5, 3), vec!(rng, 5, 3)
        y, h = similar(x), similar(x)
        rms_norm_forward!(ctx, y, x; epsilon = 1.0f-4, residual = res, residual_out = h)
        @test close_to(y, ref_norm(x .+ res, 1.0, 0.0, 1e-4; rms = true)[1]; rtol = 1e-5, atol = 1e-5)
        @test close_to(h, Float64.(x .+ res); rtol = 1e-6, atol = 0)
        close(ctx)
    end

    @testset "batch_norm training with relu and mask, then backward" begin
        ctx = Context()
        rng = Rng(11)
        x, gamma, beta, dy = vec!(rng, 5, 3, 4), vec!(rng, 3), vec!(rng, 3), vec!(rng, 5, 3, 4)  # xvk's (4, 3, 5)
        words = batch_norm_mask_words(x)
        @test words == 2
        y, mask = fill(NaN32, 5, 3, 4), fill(0xdeadbeef, words)
        running_mean, running_var = zeros(Float32, 3), ones(Float32, 3)
        saved_mean, saved_rstd = zeros(Float32, 3), zeros(Float32, 3)
        batch_norm_forward_training!(ctx, y, x, gamma, beta; mask = mask, running_mean = running_mean,
                                     running_var = running_var, saved_mean = saved_mean, saved_rstd = saved_rstd,
                                     momentum = 0.25f0, activation = Xvk.ACTIVATION_RELU)
        ry, rmean, rvar = ref_bn(x, gamma, beta, 1e-5; relu = true)
        @test close_to(y, ry; rtol = 1e-5, atol = 1e-5)
        @test close_to(saved_mean, rmean; rtol = 1e-5, atol = 1e-6)
        @test close_to(saved_rstd, 1 ./ sqrt.(rvar .+ 1e-5); rtol = 1e-5, atol = 0)
        @test close_to(running_mean, 0.25 .* rmean; rtol = 1e-5, atol = 1e-6)
        @test close_to(running_var, 0.75 .+ 0.25 .* rvar .* 20 ./ 19; rtol = 1e-5, atol = 0)  # unbiased, M = 20
        # bit i of the mask is y[i] > 0 (memory order); the 4 bits past the 60 elements are 0
        bits = [mask_bit(mask, i) for i in 1:64]
        @test bits[1:60] == vec(y .> 0)
        @test !any(bits[61:64]) && any(bits) && !all(bits[1:60])

        dx, dz, dgamma, dbeta = similar(x), fill(NaN32, 5, 3, 4), zeros(Float32, 3), zeros(Float32, 3)
        batch_norm_backward!(ctx, dx, dy, x, saved_mean, saved_rstd, gamma; mask = mask, dz = dz, dgamma = dgamma,
                             dbeta = dbeta, activation = Xvk.ACTIVATION_RELU)
        @test dz == ifelse.(y .> 0, dy, 0.0f0)  # dz is dy, masked
        rdx, rdgamma, rdbeta = ref_bn_backward(dy, x, gamma, 1e-5, y .> 0)
        @test close_to(dx, rdx; rtol = 1e-4, atol = 1e-5)
        @test close_to(dgamma, rdgamma; rtol = 1e-4, atol = 1e-5)
        @test close_to(dbeta, rdbeta; rtol = 1e-4, atol = 1e-5)
        # from y instead of the mask: the same bits, so bitwise the same dx
        dx2 = batch_norm_backward!(ctx, similar(x), dy, x, saved_mean, saved_rstd, gamma; y = y,
                                   activation = Xvk.ACTIVATION_RELU)
        @test dx2 == dx
        close(ctx)
    end

    @testset "batch_norm channels last" begin
        # Julia's (C, W, H, N) = (5, 4, 2, 3) is xvk's (N, H, W, C) with channel_axis = -1; without
        # activation each channel of y has mean beta and (biased) standard deviation |gamma|
        ctx = Context()
        rng = Rng(12)
        x, gamma, beta = vec!(rng, 5, 4, 2, 3), vec!(rng, 5) .+ 3, vec!(rng, 5)
        y = batch_norm_forward_training!(ctx, similar(x), x, gamma, beta; channel_axis = -1)
        flat = Float64.(reshape(y, 5, :))
        mean_y = vec(sum(flat; dims = 2)) ./ 24
        @test close_to(beta, mean_y; rtol = 0, atol = 1e-5)
        @test close_to(gamma, sqrt.(vec(sum((flat .- mean_y) .^ 2; dims = 2)) ./ 24); rtol = 1e-4, atol = 0)
        # the same values as channels-first BatchNorm of the permuted copy
        xp = permutedims(reshape(x, 5, 8, 3), (2, 1, 3))  # (spatial, C, N)
        @test close_to(permutedims(reshape(y, 5, 8, 3), (2, 1, 3)), ref_bn(xp, gamma, beta, 1e-5)[1]; rtol = 1e-5,
                       atol = 1e-5)
        close(ctx)
    end

    @testset "batch_norm inference with add and relu" begin
        ctx = Context()
        rng = Rng(13)
        x, z, gamma, beta, running_mean = vec!(rng, 4, 3, 2), vec!(rng, 4, 3, 2), vec!(rng, 3), vec!(rng, 3), vec!(rng, 3)
        running_var = abs.(vec!(rng, 3)) .+ 0.5f0
        y, mask = fill(NaN32, 4, 3, 2), zeros(UInt32, batch_norm_mask_words(x))
        batch_norm_forward_inference!(ctx, y, x, running_mean, running_var, gamma, beta; z = z, mask = mask,
                                      epsilon = 1.0f-3, activation = Xvk.ACTIVATION_RELU)
        want = ref_bn(x, gamma, beta, 1e-3; z = z, relu = true, mean = running_mean, var = running_var)[1]
        @test close_to(y, want; rtol = 1e-5, atol = 1e-5)
        @test [mask_bit(mask, i) for i in 1:24] == vec(y .> 0)
        close(ctx)
    end

    @testset "batch_norm mask words" begin
        @test batch_norm_mask_words((5, 3, 4)) == 2
        @test batch_norm_mask_words((16, 2)) == 1 && batch_norm_mask_words((17, 2)) == 2
        @test batch_norm_mask_words((0, 3, 8)) == 0
        @test batch_norm_mask_words(zeros(Float32, 3, 7, 5)) == 4  # an array: only its size is read
        e = try
            batch_norm_mask_words((-1, 2))
            nothing
        catch err
            err
        end
        @test e isa XvkError && e.status == Xvk.ERROR_INVALID_ARGUMENT
        @test startswith(e.msg, "xvk_batch_norm_mask_words: x has a negative size")
    end

    @testset "batch_norm errors" begin
        ctx = Context()
        x, y, mask = vec!(Rng(14), 3, 4), fill(7.0f0, 3, 4), UInt32[7]  # xvk's (N, C) = (4, 3)
        relu = Xvk.ACTIVATION_RELU
        failure(f) = try
            f()
            nothing
        catch err
            err
        end
        e = failure(() -> batch_norm_forward_training!(ctx, y, x, ones(Float32, 2); mask = mask, activation = relu))
        @test e isa XvkError && e.status == Xvk.ERROR_INVALID_ARGUMENT
        @test e.msg == "xvk_batch_norm_forward_training: gamma has 2 elements, expected 3 (the number of channels)"
        @test all(y .== 7) && mask == UInt32[7]  # nothing written
        e = failure(() -> batch_norm_forward_training!(ctx, y, x; mask = zeros(UInt32, 3), activation = relu))
        @test e isa XvkError && occursin("mask has 3 elements, expected 1", e.msg)
        e = failure(() -> batch_norm_forward_training!(ctx, y, x; mask = mask))
        @test e isa XvkError && occursin("mask is given but options->activation", e.msg)
        s = ones(Float32, 3)
        e = failure(() -> batch_norm_backward!(ctx, similar(x), x, x, s, s; activation = relu))
        @test e isa XvkError && occursin("mask and y are both NULL", e.msg)
        close(ctx)
    end

    @testset "wrong gamma length" begin
        ctx = Context()
        x, y = vec!(Rng(9), 4, 2), fill(7.0f0, 4, 2)
        e = try
            layer_norm_forward!(ctx, y, x, ones(Float32, 3))
            nothing
        catch err
            err
        end
        @test e isa XvkError && e.status == Xvk.ERROR_INVALID_ARGUMENT
        @test e.msg == "xvk_layer_norm_forward: gamma has 3 elements, expected 4 (the normalized size)"
        @test Xvk.last_error_message() == e.msg
        @test all(y .== 7)  # nothing written
        close(ctx)
    end

    @testset "other errors" begin
        ctx = Context()
        x = fill(0.5f0, 4, 2)
        @test_throws XvkError layer_norm_forward!(ctx, similar(x), x; epsilon = 0)
        e = try
            softmax_forward!(ctx, similar(x), Float16.(x))  # dtypes must match
            nothing
        catch err
            err
        end
        @test e isa XvkError && occursin("dtype", e.msg)
        close(ctx)
    end

    @testset "float16" begin
        ctx = Context()
        rng = Rng(10)
        x = Float16.(vec!(rng, 16, 3))
        gamma, beta = vec!(rng, 16), vec!(rng, 16)  # Float32 parameters with Float16 activations
        y = layer_norm_forward!(ctx, similar(x), x, gamma, beta)
        @test eltype(y) == Float16
        # fp16 output: 11 significant bits, a few units in the last place for values of order 1
        @test close_to(y, ref_norm(x, gamma, beta, 1e-5)[1]; rtol = 2e-3, atol = 4e-3)
        p = softmax_forward!(ctx, similar(x), x)
        @test close_to(p, ref_softmax(x); rtol = 2e-3, atol = 1e-4)
        close(ctx)
    end
end
