"""A workspace on disk: an engineer's or a coding agent's folder for one problem.

```
DIR/
  model_new.py            the candidate (edit it); with kernels/ and any source file beside it, what the judge takes
  kernels/                kernel sources (runtime.load(Path(...)) or a torch extension's files)
  reference/NAME.py       the problem, read-only; its hash is checked before every check
  SKILL.md                how to work, for the workspace's policy and device
  README.md               the commands
  .kernelwright/workspace.json   the workspace's id, problem and objective (WorkspaceConfig)
```

The judge is given `model_new.py` as a file (judge.snapshot.candidate_files): the candidate is that
file, the source files beside it and everything under `kernels/`. The reference, SKILL.md and the
README are never part of it.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kernelwright import __version__
from kernelwright.agent.objective import Objective
from kernelwright.problems.loader import Problem, load_problem
from kernelwright.store.workspaces import new_workspace_id
from kernelwright import pysource

CONFIG_DIR = ".kernelwright"
CONFIG_FILE = "workspace.json"
REFERENCE_DIR = "reference"
MAIN = "model_new.py"
KERNELS = "kernels"
SKILL = "SKILL.md"
README = "README.md"
PROTECTED = (REFERENCE_DIR, SKILL, README)  # names the workspace's write tool refuses
FORMAT = 1  # the layout's version, in workspace.json
DEVICES = ("auto", "cuda", "cpu")
_INPUT_FUNCTIONS = ("get_inputs", "get_init_inputs", "get_test_inputs")
_NAME_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True, kw_only=True)
class WorkspaceConfig:
    """What `.kernelwright/workspace.json` holds."""

    id: str  # ws-1a2b3c4d: the workspace's history in the store is kept under it
    problem_name: str  # the problem's name (the reference file's stem)
    problem_spec: str  # how the problem was named when the workspace was made (a path, builtin:NAME, ...)
    problem_hash: str  # sha256 of the reference's text, checked before every check
    objective: dict[str, Any]  # the policy and goal (agent.objective.Objective.to_dict())
    device: str  # auto, cuda or cpu: where checks judge unless told otherwise
    created_at: str  # ISO-8601 UTC
    kernelwright: str = __version__  # the version that made the workspace
    format: int = FORMAT  # the layout's version
    origin: str = ""  # where the candidate came from, e.g. "imported from a CUDA Agent workdir: PATH"

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {self.device!r}")
        if self.format != FORMAT:
            raise ValueError(f"workspace format {self.format} is not {FORMAT}; this kernelwright ({__version__}) reads format {FORMAT}")
        Objective.from_dict(self.objective)  # validates the settings, naming unknown ones

    @property
    def reference(self) -> str:
        """The reference's path relative to the workspace."""
        return f"{REFERENCE_DIR}/{self.problem_name}.py"

    def objective_obj(self) -> Objective:
        return Objective.from_dict(self.objective)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "WorkspaceConfig":
        known = {f.name for f in dataclasses.fields(WorkspaceConfig)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown workspace settings {unknown}; known: {sorted(known)}")
        return WorkspaceConfig(**d)


# -- finding and reading ----------------------------------------------------------------------------


def find_root(start: str | Path) -> Path:
    """The workspace holding `start` (the folder itself or one above it with .kernelwright/workspace.json);
    ValueError when there is none."""
    here = Path(start).expanduser().resolve()
    for folder in (here, *here.parents):
        if (folder / CONFIG_DIR / CONFIG_FILE).is_file():
            return folder
    raise ValueError(f"{here} is not inside a kernelwright workspace (no {CONFIG_DIR}/{CONFIG_FILE} here or above); "
                     f"make one with: kernelwright workspace init PROBLEM DIR")


def read_config(root: Path) -> WorkspaceConfig:
    """The workspace's settings; ValueError naming the file when unreadable or malformed."""
    path = root / CONFIG_DIR / CONFIG_FILE
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        return WorkspaceConfig.from_dict(data)
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"{path}: not a valid workspace file: {exc}") from None


def load_reference(root: Path, config: WorkspaceConfig) -> Problem:
    """The workspace's reference as a Problem; ValueError when it is missing or changed since init."""
    path = root / config.reference
    if not path.is_file():
        raise ValueError(f"the workspace's reference {path} is missing; restore it or make a new workspace")
    strays = sorted(p.name for p in path.parent.iterdir() if p.name not in (path.name, "__pycache__"))
    if strays:  # the reference's folder is on the path while it is imported: a sibling could stand in for a module it imports
        raise ValueError(f"{path.parent} holds files other than the reference ({', '.join(strays)}); remove them")
    problem = load_problem(path)
    if problem.hash != config.problem_hash:
        raise ValueError(f"the reference {path} changed since the workspace was made (sha256 {problem.hash[:12]}, "
                         f"expected {config.problem_hash[:12]}); the reference is read-only: restore it or make a new workspace")
    return problem


