"""train.py's loop with the blog's optimizations (and more) as flags; every flag off = the baseline.

    python train_optimized.py --flash --gds-bin          # the headline command
    python train_optimized.py --fast                     # the fastest measured combination
"""
import argparse
import contextlib
import os
import sys

import torch

import recipes
from loaders import LOADER_KINDS, LoaderConfig, open_data
from model import (ATTENTIONS, FA4_HEAD_DIMS, FEATURE_ATTENTIONS, FEATURE_ENCODINGS, PERIODIC_FREQUENCIES, SDPA_KERNELS,
                   ModelConfig)
from prior_dump import SPEC_PREFIX
from runtime import UsageError, cuda_requested, fail, quiet_other_ranks, world_size
from train import (NO_OPTIMIZATIONS, SETUP_ERRORS, build_parser as train_parser, execute, fill_model_size, from_flags,
                   prepare, resolve_data, start_lines)
from train_config import TrainConfig, positive_float, positive_int

# --fast, measured on an H100/H200 by benchmark.py (results/, docs/speed.md). Without triton, graphs (flex) win on
# short tables (launch-bound) and sliced FlashAttention-2 on long ones, so that choice goes by length.
FAST_GRAPHS_MAX_ROWS = 1024
# Feature attention by table width (columns = features + target): broadcast sums win at the blog's 6 columns
# (docs/speed.md), batched matmuls at 33 by 3.2x (results/nvidia-h100/column-count); 7-32 columns not measured.
FAST_BROADCAST_MAX_COLUMNS = 8
FEATURE_FORMS = {"broadcast": f"(fp32 sums fused by compile: --fast's pick up to {FAST_BROADCAST_MAX_COLUMNS} columns "
                              "with the target)",
                 "matmul": f"(fp32 batched matmuls: --fast's pick past {FAST_BROADCAST_MAX_COLUMNS} columns)"}
# Kernels that read the padded step's key count on the GPU: they serve the graphed step on every table length.
KEY_COUNT_KERNELS = ("triton", "fa4")


