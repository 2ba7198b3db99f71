"""Throwaway: run an example problem/candidate pair through the shim runtime and compare."""
import importlib.util, pathlib, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).parent / "kwshim"))
import torch

def mod(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m

def variants(inputs):
    """The judge's distributions: as given, uniform [-1, 1], large magnitudes."""
    out = [("given", inputs)]
    f = lambda g: [g(t) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
    out.append(("uniform", f(lambda t: torch.rand_like(t) * 2 - 1)))
    out.append(("large", f(lambda t: torch.randn_like(t) * 100)))
    return out

def main(folder, device):
    folder = pathlib.Path(folder)
    torch.set_default_device(device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    prob = mod(folder / "problem.py", "problem")
    torch.manual_seed(1)
    ref = prob.Model(*prob.get_init_inputs())
    cand = mod(folder / "model_new.py", "model_new")
    new = cand.ModelNew(*prob.get_init_inputs())
    sd_r = {k: v.shape for k, v in ref.state_dict().items()}
    sd_n = {k: v.shape for k, v in new.state_dict().items()}
    assert sd_r == sd_n, (sd_r, sd_n)
    new.load_state_dict(ref.state_dict())
    tol = getattr(prob, "TOLERANCE", {"atol": 1e-4, "rtol": 1e-4})
    sets = [("main", prob.get_inputs())]
    if hasattr(prob, "get_test_inputs"):
        sets += [(f"test{i}", s) for i, s in enumerate(prob.get_test_inputs())]
    bad = 0
    for name, base in sets:
        for dist, inp in variants(base) if name == "main" or device == "cpu" else [("given", base)]:
            clones = [t.clone() if isinstance(t, torch.Tensor) else t for t in inp]
            with torch.no_grad():
                r = ref(*inp); o = new(*inp)
            if device == "cuda": torch.cuda.synchronize()
            same = all(torch.equal(a, b) for a, b in zip(inp, clones) if isinstance(a, torch.Tensor))
            scale = max(1.0, r.double().pow(2).mean().sqrt().item())
            ok = (type(o) is torch.Tensor and o.shape == r.shape and o.dtype == r.dtype and same
                  and bool(torch.isfinite(o).all()) and torch.allclose(o, r, atol=tol["atol"] * scale, rtol=tol["rtol"]))
            err = (o.double() - r.double()).abs().max().item() if o.shape == r.shape and o.numel() else 0.0
            shapes = [tuple(t.shape) + (() if t.is_contiguous() else ("nc",)) for t in inp if isinstance(t, torch.Tensor)]
            print(f"  {name:6s} {dist:8s} {str(shapes):40s} ok={ok} max_abs_err={err:.3g}")
            bad += not ok
    return bad

if __name__ == "__main__":
    device = sys.argv[1]
    total = 0
    for f in sys.argv[2:]:
        print(f)
        total += main(f, device)
    print("FAILURES:", total)