# -- making ----------------------------------------------------------------------------------------


def safe_name(name: str) -> str:
    """A problem name usable as a file stem."""
    cleaned = _NAME_BAD.sub("_", name).strip("._") or "problem"
    return cleaned if cleaned not in ("model", "problem") else f"{cleaned}_ref"


def init_workspace(problem_spec: str, root: str | Path, *, objective: Objective, device: str = "auto",
                   candidate: dict[str, str] | None = None, origin: str = "") -> WorkspaceConfig:
    """Make a workspace for a problem in `root` (which must be missing or empty). `candidate`
    ({relative name: text}) replaces the model_new.py template. ProblemError for a malformed
    problem, ValueError for a folder that is in use."""
    problem = load_problem(problem_spec)
    root = Path(root).expanduser()
    _require_empty(root)
    config = WorkspaceConfig(id=new_workspace_id(), problem_name=safe_name(problem.name), problem_spec=str(problem_spec),
                             problem_hash=problem.hash, objective=objective.to_dict(), device=device,
                             created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), origin=origin)
    (root / KERNELS).mkdir(parents=True, exist_ok=True)
    _write_reference(root, config, problem.source)
    files = candidate if candidate is not None else {MAIN: template(problem.source, config.problem_name, config.objective_obj().language)}
    for name, text in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    write_guides(root, config)
    write_config(root, config)
    return config


def _require_empty(root: Path) -> None:
    if root.exists() and not root.is_dir():
        raise ValueError(f"{root} exists and is not a folder")
    if root.is_dir() and any(root.iterdir()):
        raise ValueError(f"{root} is not empty; a workspace is made in a new or empty folder")


def _write_reference(root: Path, config: WorkspaceConfig, source: str) -> None:
    path = root / config.reference
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    os.chmod(path, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)  # read-only: the judge checks its hash anyway


def write_config(root: Path, config: WorkspaceConfig) -> None:
    folder = root / CONFIG_DIR
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (CONFIG_FILE + ".tmp")
    tmp.write_text(json.dumps(config.to_dict(), indent=2) + "\n")
    tmp.replace(folder / CONFIG_FILE)


def write_guides(root: Path, config: WorkspaceConfig) -> None:
    """SKILL.md (the skill text for this policy and device, and how to work here) and README.md."""
    from kernelwright.workspace.guides import readme_text, skill_text

    for name, text in ((SKILL, skill_text(config)), (README, readme_text(config))):
        path = root / name
        if path.exists():
            os.chmod(path, stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
        path.write_text(text)


# -- the model_new.py template -----------------------------------------------------------------------


def template(reference: str, name: str, language: str = "cuda") -> str:
    """A starting model_new.py: the reference's module with `Model` renamed `ModelNew` and the input
    functions left out, under a docstring that says what to do. It computes with torch operators, which
    the judge refuses unless the policy allows torch compute: replace them with your kernels."""
    tree = pysource.parse(reference)
    lines = reference.splitlines(keepends=True)
    drop: list[tuple[int, int]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in _INPUT_FUNCTIONS:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            drop.append((start, node.end_lineno or node.lineno))
        if isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant) and node is tree.body[0]:
            drop.append((node.lineno, node.end_lineno or node.lineno))  # the reference's own docstring
    kept = [ln for i, ln in enumerate(lines, start=1) if not any(a <= i <= b for a, b in drop)]
    body = "".join(kept)
    body = re.sub(r"\bclass Model\b(\s*[(:])", r"class ModelNew\1", body)
    body = re.sub(r"\bsuper\(\s*Model\s*,", "super(ModelNew,", body)
    body = re.sub(r"\n{3,}", "\n\n\n", body).strip() + "\n"
    hint = (_TRITON_HINT if language == "triton" else _CUDA_HINT).replace("{name}", name)
    return _TEMPLATE_HEAD.replace("{hint}", hint).replace("{name}", name) + "\n" + body


_TEMPLATE_HEAD = '''"""Your candidate for {name}: class ModelNew, with the same constructor and forward as the
reference's Model (reference/{name}.py, read-only).

As written below it is the reference itself, computing with torch operators. Unless this workspace's
policy allows torch compute (see SKILL.md), the judge refuses that: replace the work with your own
kernels, e.g.

{hint}

Then: kernelwright check --quick (build + correctness), kernelwright check (+ timing), kernelwright
check --final (fresh seeds, baselines timed beside it). See SKILL.md and README.md.
"""
'''
_CUDA_HINT = """    from pathlib import Path
    from kernelwright import runtime
    lib = runtime.load(Path(__file__).parent / "kernels" / "{name}.cu")   # extern "C" entry points
    ...
    lib.my_kernel(x, y, x.numel())                                       # tensors pass as pointers"""
_TRITON_HINT = """    import triton
    import triton.language as tl

    @triton.jit
    def my_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):               # never named triton_...
        ...
    my_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)              # tensors pass as pointers"""