def build_parser():
    parser = train_parser(__doc__.split("\n")[0])
    d, m = LoaderConfig(), ModelConfig()
    g = parser.add_argument_group("data path (the blog's optimizations)")
    g.add_argument("--loader", choices=LOADER_KINDS, default=d.kind,
                   help="h5py per step (baseline), .bin records through kvikio, the dump resident on the GPU, or "
                        "prior: the dump's datasets generated again on the device at each step (on the fly)")
    g.add_argument("--gds-bin", dest="loader", action="store_const", const="bin", help="the blog's --loader bin")
    g.add_argument("--resident", dest="loader", action="store_const", const="resident", help="--loader resident")
    g.add_argument("--pinned", action="store_true", help="reused page-locked host buffers, non_blocking copies")
    g.add_argument("--streams", action="store_true",
                   help="reader thread + side-stream copies (--loader prior: generation), --prefetch ahead")
    g.add_argument("--prefetch", type=positive_int, default=d.prefetch,
                   help="batches in flight for --streams / --loader bin")
    g.add_argument("--require-gds", action="store_true", help="with --loader bin: fail unless true GDS runs")
    g.add_argument("--no-convert", action="store_true", help="with --loader bin: fail on a missing or stale .bin")
    g.add_argument("--kvikio-threads", type=positive_int, default=d.kvikio_threads, help="kvikio reader threads")
    g.add_argument("--kvikio-target", choices=["device", "host"], default=d.kvikio_target,
                   help="--loader bin without GDS: read into CUDA buffers or into pinned host buffers")
    s = parser.add_argument_group("model and step (beyond the blog)")
    s.add_argument("--attention", choices=ATTENTIONS, default=m.attention,
                   help="datapoint attention kernel: mha (upstream), sdpa (PyTorch picks), or one pinned kernel")
    s.add_argument("--flash", dest="attention", action="store_const", const="sdpa",
                   help="the blog's --attention sdpa (the kernel that runs is printed at start)")
    s.add_argument("--feature-attention", choices=FEATURE_ATTENTIONS, default=m.feature_attention,
                   help="feature attention off the mha path: SDPA, small matmuls, or broadcasts --compile fuses")
    s.add_argument("--amp", choices=["off", "bf16"], default="off", help="bf16 autocast forward, fp32 weights/loss")
    s.add_argument("--compile", action="store_true", help="torch.compile the model (first steps compile; reported)")
    s.add_argument("--compile-tuning", action="store_true",
                   help="with --compile: Inductor times its kernel choices (minutes more compiling; losses differ "
                        "between compiles)")
    s.add_argument("--cuda-graphs", action="store_true", help="the whole step as one CUDA graph over padded shapes")
    s.add_argument("--fused-optimizer", action="store_true", help="graph-safe schedule-free AdamW (foreach kernels)")
    s.add_argument("--sf-average-scale", type=positive_float, default=1.0, metavar="S",
                   help="the fused schedule-free average's weight on the newest iterate times S, capped at 1 (1: the "
                        "package's uniform average; S > 1 leans to recent iterates; S = 10 at lr 4e-3 stalled "
                        "without --warmup-steps, results/nvidia-h200/sf-average)")
    s.add_argument("--async-loss", action="store_true", help="read the loss every --log-every steps, not every step")
    s.add_argument("--grad-checkpoint", action="store_true", help="recompute each layer in backward (less memory)")
    s.add_argument("--last-layer-target-only", action="store_true",
                   help="the last layer computes only what the decoder reads: the target column (same math)")
    s.add_argument("--feature-embedding", action="store_true",
                   help="a learned code per column position joins its cells (TabPFN v2's; changes the model)")
    s.add_argument("--feature-encoding", choices=FEATURE_ENCODINGS, default=m.feature_encoding,
                   help="a cell's value as linear (upstream's) or periodic: sin and cos of learned frequencies "
                        "added (changes the model)")
    s.add_argument("--fast", action="store_true", help="the fastest measured combination here (printed at start)")
    s.add_argument("--recipe", choices=list(recipes.RECIPES),
                   help="real-tables: a model for real tables (2-10 classes, 2-32 features; docs/real-data.md says how "
                        "it compares) in --time-budget (default 600 s); flags given explicitly win")
    return parser


def given_flags(parser, argv) -> set:
    """The dests of the flags on the command line, a value equal to the default included (`--lr 4e-3`)."""
    unset = object()   # argparse sets a default only where the namespace lacks the dest
    dests = vars(parser.parse_args([]))
    parsed = parser.parse_args(argv, namespace=argparse.Namespace(**dict.fromkeys(dests, unset)))
    return {dest for dest, value in vars(parsed).items() if value is not unset}


def apply_recipe(args, given: set, on_cuda: bool) -> list:
    """--recipe: fills the flags not given (given_flags), the time budget and the dump (made once). Returns notices."""
    if args.steps is None and args.time_budget == 0:
        args.time_budget = recipes.BUDGET_S
    chosen = recipes.recipe_flags(args.recipe, args.time_budget, world_size(), on_cuda,
                                  args.model_preset if "model_preset" in given else None)
    kept = [name for name in chosen if name in given]
    for name in chosen.keys() - kept:
        setattr(args, name, chosen[name])
    if args.data is None:   # the real preset made on the fly: no file to build first (39 s on an H100)
        args.data = f"{SPEC_PREFIX}real:{recipes.DUMP_DATASETS['cuda' if on_cuda else 'cpu']}"

    def flag(name):
        value = getattr(args, name)
        return f"--{name.replace('_', '-')}" + ("" if value is True else f" {value:g}" if isinstance(value, float)
                                                else f" {value}")
    line = f"--recipe {args.recipe}: {' '.join(flag(k) for k in chosen if k not in kept)}"
    line += f" (yours kept: {' '.join(map(flag, kept))})" if kept else ""
    line += f" on {args.data}, {args.time_budget:.0f} s of training" if args.time_budget else ""
    if on_cuda or "batch_size" in kept:
        return [line]
    return [line, f"--recipe {args.recipe} on a CPU: --batch-size {recipes.CPU_BATCH} (16 tables of 512 rows took "
                  f"11 GB and 28 s a step on 2 cores): the recipe is meant for a GPU"]


