"""Tasks in and out of the CUDA Agent workdir layout.

CUDA Agent (ByteDance Seed and Tsinghua, 2026) released the workspace its agent works in:
`model.py` (the PyTorch reference), `model_new.py` (the candidate, which does `import
cuda_extension`), `binding.cpp` and `binding_registry.h` (its Python binding registry), `kernels/`
(CUDA/C++ kernels and their binding files), `SKILL.md`, and `utils/` scripts that build every `.cu`
and `.cpp` of the root and `kernels/` into one torch extension named `cuda_extension`, verify and
profile. (Layout as described in that project's README and seen in its public workdir.)

- `import_workdir(SRC, DIR)`: a kernelwright workspace for the same task. `model.py` becomes the
  reference; the candidate keeps the workdir's sources unchanged, and its `model_new.py` is the
  workdir's with a short preamble that builds `cuda_extension` from those sources through
  torch.utils.cpp_extension (so the judge's torch-extension path builds and caches it) before the
  original text runs. Build outputs, caches and `utils/` are left behind.
- `export_workdir(DIR, DEST)`: the workspace's task in that layout: `model.py`, `model_new.py`
  (the preamble removed again when there is one), the candidate's other sources and `kernels/`,
  and the workspace's SKILL.md. A kernelwright-native candidate (raw kernels through
  `kernelwright.runtime`) keeps its import of kernelwright. CUDA Agent's own `utils/` scripts are
  theirs to supply; none are written.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from kernelwright.agent.objective import Objective
from kernelwright.judge.snapshot import candidate_files
from kernelwright.workspace.layout import MAIN, SKILL, WorkspaceConfig, find_root, init_workspace, read_config

REFERENCE = "model.py"
SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".c", ".h", ".hpp")
SKIPPED = ("utils", "build", "__pycache__", ".git")  # never imported: scripts, build outputs
PREAMBLE_START = "# --- kernelwright preamble: builds the CUDA Agent extension"
PREAMBLE_END = "# --- end of the kernelwright preamble; the workdir's model_new.py follows unchanged ---\n"

PREAMBLE = PREAMBLE_START + r""" (binding.cpp and kernels/) as `cuda_extension` ---
# The sources are mirrored into a fixed folder under TORCH_EXTENSIONS_DIR, which the judge sets per
# candidate (a file is rewritten only when its bytes differ), so ninja finds the same paths each
# time and rebuilds only what changed.
import hashlib as _kw_hashlib
import os as _kw_os
import sys as _kw_sys
import tempfile as _kw_tempfile
from pathlib import Path as _KwPath

from torch.utils.cpp_extension import load as _kw_load


def _kw_mirror():
    here = _KwPath(__file__).resolve().parent
    found = [p for p in here.glob("*") if p.suffix in (".cu", ".cuh", ".cpp", ".h", ".hpp")]
    if (here / "kernels").is_dir():
        found += [p for p in (here / "kernels").rglob("*") if p.suffix in (".cu", ".cuh", ".cpp", ".h", ".hpp")]
    found = sorted(found)
    digest = _kw_hashlib.sha256(b"".join(str(p.relative_to(here)).encode() + b"\0" + p.read_bytes() for p in found)).hexdigest()[:16]
    # the judge sets TORCH_EXTENSIONS_DIR per candidate; elsewhere a folder of this user's, keyed by the sources
    base = _kw_os.environ.get("TORCH_EXTENSIONS_DIR") or _kw_os.path.join(_kw_tempfile.gettempdir(), f"kw_cuda_agent_{_kw_os.getuid()}", digest)
    dest = _KwPath(base) / "kw_cuda_agent_sources"
    sources = []
    for path in found:
        target = dest / path.relative_to(here)
        data = path.read_bytes()
        if not target.is_file() or target.read_bytes() != data:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        if path.suffix in (".cu", ".cpp"):
            sources.append(str(target))
    return dest, sources


if "cuda_extension" not in _kw_sys.modules:
    _kw_dest, _kw_sources = _kw_mirror()
    _kw_sys.modules["cuda_extension"] = _kw_load(
        name="cuda_extension", sources=_kw_sources, extra_include_paths=[str(_kw_dest), str(_kw_dest / "kernels")],
        extra_cflags=["-O3", "-std=c++20"], extra_cuda_cflags=["-O3", "--use_fast_math"], verbose=False)
