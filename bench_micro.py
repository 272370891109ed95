"""Micro-benchmarks in this process with the repository's own code: each loader without training
(loaders.make_loader), and the datapoint attention alone (model.datapoint_attention)."""
import statistics
import time

import torch

from bench_report import Progress, table
from dump_format import one_line
from loaders import LoaderConfig, make_loader
from model import ModelConfig, datapoint_attention, train_key_block_mask
from profile_utils import md_cell

# --loaders-only: (row name, LoaderConfig fields).
LOADER_CONFIGS = [
    ("baseline-h5", dict(kind="h5")), ("pinned", dict(kind="h5", pinned=True)),
    ("streams", dict(kind="h5", streams=True)), ("pinned+streams", dict(kind="h5", pinned=True, streams=True)),
    ("gds-bin", dict(kind="bin")), ("resident", dict(kind="resident")),
    ("prior", dict(kind="prior")), ("prior+streams", dict(kind="prior", streams=True))]   # generated, not read
LOADER_WARMUP = 10   # untimed batches per loader (thread start-up, first reads, allocator)

# --attention: (kernel of model.datapoint_attention, devices it runs on, every split or the median only).
# flex sees all R keys under the padded step's block mask and is compiled per split, hence the median only.
ATTENTION_KERNELS = [
    ("math", ("cpu",), "all"), ("flash", ("cpu", "cuda"), "all"), ("cudnn", ("cuda",), "all"),
    ("efficient", ("cuda",), "all"), ("flex", ("cuda",), "median"), ("triton", ("cuda",), "all"),
    ("triton-padded", ("cuda",), "all"), ("fa4", ("cuda",), "all"), ("fa4-padded", ("cuda",), "all")]
# The prior draws the split as int(R * U(0.1, 0.9)): these are its 10th, 50th and 90th percentiles.
ATTENTION_SPLIT_QUANTILES = (0.18, 0.5, 0.82)
# Hopper floors (H100 SXM / H200): bf16 dense tensor-core FLOP/s reachable by an attention kernel, and
# exponentials per second of the special-function units (132 SMs x 16 per clock x 1.98 GHz).
TENSOR_CORE_FLOPS = 700e12
SFU_EXP_PER_S = 132 * 16 * 1.98e9
TENSOR_CORE_HEAD_DIM = 32   # the MMA tiles pad a head dim of 24 to 32
BACKWARD_FLOP_FACTOR = 2.5  # backward FLOP = 2.5 x forward (FlashAttention's convention)
GRAPH_CLOCK = ("CUDA events around a CUDA graph replay of each call, as the graphed step runs (clock: graph); "
               "eager, with its host gaps, where a kernel cannot be captured")


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_ms(device, fn):
    """ms of one fn() call: CUDA events around it on CUDA (the GPU time of what it queues), else host clock."""
    if device.type != "cuda":
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()   # why: elapsed_time needs both events complete
    return start.elapsed_time(end)


# ---- Loaders -------------------------------------------------------------------------------------

def copy_ms(device, tensors, repeats):
    """{"pinned", "pageable"}: median ms (CUDA events) of copying `tensors` host-to-device; None on CPU."""
    if device.type != "cuda":
        return None
    out = {}
    for kind in ("pinned", "pageable"):
        src = [t.pin_memory() if kind == "pinned" else t for t in tensors]
        for t in src:
            t.to(device, non_blocking=True)   # warm-up: allocator and driver set-up
        _sync(device)
        out[kind] = statistics.median(
            timed_ms(device, lambda: [t.to(device, non_blocking=True) for t in src]) for _ in range(repeats))
    return out


def measure_loader(info, batch_size, device, fields, batches):
    """Batches/s and GB/s one loader delivers to `device` without training; {"status": "failed", "error"} else."""
    t0 = time.perf_counter()
    try:
        with make_loader(info, batch_size, device, LoaderConfig(**fields)) as loader:
            it = iter(loader)
            for _ in range(LOADER_WARMUP):
                next(it)
            _sync(device)   # why: warm-up copies must not spill into the timed window
            setup, nbytes, t1 = time.perf_counter() - t0, 0, time.perf_counter()
            for _ in range(batches):
                batch = next(it)
                nbytes += batch.x.nbytes + batch.y.nbytes
            _sync(device)   # why: copies may still be in flight; the clock stops when the last batch is there
            seconds = time.perf_counter() - t1
            desc = loader.describe()
    except Exception as e:   # one row says why (e.g. no kvikio); the other loaders still run
        return {"status": "failed", "error": f"{type(e).__name__}: {one_line(e)}"}
    return {"status": "ok", "loader": desc["loader"], "path": desc["path"], "notes": desc["notes"],
            "batches": batches, "bytes": nbytes, "seconds": seconds, "batches_per_s": batches / seconds,
            "ms_per_batch": 1000.0 * seconds / batches, "gb_per_s": nbytes / seconds / 1e9, "setup_s": setup}