# Kernel modules whose import failed here: {module: "ErrorType: first line"} (found is not enough: a half-installed
# flash-attn-4 imports as a package and fails at its first kernel).
KERNEL_IMPORT_ERRORS = {}


def kernel_package_runs(module: str, capability: tuple) -> bool:
    """Whether a packaged kernel can run here: a CUDA GPU of at least `capability`, and `module` imports."""
    import importlib.util   # binds importlib too
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() >= capability):
        return False
    try:
        importlib.import_module(module)
    except Exception as e:   # noqa: BLE001 (a broken install raises ImportError, OSError, AttributeError, ...)
        if importlib.util.find_spec(module.split(".")[0]) is not None:   # installed, but broken: say so
            KERNEL_IMPORT_ERRORS[module] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
        return False
    return True


def triton_kernel_runs() -> bool:
    """--attention triton: triton installed and a GPU with bf16 tensor cores (sm80+)."""
    return kernel_package_runs("triton.language", (8, 0))


def fa4_kernel_runs(hopper_only: bool = False) -> bool:
    """--attention fa4: flash-attn-4 installed and a Hopper (sm90) or newer GPU; hopper_only: sm90 itself, where its
    head sizes and its speed were measured (--fast picks it only there)."""
    runs = kernel_package_runs("flash_attn.cute.interface", (9, 0))
    return runs and (not hopper_only or torch.cuda.get_device_capability()[0] == 9)


def apply_fast(args, max_rows: int, max_features: int, on_cuda: bool, given: set = frozenset()) -> list:
    """--fast: fills flags left at their defaults with the measured-fastest choice for the dump's largest table
    (args with the model size filled, as main() fills it after --recipe); a loader, amp or feature attention given on
    the command line is kept, and a named kernel (not mha or sdpa, which leave the pick to it). Returns notices."""
    if args.loader == "h5" and "loader" not in given:   # a dump made on the fly has no file to read
        args.loader = "prior" if str(args.data).startswith(SPEC_PREFIX) else "resident"
    args.fused_optimizer = args.async_loss = True
    args.last_layer_target_only = True   # the same math; loss curves within seed spread (docs/attention-kernel.md)
    if not on_cuda:
        # On a CPU only what helps a CPU: compile costs minutes for a short run, bf16 autocast is slow there.
        args.attention = "sdpa" if args.attention == "mha" else args.attention
        loader = "" if "loader" in given else f" --loader {args.loader}"
        return [f"--fast on a CPU: --attention sdpa{loader} --fused-optimizer --async-loss "
                "--last-layer-target-only; left out --amp bf16 (slow on CPUs), --compile (minutes of compiling) and "
                "--cuda-graphs (no CUDA)"]
    args.compile = True
    # Generated on a side stream, the prior costs 0.3% of the step; in the training thread 8.5% (prior-on-the-fly).
    args.streams = args.streams or args.loader == "prior"
    args.amp = "bf16" if args.amp == "off" and "amp" not in given else args.amp
    if args.feature_attention == "sdpa" and "feature_attention" not in given:
        wide = max_features + 1 > FAST_BROADCAST_MAX_COLUMNS   # + 1: the target column
        args.feature_attention = "matmul" if wide else "broadcast"
    # Pick the kernel first: triton and FlashAttention-4 read the key count on the GPU, so they serve the padded
    # graphed step on every table length (fa4 wins on long tables, triton on short; docs/speed.md); flex (padded)
    # and FlashAttention-2 (sliced) are the choices without them.
    picking = args.attention in ("mha", "sdpa")
    long_tables = max_rows > FAST_GRAPHS_MAX_ROWS
    head_dim = args.embedding_size // args.num_attention_heads
    # fa4 under DDP too: 12.9 against triton's 14.1 ms/step per rank on two H100s (docs/multi-gpu.md)
    if picking and long_tables and head_dim in FA4_HEAD_DIMS and fa4_kernel_runs(hopper_only=True):
        args.attention = "fa4"
    elif picking and triton_kernel_runs():
        args.attention = "triton"
    notices = [f"--fast: {module} is installed but does not import ({error}); it is left out"
               for module, error in KERNEL_IMPORT_ERRORS.items()] if picking else []
    # One graph replay a step instead of hundreds of launches (and cuBLAS planning each new row count), under torchrun
    # too (the graphed DDP step all-reduces inside the graph: 1.95x one H100 on two, docs/multi-gpu.md); not on long
    # tables without triton (flex's padded step loses there).
    args.cuda_graphs = args.cuda_graphs or args.attention in KEY_COUNT_KERNELS or not long_tables
    if not picking or args.attention in KEY_COUNT_KERNELS:
        return notices
    # Padded: flash takes no mask, flex skips the padded key blocks. Sliced: every new split length makes cuDNN
    # (PyTorch's bf16 pick) plan on the host; FlashAttention-2 not.
    args.attention = "flex" if args.cuda_graphs else "flash"
    if args.attention == "flash" and long_tables:
        notices.append("--fast: --attention triton cannot run here (needs the triton package and an sm80+ GPU), so "
                       "FlashAttention-2 instead (slower on long tables, docs/speed.md)")
    return notices


