import os, sys, torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import convmixer_network as cm
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.benchmark = False
def t(fn, n=5):
    for _ in range(2): fn()
    ts = []
    for _ in range(n):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    return sorted(ts)[n // 2]
with torch.no_grad():
    for (batch, img, dim, depth, k, p) in [(256, 256, 256, 4, 9, 8), (256, 256, 256, 4, 7, 8), (256, 256, 256, 4, 5, 8), (256, 256, 192, 4, 9, 8), (256, 256, 384, 4, 9, 16), (256, 256, 512, 4, 9, 16), (256, 256, 768, 4, 9, 16)]:
        m = cm.Model(dim, depth, k, p, 1000).cuda().eval()
        x = torch.randn(batch, 3, img, img, device="cuda")
        h = m.stem(x)
        tot = t(lambda: m(x)); st = t(lambda: m.stem(x)); sp = t(lambda: m.spatial[0](h)); ch = t(lambda: m.channel[0](h))
        print(f"b{batch} img{img} dim{dim} depth{depth} k{k} p{p}: total {tot:.2f} ms stem {st:.2f} spatial {sp:.2f} channel {ch:.2f}", flush=True)