def run_loaders(shapes, infos, device, repeats, batches, h2d_mib):
    """Every loader of LOADER_CONFIGS per workload, interleaved over repeats, and the host-to-device reference
    in the same process: {"h2d", "batch_copy_us", "rows", "measurements"}."""
    nbytes = h2d_mib << 20
    ms = copy_ms(device, [torch.ones(nbytes, dtype=torch.uint8)], 10)   # written once: no page faults
    h2d = ms and {kind: {"bytes": nbytes, "median_ms": t, "gb_per_s": nbytes / (t / 1e3) / 1e9, "repeats": 10}
                  for kind, t in ms.items()}
    copies = {}
    for w, s in shapes.items():
        ms = copy_ms(device, [torch.randn(s["batch_size"], s["rows"], s["features"]),
                              torch.randn(s["batch_size"], s["rows"])], 50)
        copies[w] = ms and {kind: t * 1000.0 for kind, t in ms.items()}
    plan = [(w, r, name, fields) for w in shapes for r in range(1, repeats + 1) for name, fields in LOADER_CONFIGS]
    progress, results = Progress(len(plan), "loaders without training"), []
    for workload, repeat, name, fields in plan:
        t0 = time.perf_counter()
        r = measure_loader(infos[workload], shapes[workload]["batch_size"], device, fields, batches)
        results.append({"workload": workload, "loader_config": name, "repeat": repeat, "kwargs": fields, **r})
        what = (f"{r['batches_per_s']:.1f} batches/s, {r['gb_per_s']:.3f} GB/s ({r['path']})"
                if r["status"] == "ok" else f"FAILED: {r['error']}")
        progress.line(f"{workload} r{repeat}/{repeats} {name}", what, time.perf_counter() - t0)
    rows = {w: [_loader_row(name, [r for r in results if r["workload"] == w and r["loader_config"] == name],
                            shapes[w]["batch_size"], h2d) for name, _ in LOADER_CONFIGS] for w in shapes}
    return {"h2d": h2d or None, "batch_copy_us": copies, "rows": rows, "measurements": results}


def _loader_row(name, mine, batch_size, h2d):
    ok = [r for r in mine if r["status"] == "ok"]
    if not ok:
        return {"loader_config": name, "status": "failed: " + mine[0]["error"]}
    bps = statistics.median(r["batches_per_s"] for r in ok)
    gbs = statistics.median(r["gb_per_s"] for r in ok)
    resident = str(ok[0]["path"]).startswith("resident")   # sliced in device memory: no copy to compare with
    return {"loader_config": name, "status": "ok", "path": ok[0]["path"], "loader": ok[0]["loader"],
            "batches_per_s": bps, "ms_per_batch": 1000.0 / bps, "datasets_per_s": bps * batch_size, "gb_per_s": gbs,
            "share_of_pinned_h2d": gbs / h2d["pinned"]["gb_per_s"] if h2d and not resident else None,
            "setup_s": statistics.median(r["setup_s"] for r in ok), "repeats": len(ok), "notes": ok[0]["notes"]}


def loaders_lines(data, shapes, dump_names, h2d_mib):
    """Markdown body of loaders.md: the host-to-device reference, then one table per workload."""
    h2d, lines = data["h2d"], ["## Host-to-device reference (same process, CUDA events)", ""]
    if h2d:
        lines += [f"- {kind}: {h2d[kind]['gb_per_s']:.1f} GB/s ({h2d_mib} MiB buffer, .to(device, "
                  f"non_blocking=True), median of {h2d[kind]['repeats']})" for kind in ("pinned", "pageable")]
        lines += [f"- one {w} batch (x and y): {c['pinned']:.1f} µs pinned, {c['pageable']:.1f} µs pageable "
                  "(median of 50)" for w, c in data["batch_copy_us"].items()]
    else:
        lines.append("- n/a: the bandwidth comparison needs CUDA; the GB/s below are bytes delivered into host "
                     "tensors")
    for workload, wrows in data["rows"].items():
        s, ok = shapes[workload], [row for row in wrows if row["status"] == "ok"]
        lines += ["", f"## {workload} workload", "", f"batch {s['batch_size']} x {s['rows']} rows x "
                  f"{s['features']} features; dump `{dump_names[workload]}`", ""]
        lines += table(["loader", "data path", "batches/s", "ms/batch", "datasets/s", "GB/s delivered",
                        "% of pinned H2D", "set-up s (untimed)"], [[
            row["loader_config"], md_cell(row["path"]), f"{row['batches_per_s']:.1f}", f"{row['ms_per_batch']:.3f}",
            f"{row['datasets_per_s']:.0f}", f"{row['gb_per_s']:.3f}",
            f"{100 * row['share_of_pinned_h2d']:.1f}%" if row["share_of_pinned_h2d"] is not None
            else "n/a (no copy)" if str(row["path"]).startswith("resident") and h2d else "n/a",
            f"{row['setup_s']:.2f}"] for row in ok])
        notes = [f"- `{row['loader_config']}`: {n}" for row in wrows
                 for n in (row["notes"] if row["status"] == "ok" else [row["status"]])]
        lines += [""] + notes if notes else []
    return lines + [""]