""" + PREAMBLE_END


def is_workdir(path: Path) -> bool:
    """Whether `path` looks like a CUDA Agent workdir (model.py and model_new.py side by side)."""
    return (path / REFERENCE).is_file() and (path / MAIN).is_file()


def workdir_candidate(src: Path) -> dict[str, str]:
    """The candidate's files from a workdir: model_new.py with the preamble, the root's sources and
    kernels/ ({relative name: text})."""
    files = {MAIN: with_preamble((src / MAIN).read_text(errors="replace"))}
    for path in sorted(src.iterdir()):
        if path.is_file() and path.suffix in SOURCE_SUFFIXES:
            files[path.name] = path.read_text(errors="replace")
    kernels = src / "kernels"
    if kernels.is_dir():
        for path in sorted(kernels.rglob("*")):
            rel = path.relative_to(src)
            if path.is_file() and path.suffix in SOURCE_SUFFIXES and not any(p in SKIPPED or p.startswith(".") for p in rel.parts):
                files[rel.as_posix()] = path.read_text(errors="replace")
    return files


_IMPORTS_EXTENSION = re.compile(r"^\s*(import\s+cuda_extension\b|from\s+cuda_extension\s+import\b)", re.MULTILINE)


def with_preamble(text: str) -> str:
    """model_new.py with the preamble that builds cuda_extension, when it imports cuda_extension (a
    workdir exported from a kernelwright-native candidate does not, and is left as it is)."""
    if PREAMBLE_START in text or not _IMPORTS_EXTENSION.search(text):
        return text
    return PREAMBLE + text


def without_preamble(text: str) -> str:
    """model_new.py as the workdir had it: the preamble removed when present."""
    if PREAMBLE_START not in text or PREAMBLE_END not in text:
        return text
    return text.split(PREAMBLE_END, 1)[1]


def import_workdir(src: str | Path, dest: str | Path, *, objective: Objective, device: str = "auto") -> WorkspaceConfig:
    """A workspace in `dest` for the task of the CUDA Agent workdir `src`. ValueError when `src`
    is not one; ProblemError when its model.py is not a valid problem."""
    src = Path(src).expanduser().resolve()
    if not is_workdir(src):
        raise ValueError(f"{src} is not a CUDA Agent workdir: it needs {REFERENCE} and {MAIN} side by side")
    staging = Path(dest).expanduser().resolve().parent / f".kw-import-{src.name}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        ref = staging / src.name / REFERENCE  # load_problem names a model.py after its folder
        ref.parent.mkdir(parents=True)
        shutil.copyfile(src / REFERENCE, ref)
        return init_workspace(str(ref), dest, objective=objective, device=device, candidate=workdir_candidate(src),
                              origin=f"imported from a CUDA Agent workdir: {src}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def export_workdir(root: str | Path, dest: str | Path, skipped: dict[str, str] | None = None) -> Path:
    """Write the workspace's task in the CUDA Agent layout into `dest` (missing or empty); returns it.
    `skipped` gets each file left out, with why."""
    skipped = {} if skipped is None else skipped
    root = find_root(root)
    config = read_config(root)
    dest = Path(dest).expanduser().resolve()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ValueError(f"{dest} is not an empty folder; the workdir is written into a new or empty one")
    files = candidate_files(root / MAIN)  # exactly what the judge takes
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(root / config.reference, dest / REFERENCE)
    (dest / REFERENCE).chmod(0o644)
    for name, path in files.items():
        if name == REFERENCE:  # a model.py of the candidate's own would shadow the reference; it cannot be carried over
            skipped[f"the candidate's {REFERENCE}"] = f"the workdir's {REFERENCE} is the reference"
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        text = path.read_text(errors="replace")
        target.write_text(without_preamble(text) if name == MAIN else text)
    (dest / "kernels").mkdir(exist_ok=True)
    if (root / SKILL).is_file():
        shutil.copyfile(root / SKILL, dest / SKILL)
        (dest / SKILL).chmod(0o644)
    else:
        skipped[SKILL] = "the workspace has none"
    return dest
