"""GPU check that triton_attention.datapoint_attention compiles whole: torch.compile(fullgraph=True) against eager,
torch._dynamo.explain's graph breaks, dynamic=True over two key lengths. A PASS/FAIL line per check; exit 1 on FAIL."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from triton_attention import datapoint_attention  # noqa: E402

N, H, R, S, D = 36, 4, 5000, 2500, 24


def f(qkv, keys):
    """The model's pattern: q, k, v (N, H, rows, D) views of one (N, R, 3, H, D) buffer, keys sliced to `keys` rows."""
    q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
    out = datapoint_attention(q, k[:, :, :keys], v[:, :, :keys])
    return out, out.sum()


def run(fn, qkv, keys):
    """{name: tensor} of fn's out and its dq, dk, dv (the buffer's gradient, split)."""
    qkv = qkv.detach().requires_grad_()
    out, loss = fn(qkv, keys)
    loss.backward()
    g = qkv.grad
    return {"out": out.detach(), "dq": g[:, :, 0], "dk": g[:, :keys, 1], "dv": g[:, :keys, 2]}


def compare(got, ref):
    """(ok, text): max abs error per tensor, each within one bf16 ulp of the reference's largest magnitude."""
    ok, parts = True, []
    for name in ref:
        err = (got[name].float() - ref[name].float()).abs().max().item()
        tol = 2 ** -7 * ref[name].float().abs().max().item()
        ok &= bool(torch.isfinite(got[name]).all()) and err <= tol
        parts.append(f"{name} {err:.3g} (tol {tol:.3g})")
    return ok, ", ".join(parts)


def check(name, fn):
    """Runs one check; prints PASS/FAIL with its numbers (or the exception); returns whether it passed."""
    try:
        ok, text = fn()
    except Exception as e:   # a failure to compile or run is a FAIL line, not a crash
        ok, text = False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    print(f"{'PASS' if ok else 'FAIL'} {name}: {text}", flush=True)
    return ok


def fullgraph():
    compiled = torch.compile(f, fullgraph=True)
    got, ref = run(compiled, qkv, S), run(f, qkv, S)
    ok, text = compare(got, ref)
    layout = got["out"].transpose(1, 2).is_contiguous()   # (N, R, H, D) memory, as eager returns it
    return ok and layout, f"S={S}: {text}; out (N, R, H, D) memory: {layout}"


def explain():
    e = torch._dynamo.explain(f)(qkv.detach().requires_grad_(), S)
    return e.graph_break_count == 0, f"{e.graph_count} graph(s), {e.graph_break_count} break(s) {e.break_reasons}"


def dynamic():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(f, fullgraph=True, dynamic=True)
    oks, texts = [], []
    for keys in (S, 1237):
        ok, text = compare(run(compiled, qkv, keys), run(f, qkv, keys))
        oks.append(ok)
        texts.append(f"S={keys}: {text}")
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    return all(oks), "; ".join(texts) + f"; {graphs} graph(s) compiled"


if __name__ == "__main__":
    if not torch.cuda.is_available():
        print("FAIL setup: no CUDA device")
        sys.exit(1)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, N={N} H={H} R={R} S={S} D={D} bf16", flush=True)
    torch.manual_seed(0)
    qkv = torch.randn(N, R, 3, H, D, device="cuda", dtype=torch.bfloat16)
    results = [check("fullgraph compile vs eager", fullgraph), check("explain", explain),
               check("dynamic=True", dynamic)]
    sys.exit(0 if all(results) else 1)