# ---- The datapoint attention alone ---------------------------------------------------------------

def attention_kernels(device):
    """[(kernel, "all" | "median")] of ATTENTION_KERNELS that run on `device`."""
    return [(name, splits) for name, devices, splits in ATTENTION_KERNELS if device.type in devices]


def attention_flop(N, H, R, S, D, head_dim=None):
    """Forward + backward FLOP of one layer: 4·N·H·R·S·D forward, BACKWARD_FLOP_FACTOR x that backward."""
    return 4 * N * H * R * S * (head_dim or D) * (1 + BACKWARD_FLOP_FACTOR)


def attention_floors_ms(N, H, R, S, D):
    """Hopper floors of one layer's forward + backward: sfu_ms (2·N·H·R·S exponentials, forward and the
    backward's recomputation) and tensor_core_ms (the FLOP with the head padded to TENSOR_CORE_HEAD_DIM)."""
    padded = max(D, TENSOR_CORE_HEAD_DIM)
    return {"sfu_ms": 2 * N * H * R * S / SFU_EXP_PER_S * 1e3,
            "tensor_core_ms": attention_flop(N, H, R, S, D, padded) / TENSOR_CORE_FLOPS * 1e3}


def replayed(call, device):
    """call, or on CUDA one CUDA graph of it replayed: the clock sees the GPU work alone, as in the graphed step
    (no host gaps between the launches). Run call() twice before, to compile and plan outside the capture."""
    if device.type != "cuda":
        return call
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    graph.replay()   # why: the first replay uploads the graph
    return graph.replay


def time_attention(kernel, qkv, grad, split, device, repeats):
    """{"first_ms" (host clock, with per-shape planning or compiling), "times_ms" of `repeats` calls after 2 warm-ups,
    "clock"} of fwd + bwd on q/k/v views of the (N, R, 3, H, D) buffer; keys: the first `split` rows (flex: all R,
    masked; *-padded: all R, the count read on the GPU, as in the padded --cuda-graphs step). On CUDA each call
    is a CUDA graph replay; a kernel that cannot be captured is timed eagerly, and "clock" says which."""
    fn, block_mask, key_mask, keys = datapoint_attention, None, None, slice(0, split)
    if kernel == "flex":
        fn = torch.compile(datapoint_attention, dynamic=False)
        block_mask = train_key_block_mask(torch.tensor(split, device=device), qkv.shape[1], device)
        keys = slice(None)
    if kernel.endswith("-padded"):
        kernel, key_mask = kernel.removesuffix("-padded"), torch.arange(qkv.shape[1], device=device) < split
        keys = slice(None)

    def call():
        q = qkv[:, :, 0].transpose(1, 2)                                              # (N, H, R, D), a view
        k, v = qkv[:, keys, 1].transpose(1, 2), qkv[:, keys, 2].transpose(1, 2)     # (N, H, S, D)
        fn(q, k, v, kernel, key_mask=key_mask, block_mask=block_mask).backward(grad)

    _sync(device)
    t0 = time.perf_counter()
    call()
    _sync(device)   # why: the first call's cost includes its GPU work
    first = (time.perf_counter() - t0) * 1e3
    call()
    qkv.grad = None
    clock = "graph" if device.type == "cuda" else "host"
    try:
        run = replayed(call, device)
    except Exception as e:   # e.g. a kernel that syncs or plans on the host: timed eagerly, with its host gaps
        torch.cuda.synchronize(device)
        qkv.grad = None
        call()   # why: a warm eager call after the failed capture
        run, clock = call, f"eager ({one_line(e)[:60]})"
    times = [timed_ms(device, run) for _ in range(repeats)]
    qkv.grad = None
    return {"first_ms": first, "times_ms": times, "clock": clock}


