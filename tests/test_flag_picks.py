"""What --fast and --recipe fill in and pick: flags not given only, kernels by table shape and what imports here,
the recipe's model by time budget and ranks."""
import pytest

from conftest import write_tiny_dump
from train import fill_model_size


@pytest.fixture
def dump(tmp_path):
    return write_tiny_dump(tmp_path / "d.h5", num_datasets=48, rows=40, features=5, seed=3)


def test_fast_fills_only_defaults_and_picks_kernels_by_table_length(monkeypatch):
    import train_optimized
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(train_optimized, "triton_kernel_runs", lambda: True)
    monkeypatch.setattr(train_optimized, "fa4_kernel_runs", lambda hopper_only=False: False)
    parse = lambda argv: fill_model_size(train_optimized.build_parser().parse_args(argv))   # as main() does

    def fast(argv, max_rows, on_cuda=True, max_features=5):
        args = parse(["--fast", *argv])
        given = train_optimized.given_flags(train_optimized.build_parser(), ["--fast", *argv])
        return args, train_optimized.apply_fast(args, max_rows=max_rows, max_features=max_features,
                                                on_cuda=on_cuda, given=given)

    long_tables, notices = fast([], 5000)
    assert long_tables.compile and long_tables.amp == "bf16" and long_tables.loader == "resident"
    assert long_tables.cuda_graphs and long_tables.attention == "triton" and not notices   # keys counted on GPU
    assert long_tables.feature_attention == "broadcast" and long_tables.last_layer_target_only
    assert not long_tables.streams                                  # a file resident on the GPU: no copies to overlap
    fly, _ = fast(["--data", "prior:real"], 512)
    assert fly.loader == "prior" and fly.streams                    # made on the fly: generated on a side stream
    assert fast(["--data", "prior:real"], 512, on_cuda=False)[0].loader == "prior"
    short, notices = fast([], 150)
    assert short.cuda_graphs and short.attention == "triton" and not notices
    kept, _ = fast(["--loader", "h5", "--amp", "off", "--feature-attention", "sdpa", "--attention", "triton"], 150)
    assert (kept.loader, kept.amp, kept.feature_attention) == ("h5", "off", "sdpa")   # given, though defaults
    assert fast([], 512, max_features=7)[0].feature_attention == "broadcast"   # 8 columns with the target
    assert fast([], 512, max_features=8)[0].feature_attention == "matmul"      # 9: batched matmuls
    assert fast(["--feature-attention", "broadcast"], 512, max_features=32)[0].feature_attention == "broadcast"
    monkeypatch.setenv("WORLD_SIZE", "2")
    ddp, notices = fast([], 5000)
    assert ddp.cuda_graphs and ddp.attention == "triton" and not notices   # the graphed DDP step (1.95x, docs)
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.setattr(train_optimized, "fa4_kernel_runs", lambda hopper_only=False: True)
    long_fa4, notices = fast([], 5000)
    assert long_fa4.cuda_graphs and long_fa4.attention == "fa4" and not notices   # long tables, one process
    assert fast([], 150)[0].attention == "triton"                                 # short tables: triton won
    assert fast(["--embedding-size", "64"], 5000)[0].attention == "triton"        # head size 16: fa4 refuses it
    assert fast(["--attention", "triton"], 5000)[0].attention == "triton"         # an explicit choice wins
    monkeypatch.setenv("WORLD_SIZE", "2")
    ddp_fa4, notices = fast([], 5000)
    assert ddp_fa4.attention == "fa4" and ddp_fa4.cuda_graphs and not notices      # DDP: fa4 won there too
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.setattr(train_optimized, "fa4_kernel_runs", lambda hopper_only=False: not hopper_only)
    assert fast([], 5000)[0].attention == "triton"                                # fa4 runs, but not on Hopper
    monkeypatch.setattr(train_optimized, "fa4_kernel_runs", lambda hopper_only=False: False)
    monkeypatch.setattr(train_optimized, "triton_kernel_runs", lambda: False)
    no_triton, notices = fast([], 5000)
    assert not no_triton.cuda_graphs and no_triton.attention == "flash"
    assert len(notices) == 1 and "FlashAttention-2 instead" in notices[0]
    short, notices = fast([], 150)
    assert short.cuda_graphs and short.attention == "flex" and not notices    # padded: flex skips masked keys
    assert short.last_layer_target_only
    mine, _ = fast(["--attention", "math"], 5000)
    assert mine.attention == "math"                                           # an explicit choice wins
    cpu, notices = fast([], 150, on_cuda=False)
    assert not (cpu.compile or cpu.cuda_graphs) and cpu.amp == "off" and cpu.attention == "sdpa"
    assert cpu.last_layer_target_only
    assert notices and "left out" in notices[0] and "--compile" in notices[0]   # says what it left out
    monkeypatch.setenv("WORLD_SIZE", "2")
    ddp, _ = fast([], 150)
    assert ddp.cuda_graphs and ddp.attention == "flex"


