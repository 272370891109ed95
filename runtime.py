"""What every script shares about its process: the CLI's one-line errors, the device, the ranks, the seed."""
import argparse
import os
import random
import re
import sys


class UsageError(ValueError):
    """Bad command-line input: the script prints `error: <message>` (one line) and exits 2."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the repository's error style: one line, no usage block, exit status 2; flags spelled out in full
    (an abbreviation would change meaning when a longer flag is added, and quality.curve_runs reads flags by name)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message):
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def checked_type(kind, name: str, valid):
    """An argparse type: `kind(text)` where valid(value) holds; `name` says what the flag takes in its error."""
    def parse(text: str):
        try:
            value = kind(text)
            if valid(value):
                return value
        except ValueError:
            pass
        # argparse prints "argument --flag: '0' is not an integer >= 1"
        raise argparse.ArgumentTypeError(f"{text!r} is not {name}")
    return parse


def out_of_memory(exc: BaseException) -> bool:
    """torch's CUDA OutOfMemoryError, Python's MemoryError, or the CPU allocator's RuntimeError."""
    import torch
    text = str(exc).lower()
    return isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text))


def memory_error_line(exc: BaseException, attention: str, batch_size: int) -> str:
    """One line for an out-of-memory error of training: the allocation that failed (from the allocator's
    message: the CPU's "allocate N bytes", CUDA's "Tried to allocate 6.44 GiB") and the flags that need less."""
    from safe_io import format_bytes
    found = re.search(r"allocate (\d+) bytes", str(exc)) or re.search(r"allocate ([\d.]+ [KMGTP]i?B)", str(exc))
    needed = "" if not found else format_bytes(int(found[1])) if found[1].isdigit() else found[1]
    fits = []
    if attention == "mha":   # nn.MultiheadAttention holds the (rows x rows) attention scores
        fits.append("--flash (train_optimized.py: a fused kernel that never holds the rows x rows attention scores)")
    if batch_size > 1:
        fits.append(f"a smaller --batch-size (e.g. {batch_size // 2})")
    return (f"out of memory{f' (an allocation of {needed} failed)' if needed else ''}; "
            f"{' or '.join(fits) or 'a smaller dump (fewer rows)'} needs less")


def fail(message: str, code: int = 2) -> int:
    """Prints `error: <message>` as one line on stderr and returns the exit code to pass to sys.exit."""
    print("error: " + " ".join(str(message).split()), file=sys.stderr)
    return code


def world_size() -> int:
    """Processes in this run: torchrun's WORLD_SIZE, 1 when not launched by torchrun."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def quiet_other_ranks():
    """Under torchrun only rank 0 prints: the other ranks' stdout goes to /dev/null; errors still reach stderr."""
    other = world_size() > 1 and os.environ.get("RANK", "0") != "0"   # torchrun sets both; a lone RANK is not torchrun
    if other and getattr(sys.stdout, "name", None) != os.devnull:
        sys.stdout = open(os.devnull, "w")


def cuda_requested(name: str) -> bool:
    """Whether --device `name` will run on CUDA on this machine."""
    import torch  # lazily here and below: the data CLIs use this module without torch
    return torch.cuda.is_available() and not name.startswith("cpu") and name != "meta"


def resolve_device(name: str):
    """--device auto|cpu|cuda|cuda:N -> torch.device; a CUDA device on a machine without one is an error."""
    import torch
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name}: not a device (auto, cpu, cuda or cuda:N)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: CUDA is not available on this machine")
    return device


def init_distributed(requested_device: str):
    """(rank, world_size, device); under torchrun starts NCCL (GPU of LOCAL_RANK) or gloo (CPU)."""
    if world_size() == 1:
        return 0, 1, resolve_device(requested_device)
    import torch
    import torch.distributed as dist
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = cuda_requested(requested_device)
    if use_cuda:
        torch.cuda.set_device(local_rank)
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off: required on shared hosts
    dist.init_process_group("nccl" if use_cuda else "gloo")
    return dist.get_rank(), dist.get_world_size(), torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")


def rank_and_world():
    """(rank, world size) of an initialised process group, (0, 1) otherwise."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def set_seed(seed: int):
    import numpy as np
    import torch
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