def check_flags(args, on_cuda: bool):
    """Combinations that cannot do what they say: one-line UsageError, before any work."""
    head_dim = args.embedding_size // args.num_attention_heads
    refusals = [
        (args.require_gds and args.loader != "bin", "--require-gds needs --loader bin (--gds-bin)"),
        (args.compile_tuning and not args.compile, "--compile-tuning tunes what --compile compiles; add --compile"),
        (args.feature_attention != "sdpa" and args.attention == "mha",
         "--feature-attention chooses among the SDPA-path implementations; add --flash (or another --attention)"),
        (args.last_layer_target_only and args.attention == "mha",
         "--last-layer-target-only runs on the SDPA-path layout; add --flash (or another --attention)"),
        (args.attention == "flash" and (args.amp != "bf16" or args.cuda_graphs),
         "--attention flash needs --amp bf16 (no fp32 flash kernel) and no --cuda-graphs (flash takes no key mask)"),
        (args.attention == "fa4" and args.amp != "bf16",
         "--attention fa4 needs --amp bf16 (FlashAttention-4 has no fp32 kernel)"),
        (args.attention == "fa4" and head_dim not in FA4_HEAD_DIMS,
         f"--attention fa4 runs at head sizes {FA4_HEAD_DIMS} (checked against SDPA), not {head_dim}"),
        (args.attention in ("efficient", "cudnn", "triton", "fa4") and not on_cuda,
         f"--attention {args.attention} is a CUDA kernel and this run is on the CPU"),
        (args.attention == "triton" and on_cuda and not triton_kernel_runs(),
         "--attention triton needs the triton package and a GPU with bf16 tensor cores (sm80+); "
         "use --attention flash"),
        (args.attention == "fa4" and on_cuda and not fa4_kernel_runs(),
         "--attention fa4 needs the flash-attn-4 package (requirements-gpu.txt) and a Hopper or newer GPU (sm90+)"),
        (args.attention == "flex" and not args.cuda_graphs,
         "--attention flex serves the padded step of --cuda-graphs; add --cuda-graphs"),
        (args.cuda_graphs and args.optimizer != "schedulefree",
         "--cuda-graphs captures the optimizer step and needs the graph-safe schedule-free optimizer"),
        (args.sf_average_scale != 1 and not (args.optimizer == "schedulefree" and args.fused_optimizer),
         "--sf-average-scale is the fused schedule-free optimizer's: add --fused-optimizer (or --fast)"),
        (args.cuda_graphs and args.grad_checkpoint,
         "--grad-checkpoint recomputes inside backward, which --cuda-graphs cannot capture"),
    ]
    for refused, message in refusals:
        if refused:
            raise UsageError(message)


