"""Optimizers (upstream's schedule-free AdamW, a graph-safe fused form of it) and the whole-step CUDA graph."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from model import padded_test_row_mask


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The NanoTabPFNModel inside DistributedDataParallel / torch.compile wrappers."""
    model = getattr(model, "module", model)          # DDP
    return getattr(model, "_orig_mod", model)       # torch.compile


def make_optimizer(model: torch.nn.Module, name: str, lr: float, fused: bool = False, warmup_steps: int = 0,
                   average_scale: float = 1.0):
    """"schedulefree" (upstream; fused: the graph-safe form below) or "adamw" (torch's); warmup_steps: schedule-free's
    linear warm-up of the lr (0: none); average_scale: the fused form's (1: the package's average)."""
    if name == "schedulefree" and fused:
        return FusedScheduleFreeAdamW(model.parameters(), lr=lr, warmup_steps=warmup_steps,
                                      average_scale=average_scale)
    if name == "schedulefree":
        import schedulefree  # lazily: only the schedule-free path needs it
        return schedulefree.AdamWScheduleFree(model.parameters(), lr=lr, weight_decay=0.0, warmup_steps=warmup_steps)
    if name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0,
                                 fused=next(model.parameters()).is_cuda)  # one kernel for the update on CUDA
    raise ValueError(f"unknown optimizer {name!r} (choose schedulefree or adamw)")


@torch.no_grad()
def inference_state_dict(model: torch.nn.Module, optimizer) -> dict:
    """Weights to evaluate with (schedule-free's x = lerp(y, z, 1 - 1/beta1)), out of place: swapping in place
    and back is not bit-exact, so an eval or a checkpoint would perturb training."""
    model = unwrap(model)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if not hasattr(optimizer, "train"):
        return state
    for name, p in model.named_parameters():
        for group in optimizer.param_groups:
            if group.get("train_mode", True) and "z" in optimizer.state.get(p, {}):
                state[name] = torch.lerp(p.detach(), optimizer.state[p]["z"], 1 - 1 / group["betas"][0])
    return state


class FusedScheduleFreeAdamW(torch.optim.Optimizer):
    """schedulefree.AdamWScheduleFree without weight decay, r=0, weight_lr_power=2 (without warm-up ckp1 = 1/(k+1)),
    in foreach kernels, every per-step scalar a device tensor that a CUDA graph can replay. average_scale S != 1 is
    Song et al. 2025's refined form, S = (1 - beta1) C: the averaging weight ckp1 times S, capped at 1, so the
    average x leans to recent iterates (S = 1: the package's uniform average)."""

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-8, warmup_steps: int = 0,
                 average_scale: float = 1.0):
        # capturable=True: Optimizer.load_state_dict then keeps each 'step' tensor on its parameter's
        # device (otherwise a resumed step counter lands on the CPU, outside any CUDA graph).
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, warmup_steps=warmup_steps, train_mode=True,
                                      capturable=True, average_scale=average_scale))
        for group in self.param_groups:  # state allocated up front: graph capture needs it to exist
            for p in group["params"]:
                self.state[p].update(z=p.detach().clone(), exp_avg_sq=torch.zeros_like(p),
                                     step=torch.zeros((), dtype=torch.float32, device=p.device))
            if warmup_steps:   # the package's lr_max and weight_sum, kept with the group's first parameter
                first = group["params"][0]
                self.state[first].update(lr_max=torch.zeros((), device=first.device),
                                         weight_sum=torch.zeros((), device=first.device))

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:   # load_state_dict keeps the saved groups: one saved before the option lacks it
            group.setdefault("average_scale", 1.0)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            if not group["train_mode"]:
                raise RuntimeError("optimizer.step() in eval mode: call optimizer.train() first")
            ys = [p for p in group["params"] if p.grad is not None]
            if not ys:
                continue
            lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
            states = [self.state[p] for p in ys]
            grads, zs, sqs = [p.grad for p in ys], [s["z"] for s in states], [s["exp_avg_sq"] for s in states]
            torch._foreach_add_([s["step"] for s in states], 1.0)
            k = states[0]["step"]                                   # (), k+1 in the package's notation
            if group["warmup_steps"]:
                lr = lr * torch.clamp(k / group["warmup_steps"], max=1.0)   # (), linear warm-up
                kept = self.state[group["params"][0]]
                kept["lr_max"].copy_(torch.maximum(kept["lr_max"], lr))
                weight = kept["lr_max"].square()                    # weight_lr_power 2
                ckp1 = weight / kept["weight_sum"].add_(weight)     # weight / weight_sum
            else:
                ckp1 = 1.0 / k                                      # weight / weight_sum with a constant lr
            if group["average_scale"] != 1.0:
                ckp1 = torch.clamp(ckp1 * group["average_scale"], max=1.0)   # (), the average's weight on the newest z
            torch._foreach_mul_(sqs, beta2)
            torch._foreach_addcmul_(sqs, grads, grads, value=1 - beta2)
            denom = torch._foreach_mul(sqs, 1.0 / (1.0 - torch.pow(beta2, k)))   # bias-corrected second moment
            torch._foreach_sqrt_(denom)
            torch._foreach_add_(denom, eps)
            normed = torch._foreach_div(grads, denom)
            # y <- y + ckp1 * (z - y) + lr * (beta1 * (1 - ckp1) - 1) * g   (the package's lerp + add)
            towards_z = torch._foreach_sub(zs, ys)
            torch._foreach_mul_(towards_z, ckp1)
            torch._foreach_add_(ys, towards_z)
            torch._foreach_add_(ys, torch._foreach_mul(normed, lr * (beta1 * (1.0 - ckp1) - 1.0)))
            if group["warmup_steps"]:
                torch._foreach_add_(zs, torch._foreach_mul(normed, -lr))   # z <- z - lr * g, lr a tensor
            else:
                torch._foreach_add_(zs, normed, alpha=-lr)        # z <- z - lr * g

    @torch.no_grad()
    def _swap(self, to_train: bool):
        for group in self.param_groups:
            if group["train_mode"] != to_train:
                beta1 = group["betas"][0]
                weight = (1 - beta1) if to_train else (1 - 1 / beta1)
                for p in group["params"]:
                    p.lerp_(self.state[p]["z"], weight)
                group["train_mode"] = to_train

    def train(self):
        self._swap(True)

    def eval(self):
        self._swap(False)


