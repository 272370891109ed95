"""train.py's loop with the blog's optimizations (and more) as flags; every flag off = the baseline.

    python train_optimized.py --flash --gds-bin          # the headline command
    python train_optimized.py --pinned --streams --prefetch 3

At start one block lists each requested optimization as active, or inactive and why; the run
ends with one line of ms/step, data wait, peak memory, final loss and eval scores.
"""
import argparse
import os
import sys

import torch
from torch.nn.attention import SDPBackend

from model import SDPA_BACKEND_CHOICES, SDPA_KERNELS, sdpa_restriction
from train import add_common_arguments, run


def sdpa_backend(device: torch.device, dtype: torch.dtype, num_heads: int, head_dim: int,
                 rows: int, train_rows: int, masked: bool = False, pinned: str = "auto") -> str:
    """Names the scaled_dot_product_attention kernel PyTorch picks for the datapoint attention.

    Flash attention needs fp16/bf16 on CUDA and takes no mask; in fp32, or with the key mask of the
    padded (--cuda-graphs) path, SDPA falls back to the cuDNN, memory-efficient or math kernel; on
    CPU it runs its CPU kernels. Asks the dispatcher itself (torch._fused_sdp_choice) on small
    tensors of the real head count, head dim, dtype and masking, so what is printed is what runs.
    pinned: --sdpa-backend; the dispatcher is asked under the same restriction the model runs with.
    """
    if device.type != "cuda":
        pin = f"; {pinned} pinned by --sdpa-backend" if pinned != "auto" else ""
        return f"cpu ({str(dtype).replace('torch.', '')}; flash kernels need CUDA{pin})"
    q = torch.zeros(2, num_heads, min(rows, 256), head_dim, device=device, dtype=dtype)
    keys = q.shape[2] if masked else min(train_rows, 256)
    kv = torch.zeros(2, num_heads, keys, head_dim, device=device, dtype=dtype)
    mask = torch.ones(1, 1, 1, keys, dtype=torch.bool, device=device) if masked else None
    try:
        with sdpa_restriction(pinned):
            choice = SDPBackend(int(torch._fused_sdp_choice(q, kv, kv, attn_mask=mask)))
        name = {kernel: n for n, kernel in SDPA_KERNELS.items()}.get(choice, choice.name.lower())
    except (AttributeError, RuntimeError, ValueError, ImportError):
        name = "unknown (torch._fused_sdp_choice unavailable)"
    why = ""
    if pinned != "auto":
        why = " — pinned by --sdpa-backend"
    elif name != "flash":
        why = (" — key mask of the padded step: flash takes no mask" if masked else
               " — no flash kernel for fp32; use --amp bf16 for flash" if dtype == torch.float32 else "")
    return f"{name} ({str(dtype).replace('torch.', '')}, head dim {head_dim}{', masked' if masked else ''}){why}"