def time_step_attention(qkv, grad, split, columns, layers, device, repeats, last_layer_target_only=True,
                        kernel="triton"):
    """ms of `repeats` fwd + bwd passes of the datapoint attention as the graphed --fast step calls it on `kernel`
    ("triton" or "fa4"): layers - 1 padded calls over every sequence, then the last layer's target column (every
    columns-th sequence; triton attends from its test rows only, test_rows_only); without last_layer_target_only,
    `layers` full calls. On CUDA the passes replay one CUDA graph, as the step does (no host gaps between launches)."""
    key_mask = torch.arange(qkv.shape[1], device=device) < split                 # (R,) the train rows, a prefix

    def call():
        for layer in range(layers):
            last = last_layer_target_only and layer == layers - 1
            x, g = (qkv[columns - 1::columns], grad[columns - 1::columns]) if last else (qkv, grad)  # (N', R, 3, H, D)
            q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))                 # (N', H, R, D) views
            datapoint_attention(q, k, v, kernel, key_mask=key_mask, test_rows_only=last).backward(g)

    for _ in range(2):
        call()   # why: compiles the kernels before the capture or the clock
    qkv.grad = None
    run = replayed(call, device)   # the step replays its launches as one graph: so does the clock
    times = [timed_ms(device, run) for _ in range(repeats)]
    qkv.grad = None
    return times


def run_attention(shapes, device, repeats):
    """Every kernel of attention_kernels(device) at each workload's shape and split quantiles:
    {workload: {"N", "H", "R", "D", "layers", "dtype", "rows"}}, a row per (kernel, split)."""
    cfg = ModelConfig()
    H, D, layers = cfg.num_attention_heads, cfg.embedding_size // cfg.num_attention_heads, cfg.num_layers
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32   # bf16 is what the fast paths train in
    plan = [(w, q, k) for w in shapes for q in ATTENTION_SPLIT_QUANTILES for k, splits in attention_kernels(device)
            if splits == "all" or q == 0.5]
    progress = Progress(len(plan), "datapoint attention alone")
    results = {}
    for workload, shape in shapes.items():
        R, N = shape["rows"], shape["batch_size"] * (shape["features"] + 1)
        qkv = torch.randn(N, R, 3, H, D, device=device, dtype=dtype, requires_grad=True)
        # The gradient in the layout the out-projection's backward hands the kernel: (N, R, H, D) memory.
        grad = torch.randn(N, R, H, D, device=device, dtype=dtype).transpose(1, 2)   # (N, H, R, D) view
        rows, step_rows = [], []
        for quantile, kernel in ((q, k) for w, q, k in plan if w == workload):
            split, t0 = max(1, min(R, int(R * quantile))), time.perf_counter()
            row = _attention_row(kernel, qkv, grad, split, device, repeats, layers)
            rows.append(row)
            progress.line(f"{workload} {kernel} split {split}", f"{row['median_ms']:.3f} ms (fwd+bwd, one layer), "
                          f"first call {row['first_ms']:.1f} ms" if row["status"] == "ok" else row["status"],
                          time.perf_counter() - t0)
            if kernel.endswith("-padded") and row["status"] == "ok":   # the key-count kernels: time the step too
                step = {"kernel": kernel.removesuffix("-padded"), "split": split}
                for key, target_only in (("step", True), ("full", False)):
                    times = time_step_attention(qkv, grad, split, shape["features"] + 1, layers, device, repeats,
                                                target_only, step["kernel"])
                    step |= {f"{key}_times_ms": times, f"{key}_median_ms": statistics.median(times),
                             f"{key}_min_ms": min(times), f"{key}_max_ms": max(times)}
                step_rows.append(step)
        del qkv, grad
        results[workload] = {"N": N, "H": H, "R": R, "D": D, "layers": layers, "dtype": str(dtype), "rows": rows,
                             "step_rows": step_rows}
    return results


def _attention_row(kernel, qkv, grad, split, device, repeats, layers):
    N, R, _, H, D = qkv.shape
    try:
        t = time_attention(kernel, qkv, grad, split, device, repeats)
    except Exception as e:   # a kernel this GPU / dtype / head size cannot run: one row says why
        return {"kernel": kernel, "split": split, "status": f"n/a: {one_line(e)[:140]}"}
    median = statistics.median(t["times_ms"])
    floors = attention_floors_ms(N, H, R, split, D)
    on_gpu = device.type == "cuda"   # the floors are Hopper's: a share of them means nothing on a CPU
    return {"kernel": kernel, "split": split, "status": "ok", **t, "median_ms": median, "min_ms": min(t["times_ms"]),
            "max_ms": max(t["times_ms"]), "per_step_ms": median * layers,
            "tflops": attention_flop(N, H, R, split, D) / (median / 1e3) / 1e12, **floors,
            "sfu_share": floors["sfu_ms"] / median if on_gpu else None,
            "tensor_core_share": floors["tensor_core_ms"] / median if on_gpu else None}