class GraphedTrainStep:
    """The whole step (padded forward, masked loss, backward, clipping, optimizer) as one CUDA graph over
    zero-padded static buffers (B, R_max, F_max); split and sizes are device tensors, so a new batch is new buffer
    content, not a new graph. Without CUDA the same padded step runs eagerly (CPU tests cover its arithmetic)."""

    WARMUP_STEPS = 3

    def __init__(self, model, optimizer, batch_size: int, rows: int, features: int, device: torch.device, *,
                 amp: str = "off", grad_clip: float = 1.0, compile: bool = False):
        if not isinstance(optimizer, FusedScheduleFreeAdamW):
            # schedulefree's step computes its scalars in Python: a graph would freeze them at capture.
            raise ValueError("--cuda-graphs needs the graph-safe optimizer (--fused-optimizer, schedule-free)")
        self.model, self.optimizer, self.device = model, optimizer, device
        self.amp, self.grad_clip = amp, grad_clip
        self.x = torch.zeros(batch_size, rows, features, device=device)      # (B, R_max, F_max)
        self.y = torch.zeros(batch_size, rows, device=device)                # (B, R_max)
        self.split, self.num_rows, self.num_features = (torch.ones((), dtype=torch.long, device=device)
                                                        for _ in range(3))
        self.use_graph = device.type == "cuda"
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.distributed = dist.is_available() and dist.is_initialized()
        if self.distributed:
            for p in self.params:
                dist.broadcast(p.detach(), 0)   # every rank starts from rank 0's weights, as DDP does
        self.graph, self.static_loss, self.eager_steps = None, None, 0
        forward = unwrap(model).forward_padded
        self.forward = torch.compile(forward, dynamic=False) if compile else forward

    def load(self, batch):
        """Copies a batch into the static buffers (device-to-device), zero padding where it is smaller."""
        _, r, f = batch.x.shape
        rows_max, features_max = self.x.shape[1:]
        # Zeros only where the batch leaves padding: a full-size batch overwrites the buffers anyway.
        if r < rows_max or f < features_max:
            self.x.zero_()
        self.x[:, :r, :f].copy_(batch.x)
        if r < rows_max:
            self.y.zero_()
        self.y[:, :r].copy_(batch.y)
        self.split.fill_(batch.split)
        self.num_rows.fill_(r)
        self.num_features.fill_(f)

    def _body(self):
        # cache_enabled=False: autocast's weight-cast cache would hold tensors from outside the graph.
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=(self.amp == "bf16"),
                            cache_enabled=False):
            logits = self.forward(self.x, self.y, self.split, self.num_rows, self.num_features)  # (B, R, O)
        batch_size, rows, outputs = logits.shape
        test = padded_test_row_mask(rows, self.split, self.num_rows).to(torch.float32)      # (R,)
        cells = F.cross_entropy(logits.float().reshape(-1, outputs), self.y.long().reshape(-1),
                                reduction="none").view(batch_size, rows)                     # (B, R)
        loss = (cells * test).sum() / (test.sum() * batch_size)   # mean over real test cells, as sliced
        loss.backward()
        if self.distributed:
            self._average_gradients()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        return loss.detach()

    def _average_gradients(self):
        """DDP's gradient average inside the step: one flat buffer, one all-reduce (captured in the graph)."""
        grads = [p.grad for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat.div_(dist.get_world_size())
        torch._foreach_copy_(grads, [part.view_as(g) for part, g in zip(flat.split([g.numel() for g in grads]), grads)])

    def run(self) -> torch.Tensor:
        """One training step on the loaded batch; returns its loss (a device tensor)."""
        if not self.use_graph:
            self.optimizer.zero_grad(set_to_none=True)
            return self._body()
        if self.eager_steps < self.WARMUP_STEPS:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))  # the buffers were filled on the main stream
            with torch.cuda.stream(side):
                self.optimizer.zero_grad(set_to_none=True)
                loss = self._body()
            torch.cuda.current_stream(self.device).wait_stream(side)
            self.eager_steps += 1
            return loss
        if self.graph is None:
            # Grads set to None before capture: backward then writes (not accumulates) them from the
            # graph's own pool, so a replay needs no zero_grad.
            self.optimizer.zero_grad(set_to_none=True)
            self.graph = torch.cuda.CUDAGraph()
            # thread_local: a loader thread may launch kernels and allocate on its own stream meanwhile ("global"
            # let that invalidate the capture under torchrun with --loader prior --streams: results/nvidia-h100/fly-ddp)
            with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                self.static_loss = self._body()
        self.graph.replay()
        return self.static_loss.clone()  # the next replay overwrites static_loss