def build_parser():
    parser = add_common_arguments(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    g = parser.add_argument_group("data path (the blog's optimizations)")
    g.add_argument("--pinned", action="store_true",
                   help="page-locked host buffers reused every step, h5py read_direct into them, non_blocking copies")
    g.add_argument("--streams", action="store_true",
                   help="background reader thread + side CUDA stream copies, --prefetch batches ahead")
    g.add_argument("--prefetch", type=int, default=2, help="batches in flight for --streams / --gds-bin")
    g.add_argument("--gds-bin", action="store_true",
                   help="read raw .bin records (convert_h5.py) into CUDA memory through kvikio")
    g.add_argument("--require-gds", action="store_true",
                   help="with --gds-bin: fail unless true GPUDirect Storage runs")
    g.add_argument("--no-convert", action="store_true",
                   help="with --gds-bin: fail instead of (re)converting a missing or stale .bin")
    g.add_argument("--kvikio-threads", type=int, default=8, help="kvikio reader threads for --gds-bin")
    g.add_argument("--kvikio-target", choices=["device", "host"], default="device",
                   help="--gds-bin without GDS: kvikio reads into CUDA buffers (the blog's design) or into "
                        "pinned host buffers copied on a side stream (measured faster; see README)")
    g.add_argument("--resident", action="store_true",
                   help="load the whole dump into GPU memory once if it fits; zero copies per step")
    m = parser.add_argument_group("model and step (beyond the blog)")
    m.add_argument("--flash", action="store_true",
                   help="attention through F.scaled_dot_product_attention (one call for train+test rows)")
    m.add_argument("--amp", choices=["off", "bf16"], default="off",
                   help="bf16 autocast for the forward (fp32 master weights, loss in fp32); flash needs it")
    m.add_argument("--compile", action="store_true",
                   help="torch.compile the model (dynamic shapes for the varying split and widths)")
    m.add_argument("--cuda-graphs", action="store_true",
                   help="capture forward+backward+optimizer as one CUDA graph over zero-padded static shapes")
    m.add_argument("--fused-optimizer", action="store_true",
                   help="schedule-free AdamW as a few foreach kernels with device-side scalars (graph-safe)")
    m.add_argument("--async-loss", action="store_true",
                   help="read the loss back every --log-every steps instead of every step (no sync per step)")
    m.add_argument("--checkpoint", action="store_true",
                   help="gradient checkpointing per layer (less memory for long tables, ~1/3 more compute)")
    m.add_argument("--feature-attention", choices=["sdpa", "matmul", "broadcast"], default="sdpa",
                   help="with --flash: attention between features as SDPA, batched small matmuls, or broadcast "
                        "multiplies and sums that --compile fuses (the fastest with --compile)")
    m.add_argument("--sdpa-backend", choices=SDPA_BACKEND_CHOICES, default="auto",
                   help="with --flash: pin the datapoint attention to one SDPA kernel (auto: PyTorch picks; "
                        "for bf16 that is cuDNN, which plans anew for every new split length)")
    m.add_argument("--padded-attention", choices=["sdpa", "flex"], default="sdpa",
                   help="with --cuda-graphs: masked datapoint attention as SDPA+mask or flex_attention")
    m.add_argument("--fast", action="store_true", help="the best-known combination (README says which flags)")
    return parser


def apply_fast(args, max_rows: int):
    """--fast: the combination measured fastest (results/ and README), set on args.

    CUDA graphs need static shapes, i.e. tables zero-padded to the dump's longest and masked
    attention; that wins where the step is launch-bound (short tables) and loses where attention
    dominates (long tables, where slicing lets flash skip padded keys), so it is chosen by length.
    """
    for flag in FAST_FLAGS:
        setattr(args, flag, True)
    # Only values left at their defaults are filled in: an explicit choice wins.
    if args.amp == "off":
        args.amp = "bf16"
    if args.feature_attention == "sdpa":
        # Fused by compile into a few memory-bound kernels (H200, blog: 28.8 vs 30.6 ms/step for "matmul").
        args.feature_attention = "broadcast"
    # Graphs are refused under torchrun (DDP's hooks run outside the graph), so --fast leaves them off there.
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    args.cuda_graphs = args.cuda_graphs or (max_rows <= FAST_GRAPHS_MAX_ROWS and not distributed)
    on_cuda = torch.cuda.is_available() and not args.device.startswith("cpu")
    if args.cuda_graphs and on_cuda and args.padded_attention == "sdpa" and args.sdpa_backend == "auto":
        # The padded step's key mask rules flash out; flex_attention skips the masked key blocks
        # (H200, upstream workload: 2.38 vs 2.73 ms/step with SDPA + mask). flex has no CPU backward.
        args.padded_attention = "flex"
    if not args.cuda_graphs and args.sdpa_backend == "auto":
        # Sliced tables: every new split length makes cuDNN (PyTorch's bf16 pick) plan on the host;
        # FlashAttention-2 does not (H200, upstream shapes without graphs: 9.6 vs 99 ms/step).
        args.sdpa_backend = "flash"
    return args


# Measured on an H100/H200 by benchmark.py (results/): see README "Speed".
FAST_FLAGS = ("flash", "resident", "compile", "fused_optimizer", "async_loss")
FAST_GRAPHS_MAX_ROWS = 1024


def loader_kwargs_from(args) -> dict:
    kind = "resident" if args.resident else "bin" if args.gds_bin else "h5"
    return dict(kind=kind, pinned=args.pinned, streams=args.streams, prefetch=args.prefetch,
                require_gds=args.require_gds, no_convert=args.no_convert, kvikio_threads=args.kvikio_threads,
                kvikio_target=args.kvikio_target)


def describe_run(args):
    """Returns the describe() hook for train.run: the optimizations block and record fields."""

    def describe(device, info, model, loader):
        desc = loader.describe()
        lines = ["optimizations:"]
        data_flags = [f for f, on in (("--pinned", args.pinned), ("--streams", args.streams),
                                      ("--gds-bin", args.gds_bin), ("--resident", args.resident)) if on]
        if data_flags:
            lines.append(f"  {' '.join(data_flags):<22s} data path: {desc['path']} ({desc['loader']})")
        for note in desc.get("notes", []):
            lines.append(f"  {'':<22s} {note}")
        backend = None
        if args.flash:
            cfg = model.config
            head_dim = cfg.embedding_size // cfg.num_attention_heads
            split = int(info.splits[0])
            dtype = torch.bfloat16 if args.amp == "bf16" else torch.float32
            if args.cuda_graphs and args.padded_attention == "flex":
                # The padded step's datapoint attention is flex_attention, not SDPA: no dispatcher to ask.
                backend = (f"flex_attention ({str(dtype).replace('torch.', '')}, head dim {head_dim}, "
                           f"block mask over the padded keys)")
            else:
                backend = sdpa_backend(device, dtype, cfg.num_attention_heads, head_dim,
                                       int(info.num_datapoints.max()), split, masked=args.cuda_graphs,
                                       pinned=args.sdpa_backend)
            lines.append(f"  {'--flash':<22s} active: SDPA path, one datapoint-attention call; kernel: {backend}")
        cuda = device.type == "cuda"
        ddp = int(os.environ.get("WORLD_SIZE", "1")) > 1
        for flag, on, state in (
                ("--amp bf16", args.amp == "bf16", "active: bf16 autocast, fp32 weights and loss"
                 + ("" if cuda else " (CPU autocast: slow, for checking only)")),
                ("--compile", args.compile, "active: torch.compile" + (" of forward_padded (static shapes)"
                                                                      if args.cuda_graphs else
                                                                      " (dynamic split/rows/features)")),
                ("--cuda-graphs", args.cuda_graphs,
                 "active: one CUDA graph per step over zero-padded (B, R_max, F_max) buffers" if cuda else
                 "inactive: no CUDA here; the same static-shape padded step runs eagerly (no graph)"),
                ("--fused-optimizer", args.fused_optimizer,
                 "active: schedule-free AdamW in foreach kernels with device-side scalars"
                 + (" (required by --cuda-graphs)" if args.cuda_graphs else "")),
                ("--async-loss", args.async_loss or ddp,
                 f"active: loss read back every {args.log_every} steps, no host sync per step"),
                ("--checkpoint", args.checkpoint, "active: each layer recomputed in backward"),
                ("--feature-attention", args.feature_attention != "sdpa", f"active: {args.feature_attention}"),
                ("--padded-attention", args.padded_attention != "sdpa", f"active: {args.padded_attention}"),
                ("--time-budget", args.time_budget > 0, f"active: {args.time_budget:.0f} s of training")):
            if on:
                lines.append(f"  {flag:<22s} {state}")
        if len(lines) == 1:
            lines.append("  none (the baseline: h5py read per step, synchronous .to(), loss.item() every step)")
        return lines, {"sdpa_backend": backend, "data_path": desc["path"]}

    return describe


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.require_gds and not args.gds_bin:
        print("error: --require-gds needs --gds-bin", file=sys.stderr)
        return 2
    if args.prefetch < 1:
        print("error: --prefetch must be at least 1", file=sys.stderr)
        return 2
    if args.fast:
        from loaders import DumpError, open_dump
        from train import resolve_data
        try:
            apply_fast(args, int(open_dump(resolve_data(args.data), scan_values=False).num_datapoints.max()))
        except (DumpError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    if (args.feature_attention != "sdpa" or args.padded_attention != "sdpa" or args.sdpa_backend != "auto") \
            and not args.flash:
        print("error: --feature-attention/--padded-attention/--sdpa-backend choose among --flash implementations; "
              "add --flash", file=sys.stderr)
        return 2
    if args.sdpa_backend != "auto" and args.padded_attention == "flex":
        print("error: --sdpa-backend pins an SDPA kernel, and --padded-attention flex runs flex_attention "
              "instead of SDPA; choose one", file=sys.stderr)
        return 2
    if args.sdpa_backend == "flash" and (args.amp != "bf16" or args.cuda_graphs):
        print("error: --sdpa-backend flash needs --amp bf16 (no fp32 flash kernel) and no --cuda-graphs "
              "(flash takes no key mask)", file=sys.stderr)
        return 2
    on_cuda = torch.cuda.is_available() and not args.device.startswith("cpu")
    if args.sdpa_backend in ("efficient", "cudnn") and not on_cuda:
        print(f"error: --sdpa-backend {args.sdpa_backend} is a CUDA kernel and this run is on the CPU",
              file=sys.stderr)
        return 2
    if args.padded_attention != "sdpa" and not args.cuda_graphs:
        print("error: --padded-attention only changes the padded step of --cuda-graphs; add --cuda-graphs",
              file=sys.stderr)
        return 2
    if args.cuda_graphs and args.optimizer != "schedulefree":
        print("error: --cuda-graphs captures the optimizer step and needs the graph-safe schedule-free "
              "optimizer (--optimizer schedulefree)", file=sys.stderr)
        return 2
    if args.cuda_graphs:
        # The package's schedule-free step computes its scalars in Python, which a graph would freeze.
        args.fused_optimizer = True
    if args.cuda_graphs and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        print("error: --cuda-graphs is not supported under torchrun (DDP's gradient hooks run outside "
              "the graph); drop it for multi-GPU runs", file=sys.stderr)
        return 2
    if args.cuda_graphs and args.checkpoint:
        print("error: --checkpoint recomputes inside backward, which --cuda-graphs cannot capture", file=sys.stderr)
        return 2
    model_overrides = {"attention": "flash" if args.flash else "torch", "checkpoint": args.checkpoint,
                       "feature_attention": args.feature_attention, "padded_attention": args.padded_attention,
                       "sdpa_backend": args.sdpa_backend}
    config_overrides = {"amp": args.amp, "compile": args.compile, "cuda_graphs": args.cuda_graphs,
                        "fused_optimizer": args.fused_optimizer,
                        "sync_every_step": not args.async_loss}

    def prepare_model(model, device):
        # Under --cuda-graphs the graphed step compiles forward_padded itself (static shapes).
        return torch.compile(model) if args.compile and not args.cuda_graphs else model

    return run(args, model_overrides=model_overrides, config_overrides=config_overrides,
               loader_kwargs=loader_kwargs_from(args), describe=describe_run(args), prepare_model=prepare_model)


if __name__ == "__main__":
    sys.exit(main())
