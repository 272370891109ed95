"""The fused schedule-free AdamW of the graphed step (graphed_step.FusedScheduleFreeAdamW) against the schedulefree
package it replaces: the same weights and averages, its warm-up, the average's scale written out, its state on resume."""
import copy

import pytest
import torch


def test_fused_schedule_free_matches_the_package():
    import schedulefree
    from graphed_step import FusedScheduleFreeAdamW
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.GELU(), torch.nn.Linear(5, 3))
    ours = copy.deepcopy(ref)
    opt_ref = schedulefree.AdamWScheduleFree(ref.parameters(), lr=4e-3, weight_decay=0.0)
    opt_ours = FusedScheduleFreeAdamW(ours.parameters(), lr=4e-3)
    opt_ref.train(), opt_ours.train()
    for step in range(25):
        x = torch.randn(16, 7)
        for model, opt in ((ref, opt_ref), (ours, opt_ours)):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    for a, b in zip(ref.parameters(), ours.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    opt_ref.eval(), opt_ours.eval()  # the averaged (inference) weights agree too
    for a, b in zip(ref.parameters(), ours.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_fused_schedule_free_warm_up_matches_the_package():
    """--warmup-steps: the linear warm-up, lr_max and the lr-weighted average of the package, as device tensors."""
    import schedulefree
    from graphed_step import FusedScheduleFreeAdamW
    torch.manual_seed(1)
    ref = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.GELU(), torch.nn.Linear(5, 3))
    ours, plain = copy.deepcopy(ref), copy.deepcopy(ref)
    opt_ref = schedulefree.AdamWScheduleFree(ref.parameters(), lr=4e-3, weight_decay=0.0, warmup_steps=6)
    opt_ours = FusedScheduleFreeAdamW(ours.parameters(), lr=4e-3, warmup_steps=6)
    opt_plain = FusedScheduleFreeAdamW(plain.parameters(), lr=4e-3)
    for opt in (opt_ref, opt_ours, opt_plain):
        opt.train()
    for step in range(20):   # through the warm-up and past it
        x = torch.randn(16, 7)
        for model, opt in ((ref, opt_ref), (ours, opt_ours), (plain, opt_plain)):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    for a, b in zip(ref.parameters(), ours.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert any((a - b).abs().max() > 1e-4 for a, b in zip(ours.parameters(), plain.parameters()))   # warm-up acts
    opt_ref.eval(), opt_ours.eval()
    for a, b in zip(ref.parameters(), ours.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("warmup_steps", [0, 6])
def test_fused_schedule_free_average_scale_is_the_refined_form(warmup_steps):
    """average_scale S: x <- (1 - c) x + c z with c = min(1, S * lr_max^2 / sum lr_max^2), written out as three
    sequences (z, x, the gradient at y = (1 - beta1) z + beta1 x) against the fused form's two."""
    from graphed_step import FusedScheduleFreeAdamW
    torch.manual_seed(2)
    net = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.GELU(), torch.nn.Linear(5, 3))
    plain = copy.deepcopy(net)
    scale, lr, beta1, beta2, eps = 4.0, 4e-3, 0.9, 0.999, 1e-8
    opt = FusedScheduleFreeAdamW(net.parameters(), lr=lr, warmup_steps=warmup_steps, average_scale=scale)
    opt_plain = FusedScheduleFreeAdamW(plain.parameters(), lr=lr, warmup_steps=warmup_steps)
    z = [p.detach().clone() for p in net.parameters()]
    x, v = [t.clone() for t in z], [torch.zeros_like(t) for t in z]
    ref = copy.deepcopy(net)
    lr_max = weight_sum = 0.0
    for t in range(1, 21):
        data = torch.randn(16, 7)
        for model, o in ((net, opt), (plain, opt_plain)):
            o.zero_grad()
            model(data).pow(2).mean().backward()
            o.step()
        with torch.no_grad():   # the reference: gradient at y, Adam's second moment, z step, then the average
            for p, zi, xi in zip(ref.parameters(), z, x):
                p.copy_((1 - beta1) * zi + beta1 * xi)
        ref.zero_grad()
        ref(data).pow(2).mean().backward()
        lr_t = lr * min(1.0, t / warmup_steps) if warmup_steps else lr
        lr_max = max(lr_max, lr_t)
        weight_sum += lr_max ** 2
        c = min(1.0, scale * lr_max ** 2 / weight_sum)
        with torch.no_grad():
            for p, zi, xi, vi in zip(ref.parameters(), z, x, v):
                vi.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                zi.sub_(lr_t * p.grad / ((vi / (1 - beta2 ** t)).sqrt() + eps))
                xi.lerp_(zi, c)
    opt.eval(), opt_plain.eval()
    for p, xi in zip(net.parameters(), x):
        torch.testing.assert_close(p, xi, rtol=1e-4, atol=1e-6)
    assert any((a - b).abs().max() > 1e-4 for a, b in zip(net.parameters(), plain.parameters()))   # the scale acts


def test_resumed_fused_optimizer_keeps_its_step_on_the_parameter_device():
    from graphed_step import FusedScheduleFreeAdamW
    src = torch.nn.Linear(3, 2)
    opt = FusedScheduleFreeAdamW(src.parameters(), lr=1e-3)
    src(torch.randn(4, 3)).sum().backward()
    opt.step()
    dst = torch.nn.Linear(3, 2, device="meta")  # another device (stands in for CUDA on a CPU machine)
    other = FusedScheduleFreeAdamW(dst.parameters(), lr=1e-3)
    other.load_state_dict(opt.state_dict())
    for p in dst.parameters():
        st = other.state[p]
        assert st["step"].device == p.device and st["step"].dtype == torch.float32
        assert st["z"].device == p.device