def attention_lines(results, targets):
    """Markdown body of attention.md: a table per workload and the fastest kernel at the median split;
    targets: {workload: step target in ms or None}."""
    def share(x):
        return f"{100 * x:.0f}%" if x is not None else "n/a"

    lines = []
    for workload, r in results.items():
        lines += [f"## {workload} workload", "",
                  f"N = B x C = {r['N']} sequences, H = {r['H']} heads of D = {r['D']}, R = {r['R']} rows", ""]
        lines += table(["kernel", "split S", "fwd+bwd, one layer (ms)", "range", "per step, all layers (ms)",
                        "TFLOP/s", "SFU floor (ms, share)", "tensor-core floor (ms, share)", "first call (ms)",
                        "clock"], [
            [row["kernel"], row["split"], row["status"], "", "", "", "", "", "", ""] if row["status"] != "ok" else
            [row["kernel"], row["split"], f"{row['median_ms']:.3f}", f"{row['min_ms']:.3f}–{row['max_ms']:.3f}",
             f"{row['per_step_ms']:.2f}", f"{row['tflops']:.3g}", f"{row['sfu_ms']:.3f} ({share(row['sfu_share'])})",
             f"{row['tensor_core_ms']:.3f} ({share(row['tensor_core_share'])})", f"{row['first_ms']:.1f}",
             row["clock"]]
            for row in r["rows"]])
        median_split = max(1, min(r["R"], int(r["R"] * 0.5)))
        ok = [row for row in r["rows"] if row["status"] == "ok" and row["split"] == median_split]
        if ok:
            best = min(ok, key=lambda row: row["per_step_ms"])
            line = (f"- fastest at the median split: `{best['kernel']}`, {best['per_step_ms']:.2f} ms per step for "
                    "the datapoint attention alone")
            if targets.get(workload):
                line += f", {100 * best['per_step_ms'] / targets[workload]:.0f}% of the {targets[workload]:g} ms " \
                        "step target"
            lines += ["", line]
        if r.get("step_rows"):
            lines += ["", f"As the graphed `--fast` step calls it ({r['layers'] - 1} padded layers, then the last "
                      "layer's target column; triton attends from its test rows only, fa4 from every row) beside "
                      f"{r['layers']} full padded layers: fwd + bwd of all layers as one CUDA graph, replayed:", ""]
            lines += table(["kernel", "split S", "as the step calls it (ms)", "range",
                            f"{r['layers']} full layers (ms)", "range"], [
                [row["kernel"], row["split"], f"{row['step_median_ms']:.2f}",
                 f"{row['step_min_ms']:.2f}–{row['step_max_ms']:.2f}",
                 f"{row['full_median_ms']:.2f}", f"{row['full_min_ms']:.2f}–{row['full_max_ms']:.2f}"]
                for row in r["step_rows"]])
        lines.append("")
    return lines


def attention_method_lines(dtype, repeats, cuda, layers):
    """The method bullets of attention.md's header."""
    return [
        f"- method: one layer's model.datapoint_attention, forward + backward, on q/k/v views of one "
        f"(N, R, 3, H, D) {dtype.replace('torch.', '')} buffer as the model's in-projection writes them; every "
        "row queries the first S rows (sliced keys), except flex and *-padded: all R keys under the block mask "
        f"or with the key count in device memory, as in the padded --cuda-graphs step; median of {repeats} calls "
        f"after 2 warm-ups, timed with {GRAPH_CLOCK if cuda else 'the host clock'}",
        "- first call: host clock, includes per-shape work (cuDNN plans every new split length; flex compiles); "
        f"TFLOP/s counts 4·N·H·R·S·D forward and {BACKWARD_FLOP_FACTOR:g}x that backward",
        f"- floors (H100/H200): SFU = 2·N·H·R·S exponentials (forward + backward recomputation) at "
        f"{SFU_EXP_PER_S / 1e12:.2f}e12/s; tensor core = the FLOP with D padded to {TENSOR_CORE_HEAD_DIM} at "
        f"{TENSOR_CORE_FLOPS / 1e12:.0f} TFLOP/s bf16 dense; share = floor / measured (100% = at the floor)",
        f"- per step: {layers} layers x the one-layer median; splits at the prior's 10/50/90th percentiles of "
        "int(R x U(0.1, 0.9))"]
