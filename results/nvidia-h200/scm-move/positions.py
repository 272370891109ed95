"""Which tests a cut `pytest -q` log marked F or s: its progress characters, in order, against this tree's collection
order (the same on the GPU machine: the skipped positions fall on the tests that need flash-attn-4, kvikio or two GPUs).

    python positions.py pytest-gpu.log      # from this folder; runs `pytest --collect-only -q tests/` at the root"""
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")


def progress(path):
    """The log's result characters in order (lines of test output, such as NOTE lines, left out)."""
    stream = ""
    for line in open(path).read().splitlines():
        if line.startswith("tests/"):
            break
        if set(line.split(" [")[0]) <= set(".sFExX"):
            stream += line.split(" [")[0]
    return stream


if __name__ == "__main__":
    stream = progress(sys.argv[1])
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "tests/"], cwd=ROOT,
                               capture_output=True, text=True).stdout.splitlines()
    collected = [line for line in collected if line.startswith("tests/")]
    print(f"{len(stream)} of {len(collected)} tests reported before the cut")
    for index, mark in enumerate(stream):
        if mark in "FE":
            print(f"{mark} {collected[index]}")
    print("skipped:", ", ".join(sorted({collected[i].split("::")[0] for i, m in enumerate(stream) if m == "s"})))
