import copy, glob, os, sys, time
import torch
from kernelwright.judge.inputs import import_file, init_model, raw_inputs, apply_distribution
from kernelwright.judge.records import Case

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda")
only = sys.argv[1:]


def first(o):
    return o[0] if isinstance(o, (tuple, list)) else o


def tol_ratio(out, ref, tol):
    atol = tol.get("atol", 1e-4) * max(1.0, ref.pow(2).mean().sqrt().item())
    rtol = tol.get("rtol", 1e-4)
    err = (out.double() - ref).abs()
    return (err / (atol + rtol * ref.abs())).max().item()


for path in sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "[!_]*.py"))):
    name = os.path.basename(path)[:-3]
    if only and name not in only:
        continue
    m = import_file(path, "p_" + name)
    tol = getattr(m, "TOLERANCE", {})
    model = init_model(m, m.Model, 0, dev)
    x = raw_inputs(m, Case("native", 1), dev)
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.no_grad():
        o1 = first(model(*x)); torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - base) / 1e9
        o2 = first(model(*x))
        same = torch.equal(o1, o2)
        for _ in range(2):
            model(*x)
        ts = []
        for _ in range(5):
            a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
            a.record(); model(*x); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
        ts.sort()
        rms = o1.pow(2).mean().sqrt().item()
        line = f"{name:36s} t={ts[2]:7.3f}ms peak={peak:6.2f}GB det={same} out{tuple(o1.shape)} rms={rms:.4g} max={o1.abs().max().item():.4g} tiny={(o1.abs() < 1e-3).float().mean().item():.3f}"
        x0 = x[0]
        if o1.shape == x0.shape:
            d = o1 - x0
            line += f" |o-x|rms={d.pow(2).mean().sqrt().item():.4g} max={d.abs().max().item():.4g}"
        xb = raw_inputs(m, Case("native", 2), dev)
        line += f" diff_other_inputs={(first(model(*xb)) - o1).abs().max().item():.4g}"
        print(line, flush=True)
        m64 = copy.deepcopy(model).double()
        ref = first(m64(*[t.double() if torch.is_tensor(t) and t.is_floating_point() else t for t in x]))
        res = [f"native:{tol_ratio(o1, ref, tol):.3g}"]
        del ref
        for kind in ("uniform", "large"):
            xx = raw_inputs(m, Case("native", 3), dev)
            apply_distribution(xx, kind, 3)
            o = first(model(*xx))
            r = first(m64(*[t.double() if torch.is_tensor(t) and t.is_floating_point() else t for t in xx]))
            res.append(f"{kind}:{tol_ratio(o, r, tol):.3g}(fin={torch.isfinite(o).all().item()},rms={o.pow(2).mean().sqrt().item():.3g})")
            del o, r, xx
        for i in range(len(m.get_test_inputs())):
            xx = raw_inputs(m, Case("extra", 4, i), dev)
            o = first(model(*xx))
            r = first(m64(*[t.double() if torch.is_tensor(t) and t.is_floating_point() else t for t in xx]))
            res.append(f"extra{i}{tuple(o.shape)}:{tol_ratio(o, r, tol):.3g}")
        print("    tol-ratio (fp32 vs fp64, <1 passes): " + " ".join(res), flush=True)
        del m64, model, x, xb, o1, o2
        torch.cuda.empty_cache()