def test_fast_probes_that_kernels_import_and_falls_back_in_one_line(monkeypatch):
    """A half-installed flash-attn-4 (the package found, its kernels failing to import) and a broken triton: --fast
    says so in one notice each and picks the next kernel, never a traceback."""
    import importlib
    import importlib.util
    import types
    import train_optimized
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(train_optimized.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(train_optimized.torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(train_optimized, "KERNEL_IMPORT_ERRORS", {})
    broken = {"flash_attn.cute.interface"}
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: types.SimpleNamespace() if name in ("flash_attn", "triton")
                        else real_find_spec(name, *a))

    def fake_import(name, *a):
        if name in broken:
            raise ModuleNotFoundError(f"No module named 'cutlass.cute' (while importing {name})")
        return types.ModuleType(name)
    monkeypatch.setattr(importlib, "import_module", fake_import)
    args = fill_model_size(train_optimized.build_parser().parse_args(["--fast"]))
    notices = train_optimized.apply_fast(args, max_rows=5000, max_features=5, on_cuda=True)
    assert args.attention == "triton" and args.cuda_graphs                     # fa4 -> triton
    assert len(notices) == 1 and "flash_attn.cute.interface is installed but does not import" in notices[0]
    assert "cutlass.cute" in notices[0] and "\n" not in notices[0]
    broken.add("triton.language")
    train_optimized.KERNEL_IMPORT_ERRORS.clear()
    args = fill_model_size(train_optimized.build_parser().parse_args(["--fast"]))
    notices = train_optimized.apply_fast(args, max_rows=5000, max_features=5, on_cuda=True)
    assert args.attention == "flash" and not args.cuda_graphs                  # triton -> FlashAttention-2
    assert sum("does not import" in n for n in notices) == 2 and "FlashAttention-2 instead" in notices[-1]


def test_recipe_fills_only_defaults_and_its_dump_preset(monkeypatch):
    """--recipe real-tables: its flags where the user left defaults, a time budget unless --steps, its data unless
    --data (the real preset made on the fly: no file is written)."""
    import recipes
    import train_optimized
    parser = train_optimized.build_parser()

    def recipe(argv, on_cuda=True):
        args = parser.parse_args(["--recipe", "real-tables", *argv])
        return args, train_optimized.apply_recipe(args, train_optimized.given_flags(parser, argv), on_cuda=on_cuda)
    args, notices = recipe(["--lr", "1e-3", "--time-budget", "300"])
    chosen = recipes.RECIPES["real-tables"]
    assert args.fast and args.model_preset == "small" and args.lr == 1e-3                  # explicit --lr wins
    assert args.categorical_columns == chosen["categorical_columns"] and args.missing_cells == chosen["missing_cells"]
    assert args.time_budget == 300 and args.warmup_steps == 0
    assert args.data == f"prior:real:{recipes.DUMP_DATASETS['cuda']}" and args.data in notices[0]
    assert args.batch_size == chosen["batch_size"] == 16                                  # 16 tables of 512 rows
    assert len(notices) == 1 and "--recipe real-tables" in notices[0] and "(yours kept: --lr 0.001)" in notices[0]
    assert "--lr 0.002" not in notices[0]                                                  # not the recipe's, unused
    args, notices = recipe(["--data", "x.h5"])          # the default budget, 10 minutes on one GPU: medium
    assert args.time_budget == recipes.BUDGET_S >= recipes.LONG_FROM_S
    assert (args.model_preset, args.lr, args.warmup_steps) == ("medium", 1e-3, 500)
    assert "--model-preset medium --lr 0.001 --warmup-steps 500" in notices[0]
    args, notices = recipe(["--data", "x.h5", "--model-preset", "small"])   # a given preset: its own lr
    assert (args.model_preset, args.lr, args.warmup_steps) == ("small", 2e-3, 0)
    assert "(yours kept: --model-preset small)" in notices[0]
    args, _ = recipe(["--data", "x.h5", "--model-preset", "large"])         # large's measured lr and warm-up
    assert (args.model_preset, args.lr, args.warmup_steps) == ("large", 1e-3, 500)
    args, _ = recipe(["--data", "x.h5", "--model-preset", "nano"])          # an unlisted preset: small's lr
    assert (args.model_preset, args.lr, args.warmup_steps) == ("nano", 2e-3, 0)
    args, _ = recipe(["--steps", "5", "--data", "x.h5"], on_cuda=False)
    assert args.time_budget == 0 and args.data == "x.h5"                                  # --steps, --data win
    assert args.batch_size == recipes.CPU_BATCH and args.model_preset == "small"         # a CPU: a smaller batch
    args, notices = recipe(["--steps", "5", "--data", "x.h5", "--batch-size", "2"], on_cuda=False)
    assert args.batch_size == 2 and notices[0].endswith("(yours kept: --batch-size 2)")   # an explicit batch wins
    assert len(notices) == 1                                                               # no CPU batch notice
    monkeypatch.setenv("WORLD_SIZE", "2")          # torchrun: small, lr x 2 for the doubled global batch, warmed up
    args, notices = recipe(["--data", "x.h5"])
    assert args.model_preset == "small" and args.lr == pytest.approx(2 * recipes.MODELS["small"]["lr"])
    assert f"--lr {args.lr:g}" in notices[0]
    assert args.warmup_steps == recipes.DDP_WARMUP_STEPS and "--warmup-steps 500" in notices[0]
    args, _ = recipe(["--data", "x.h5", "--model-preset", "medium"])   # ddp-medium's runs: medium's lr x 2, warmed up
    assert (args.model_preset, args.lr, args.warmup_steps) == ("medium", pytest.approx(2e-3), 500)
    args, notices = recipe(["--data", "x.h5", "--lr", "4e-3"])   # given, though it equals train's default
    assert args.lr == 4e-3 and "(yours kept: --lr 0.004)" in notices[0]
