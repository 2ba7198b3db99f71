"""Throwaway stand-in for kernelwright.runtime (testing only, never committed)."""
import ctypes, hashlib, os, pathlib, re, subprocess

CACHE = pathlib.Path(os.environ.get("KWSHIM_CACHE", "/tmp/kwshim_cache"))
NVCC = ["nvcc", "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_90,code=sm_90"]
GXX = ["g++", "-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-fopenmp"]
INTS = {"int", "long", "long long", "int64_t", "int32_t", "size_t", "unsigned", "unsigned int", "ptrdiff_t", "long int"}
LOG = []

def _ctype(decl):
    d = decl.strip()
    d = re.sub(r"\b(const|volatile|__restrict__|__restrict|restrict)\b", " ", d)
    if "*" in d:
        return "ptr"
    toks = d.split()
    if toks and toks[-1] not in ("cudaStream_t",) and len(toks) >= 2:
        toks = toks[:-1]
    t = " ".join(toks)
    if t == "cudaStream_t":
        return "stream"
    if t in ("float",):
        return ctypes.c_float
    if t == "double":
        return ctypes.c_double
    if t in ("int", "int32_t", "unsigned", "unsigned int"):
        return ctypes.c_int
    if t in INTS:
        return ctypes.c_int64
    raise TypeError(f"unsupported parameter {decl!r}")

class _Lib:
    def __init__(self, so, sigs):
        self._dll = ctypes.CDLL(str(so))
        self._sigs = sigs
    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        kinds = self._sigs[name]
        fn = getattr(self._dll, name)
        fn.restype = ctypes.c_int
        def call(*args):
            import torch
            conv = []
            for i, k in enumerate(kinds):
                if k == "stream":
                    if i < len(args):
                        a = args[i]
                    else:
                        a = torch.cuda.current_stream().cuda_stream
                    conv.append(ctypes.c_void_p(int(a)))
                elif i >= len(args):
                    raise TypeError(f"{name}: missing argument {i}")
                elif k == "ptr":
                    a = args[i]
                    conv.append(ctypes.c_void_p(a.data_ptr() if hasattr(a, "data_ptr") else int(a or 0)))
                else:
                    conv.append(k(args[i]))
            rc = fn(*conv)
            if rc != 0:
                raise RuntimeError(f"{name} returned {rc}")
            return rc
        return call

def load(src, name=None, **_):
    if isinstance(src, pathlib.Path):
        src = src.read_text()
    lang = "cuda" if "__global__" in src else "cpp"
    h = hashlib.sha256((lang + src).encode()).hexdigest()[:16]
    CACHE.mkdir(parents=True, exist_ok=True)
    ext = ".cu" if lang == "cuda" else ".cpp"
    srcf = CACHE / f"{h}{ext}"; so = CACHE / f"{h}.so"
    if not so.exists():
        srcf.write_text(src)
        cmd = (NVCC + ["-Xptxas", "-v"] if lang == "cuda" else GXX) + [str(srcf), "-o", str(so)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        LOG.append((cmd, p.stdout + p.stderr))
        if p.returncode != 0:
            raise RuntimeError("build failed:\n" + p.stderr[-3000:])
    sigs = {}
    for m in re.finditer(r'extern\s+"C"\s+(?:__attribute__\(\([^)]*\)\)\s*)?int\s+(\w+)\s*\(([^)]*)\)', src):
        params = [p for p in m.group(2).split(",") if p.strip() and p.strip() != "void"]
        sigs[m.group(1)] = [_ctype(p) for p in params]
    return _Lib(so, sigs)