def attention_kernel(session) -> str:
    """Names the kernel the datapoint attention really runs: asks SDPA's dispatcher on the real shapes."""
    cfg, graphs, device = session.model_config, session.config.cuda_graphs, session.device
    head_dim = cfg.embedding_size // cfg.num_attention_heads
    dtype = torch.bfloat16 if session.config.amp == "bf16" else torch.float32
    what = f"{str(dtype).replace('torch.', '')}, head dim {head_dim}"
    counted = ", key count of the padded step read on the GPU" if graphs else ""
    fixed = {"triton": "triton" + counted, "fa4": "FlashAttention-4 (flash-attn-4, CuTe DSL)" + counted,
             "flex": "flex_attention, block mask over the padded keys"}   # mha: never asked
    if cfg.attention in fixed:
        return f"{fixed[cfg.attention]} ({what})"
    if device.type != "cuda":
        pin = f"; {cfg.attention} pinned by --attention" if cfg.attention != "sdpa" else ""
        return f"SDPA on the CPU ({what}; flash kernels need CUDA{pin})"
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows, split = int(session.info.num_datapoints.max()), int(session.info.splits[0])
    q = torch.zeros(2, cfg.num_attention_heads, min(rows, 256), head_dim, device=device, dtype=dtype)
    keys = q.shape[2] if graphs else min(split, 256)
    kv = torch.zeros(2, cfg.num_attention_heads, keys, head_dim, device=device, dtype=dtype)
    mask = torch.ones(1, 1, 1, keys, dtype=torch.bool, device=device) if graphs else None
    pin = sdpa_kernel(SDPA_KERNELS[cfg.attention]) if cfg.attention in SDPA_KERNELS else contextlib.nullcontext()
    try:
        with pin:
            choice = SDPBackend(int(torch._fused_sdp_choice(q, kv, kv, attn_mask=mask)))
    except (AttributeError, RuntimeError, ValueError):
        return f"SDPA, kernel unknown (torch._fused_sdp_choice unavailable; {what})"
    name = {kernel: n for n, kernel in SDPA_KERNELS.items()}.get(choice, choice.name.lower())
    why = (" — pinned by --attention" if cfg.attention != "sdpa" else
           " — key mask of the padded step: flash takes no mask" if graphs and name != "flash" else
           " — no flash kernel for fp32; add --amp bf16" if dtype == torch.float32 and name != "flash" else
           " — it plans on the host at every new split length (~0.1 s each); --attention flash does not"
           if name == "cudnn" and not graphs else "")
    return f"{name} ({what}{', masked' if graphs else ''}){why}"


