"""Throwaway device check: extra shapes per kernel path, then timing vs eager and torch.compile."""
import importlib.util, pathlib, statistics, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).parent / "kwshim"))
import torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_default_device("cuda")
EX = pathlib.Path(__file__).parent.parent / "cuda"

def mod(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m

def check(tag, ref, new, inp, tol=1e-4):
    with torch.no_grad():
        r = ref(*inp); o = new(*inp)
    torch.cuda.synchronize()
    scale = max(1.0, r.double().pow(2).mean().sqrt().item()) if r.numel() else 1.0
    ok = o.shape == r.shape and torch.allclose(o, r, atol=tol * scale, rtol=tol, equal_nan=True)
    err = (o.double() - r.double()).abs().nan_to_num(0).max().item() if r.numel() else 0
    print(f"  {tag:45s} ok={ok} err={err:.3g}")
    return ok

def extra():
    bad = 0
    sm = mod(EX / "softmax/model_new.py", "smn"); smp = mod(EX / "softmax/problem.py", "smp")
    ref, new = smp.Model(), sm.ModelNew()
    for shape in [(9, 3000), (9, 1501), (2, 16383), (2, 16385), (3, 32769), (1, 1), (5, 3), (300, 8192)]:
        bad += not check(f"softmax {shape}", ref, new, [torch.randn(shape)])
    x = torch.randn(6, 5000); x[0] = float("-inf"); x[1, ::3] = float("-inf"); x[2, :4999] = float("-inf")
    bad += not check("softmax -inf rows", ref, new, [x])
    bad += not check("softmax x*1000", ref, new, [torch.randn(64, 32768) * 1000])
    lp = mod(EX / "layernorm/problem.py", "lnp"); ln = mod(EX / "layernorm/model_new.py", "lnn")
    for rows, cols in [(5, 1000), (5, 3000), (5, 8191), (3, 40000), (3, 20001), (2, 5), (70000, 64)]:
        r = lp.Model((cols,)); n = ln.ModelNew((cols,)); n.load_state_dict(r.state_dict())
        bad += not check(f"layernorm ({rows}, {cols})", r, n, [torch.randn(rows, cols) * 3 + 1])
    ep = mod(EX / "elementwise_chain/problem.py", "ewp"); ew = mod(EX / "elementwise_chain/model_new.py", "ewn")
    r, n = ep.Model(1.5, -0.25), ew.ModelNew(1.5, -0.25)
    for numel in [1, 2, 3, 5, 4099, 10_000_003]:
        bad += not check(f"elementwise n={numel}", r, n, [torch.randn(numel)])
    bad += not check("elementwise misaligned", r, n, [torch.randn(10_001)[2:]])
    mp = mod(EX / "matmul/problem.py", "mmp"); mm = mod(EX / "matmul/model_new.py", "mmn")
    r, n = mp.Model(), mm.ModelNew()
    for m_, k_, n_ in [(1000, 1000, 1000), (513, 129, 257), (128, 8, 128), (129, 9, 130), (3, 4096, 5), (2048, 3, 2048)]:
        bad += not check(f"matmul {m_}x{k_}x{n_}", r, n, [torch.randn(m_, k_), torch.randn(k_, n_)])
    return bad

def bench(fns, inputs, n=40):
    flush = torch.empty(512 * 2**20 // 4, dtype=torch.float32)
    times = {k: [] for k in fns}
    with torch.no_grad():
        for f in fns.values():
            for _ in range(3): f(*inputs)
        torch.cuda.synchronize()
        for _ in range(n):
            for k, f in fns.items():
                flush.zero_()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record(); f(*inputs); e.record(); torch.cuda.synchronize()
                times[k].append(s.elapsed_time(e))
    return {k: statistics.median(v) for k, v in times.items()}

def timing(name):
    p = mod(EX / name / "problem.py", name + "_p")
    torch.manual_seed(0)
    ref = p.Model(*p.get_init_inputs())
    t0 = time.time(); new = mod(EX / name / "model_new.py", name + "_n").ModelNew(*p.get_init_inputs()); tb = time.time() - t0
    new.load_state_dict(ref.state_dict())
    comp = torch.compile(ref)
    inp = p.get_inputs()
    t0 = time.time(); comp(*inp); torch.cuda.synchronize(); tc = time.time() - t0
    res = bench({"eager": ref, "compile": comp, "new": new}, inp)
    print(f"TIME {name:20s} eager {res['eager']:.4f} ms  compile {res['compile']:.4f} ms  new {res['new']:.4f} ms"
          f"  new/eager {res['new']/res['eager']:.3f}  new/compile {res['new']/res['compile']:.3f}  (import {tb:.1f}s, compile {tc:.1f}s)")

if __name__ == "__main__":
    what = sys.argv[1]
    if what == "extra":
        print("EXTRA FAILURES:", extra())
    else:
        for name in sys.argv[2:]:
            timing(name)
