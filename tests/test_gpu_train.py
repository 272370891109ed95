"""GPU-only checks of the speed levers: the captured CUDA-graph step, compile, bf16 and the fused
optimizer give the losses of the eager fp32 step (within the precision each one uses)."""
import json

import pytest
import torch

from conftest import write_tiny_dump

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def losses(tmp_path, dump, *flags, steps=12):
    import train_optimized
    path = str(tmp_path / f"r{abs(hash(flags))}.json")
    code = train_optimized.main(["--data", dump, "--steps", str(steps), "--batch-size", "4", "--seed", "4",
                                 "--no-eval", "--log-every", "4", "--timing-warmup", "1", "--record", path, *flags])
    assert code == 0
    with open(path) as f:
        return json.load(f)["extra"]


@pytest.fixture
def dump(tmp_path):
    # Rows not ragged, like the prior's dumps: torch 2.11's Inductor asserts (tiling_utils) when
    # --compile meets row counts that vary per batch (docs/reliability.md, known limitations).
    return write_tiny_dump(tmp_path / "g.h5", num_datasets=64, rows=48, features=5, seed=6, ragged=False)


def test_cuda_graph_step_matches_eager(tmp_path, dump):
    base = losses(tmp_path, dump, "--flash")["losses"]
    graphed = losses(tmp_path, dump, "--flash", "--cuda-graphs", "--fused-optimizer")["losses"]
    # steps 1-3 eager warm-up, step 4 captured, 5.. replayed: all must match the sliced eager run
    assert graphed == pytest.approx(base, rel=2e-4, abs=2e-5)


def test_cuda_graph_step_with_warm_up_matches_the_package(tmp_path, dump):
    """--warmup-steps in the graphed step: the lr schedule and the weight sum live in device tensors that the graph
    replays; the losses match the eager step on the schedulefree package, through the warm-up and past it."""
    base = losses(tmp_path, dump, "--flash", "--warmup-steps", "6")["losses"]
    graphed = losses(tmp_path, dump, "--flash", "--warmup-steps", "6", "--cuda-graphs", "--fused-optimizer")["losses"]
    assert graphed == pytest.approx(base, rel=2e-4, abs=2e-5)
    plain = losses(tmp_path, dump, "--flash")["losses"]
    assert base[4:] != pytest.approx(plain[4:], rel=1e-3)   # the warm-up changed the run: not vacuous


def test_compile_and_bf16_stay_close(tmp_path, dump):
    base = losses(tmp_path, dump, "--flash")["losses"]
    fast = losses(tmp_path, dump, "--flash", "--amp", "bf16", "--compile", "--fused-optimizer", "--async-loss",
                  "--resident")["losses"]
    assert fast == pytest.approx(base, rel=5e-2, abs=2e-2)  # bf16 forward: percent-level agreement


def test_graphs_with_compile_and_flex(tmp_path, dump):
    base = losses(tmp_path, dump, "--flash")["losses"]
    for extra in (["--compile"], ["--attention", "flex", "--compile"]):
        got = losses(tmp_path, dump, "--flash", "--cuda-graphs", "--fused-optimizer", *extra)["losses"]
        assert got == pytest.approx(base, rel=1e-3, abs=1e-4), extra


def test_graphs_with_triton_read_the_key_count_on_the_gpu(tmp_path, dump):
    """The padded graphed step on the triton kernel (keys counted on the device) against the sliced eager one."""
    flags = ("--attention", "triton", "--amp", "bf16", "--fused-optimizer", "--last-layer-target-only")
    base = losses(tmp_path, dump, *flags)["losses"]
    for extra in ([], ["--compile"]):
        rec = losses(tmp_path, dump, *flags, "--cuda-graphs", *extra)
        assert rec["losses"] == pytest.approx(base, rel=2e-2, abs=2e-3), extra   # bf16 in either order of sums
        assert rec["attention_kernel"].startswith("triton, key count"), rec["attention_kernel"]


def test_pinned_flash_kernel_compiles_and_evaluates(tmp_path, dump):
    """--attention flash under bf16 + compile gives the auto kernel's losses, and the fp32 eval
    (which has no flash kernel) still runs: the eval copy leaves the kernel to PyTorch."""
    import train_optimized
    base = losses(tmp_path, dump, "--flash", "--amp", "bf16", "--compile")["losses"]
    path = str(tmp_path / "pinned.json")
    code = train_optimized.main(["--data", dump, "--steps", "12", "--batch-size", "4", "--seed", "4",
                                 "--log-every", "4", "--timing-warmup", "1", "--eval-every", "12", "--record", path,
                                 "--attention", "flash", "--amp", "bf16", "--compile"])
    assert code == 0
    with open(path) as f:
        rec = json.load(f)["extra"]
    assert rec["losses"] == pytest.approx(base, rel=5e-2, abs=2e-2)
    assert rec["eval"] and rec["attention_kernel"].startswith("flash")


def test_kernel_line_says_cudnn_plans_at_every_split(tmp_path, dump):
    """SDPA's own bf16 pick on sliced tables: where it is cuDNN (torch 2.11 on Hopper), the line says what it costs."""
    kernel = losses(tmp_path, dump, "--flash", "--amp", "bf16", steps=4)["attention_kernel"]
    assert kernel.startswith(("cudnn", "flash", "efficient")), kernel
    assert not kernel.startswith("cudnn") or "plans on the host at every new split length" in kernel, kernel


def test_graphed_step_captures_the_nccl_gradient_all_reduce(tmp_path, dump):
    """A one-rank NCCL group: the graphed step's all-reduce is captured and replayed, and the losses equal
    the graphed step without a process group (the average over one rank is the identity)."""
    import torch.distributed as dist
    from graphed_step import FusedScheduleFreeAdamW, GraphedTrainStep
    from loaders import LoaderConfig, make_loader
    from model import NanoTabPFNModel

    def run():
        torch.manual_seed(0)
        model = NanoTabPFNModel(attention="sdpa").cuda()
        step = GraphedTrainStep(model, FusedScheduleFreeAdamW(model.parameters(), lr=4e-3), 4, 48, 5,
                                torch.device("cuda"))
        loader = make_loader(dump, 4, torch.device("cuda"), LoaderConfig())
        out = []
        for _, batch in zip(range(10), loader):
            step.load(batch)
            out.append(float(step.run()))
        loader.close()
        return out, step.graph is not None

    plain, _ = run()
    dist.init_process_group("nccl", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        reduced, captured = run()
    finally:
        dist.destroy_process_group()
    assert captured and reduced == pytest.approx(plain, rel=1e-5, abs=1e-6)