def optimizations_block(session, args) -> list:
    """One line per requested optimization: active, or inactive and why."""
    c, m, cuda = session.config, session.model_config, session.device.type == "cuda"
    desc = session.loader.describe()
    lines = ["optimizations:"]
    data_flags = " ".join(f for f, on in (("--loader " + args.loader, args.loader != "h5"),
                                          ("--pinned", args.pinned), ("--streams", args.streams)) if on)
    if data_flags:
        lines.append(f"  {data_flags:<22s} data path: {desc['path']} ({desc['loader']})")
    lines += [f"  {'':<22s} {note}" for note in desc["notes"]]
    if m.attention != "mha":
        session.attention_kernel = attention_kernel(session)
        flag = "--flash" if m.attention == "sdpa" else "--attention " + m.attention
        lines.append(f"  {flag:<22s} active: one datapoint-attention call; kernel: {session.attention_kernel}")
    for flag, on, state in (
            ("--amp bf16", c.amp == "bf16", "active: bf16 autocast, fp32 weights and loss"
             + ("" if cuda else " (CPU autocast: slow, for checking only)")),
            ("--compile", c.compile, "active: torch.compile" + (" of forward_padded (static shapes)" if c.cuda_graphs
                                                               else " (dynamic split and rows)")),
            ("--compile-tuning", c.compile_tuning, "active: Inductor's coordinate-descent tuning of its kernels; a "
             "cold compile takes minutes, and losses differ between compiles"),
            ("--cuda-graphs", c.cuda_graphs, "active: one CUDA graph per step over zero-padded (B, R_max, F_max)"
             + ("; the gradients' all-reduce runs inside it (graphed DDP step: 1.95x one H100 on upstream's shape, "
                "docs/multi-gpu.md)" if session.world_size > 1 else "")
             if cuda else "inactive: no CUDA here; the same static-shape padded step runs eagerly"),
            ("--fused-optimizer", c.fused_optimizer, "active: schedule-free AdamW in foreach kernels"
             + (" (required by --cuda-graphs)" if c.cuda_graphs else "")
             + (f", average weight x {c.sf_average_scale:g}" if c.sf_average_scale != 1 else "")),
            ("--async-loss", c.async_loss or session.world_size > 1,
             f"active: loss read back every {c.log_every} steps, no host sync per step"),
            ("--grad-checkpoint", m.grad_checkpoint, "active: each layer recomputed in backward"),
            ("--last-layer-target-only", m.last_layer_target_only,
             f"active: layer {m.num_layers} computes the target column only ("
             + ("its test rows" if not c.cuda_graphs else "every row: the padded step"
                + ("; triton attends from its test rows only" if m.attention == "triton" else "")) + ")"),
            ("--feature-attention", m.feature_attention != "sdpa", f"active: {m.feature_attention} "
             + FEATURE_FORMS.get(m.feature_attention, "")),
            ("--feature-embedding", m.feature_embedding, "active (the model): a learned code per column position "
             "joins its cells"),
            ("--feature-encoding", m.feature_encoding != "linear", f"{m.feature_encoding} (the model): sin and cos of "
             f"{PERIODIC_FREQUENCIES} learned frequencies of each cell join its embedding")):
        if on:
            lines.append(f"  {flag:<22s} {state}")
    if c.compile:
        cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "the default under /tmp/torchinductor_$USER")
        lines.append(f"  {'':<22s} compiling happens in the first steps (reported, not counted as training "
                     f"time); Inductor's cache: {cache}")
    return lines if len(lines) > 1 else [NO_OPTIMIZATIONS]


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    quiet_other_ranks()   # before --fast resolves the data: only rank 0 reports the default dump
    on_cuda = cuda_requested(args.device)
    try:
        given = given_flags(parser, argv)
        notices = apply_recipe(args, given, on_cuda) if args.recipe else []
        fill_model_size(args)
        if args.fast:
            args.data = resolve_data(args.data)   # once: prepare() then trains on the same path, saying nothing more
            info = open_data(args.data, "cuda" if on_cuda else "cpu", scan_values=False)
            notices += apply_fast(args, int(info.num_datapoints.max()), int(info.num_features.max()), on_cuda, given)
        # The package's schedule-free step computes its scalars in Python, which a graph would freeze.
        args.fused_optimizer = args.fused_optimizer or args.cuda_graphs
        check_flags(args, on_cuda)
        session = prepare(from_flags(TrainConfig, args), from_flags(ModelConfig, args),
                          from_flags(LoaderConfig, args, kind=args.loader))
    except SETUP_ERRORS as e:
        return fail(e)
    except KeyboardInterrupt:
        return fail("interrupted before training started", 130)
    for line in start_lines(session) + notices + optimizations_block(session, args):
        print(line)
    return execute(session)


if __name__ == "__main__":
    sys.exit(main())
