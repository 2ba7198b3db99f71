"""The drop-in package a run leaves behind: the best candidate's files exactly as judged, a loader
`__init__.py`, the final verdict, the run's record and a readable summary.

    DIR/model_new.py, DIR/kernels/...   the candidate, byte for byte as judged (its hash is in run.json)
    DIR/__init__.py                     `from DIR import ModelNew` builds the kernels and exposes ModelNew
    DIR/verdict.json                    the final re-judge's verdict (strict JSON)
    DIR/run.json                        run id, candidate hash, review, provenance, objective, totals, history
    DIR/SUMMARY.md                      the same for people, with a `Review: ...` line
    DIR/<extras>                        anything else the caller ships (a run recording), outside the hash

The package is written in a temporary folder beside DIR and renamed into place. An earlier export
(a folder whose run.json says it is one) is replaced; any other existing content is refused.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from kernelwright import __version__
from kernelwright.agent import history
from kernelwright.judge.snapshot import files_hash
from kernelwright.store.runs import strict_json

EXPORT_FORMAT = "kernelwright-export/1"  # run.json's "format": marks a folder as an export this code may replace
MAIN_FILE = "model_new.py"
PACKAGE_FILES = ("__init__.py", "verdict.json", "run.json", "SUMMARY.md")  # what the export adds to the candidate
REVIEW_PREFIX = "Review: "
_REVIEW_LINE = re.compile(r"^Review: .*$", re.MULTILINE)


@dataclass(frozen=True, kw_only=True)
class ExportInfo:
    """Everything an export writes."""

    run_id: str  # the run, e.g. run-1a2b3c4d
    problem_name: str  # the problem's name
    problem_hash: str  # the problem's content hash
    problem_spec: str  # the problem as the user named it (path, builtin:NAME, ...)
    model: str  # the LLM backend, e.g. "openai:gpt-x"
    strategy: str  # refine, tree or best-of-n
    objective: dict[str, Any]  # Objective.to_dict()
    candidate_hash: str  # snapshot.files_hash of the candidate as judged
    files: dict[str, str]  # the candidate's files {relative name: text}, model_new.py among them
    verdict: dict[str, Any]  # the final re-judge's verdict (Verdict.to_dict())
    search_verdict: dict[str, Any] | None = None  # the verdict the candidate won with during the search
    history: tuple[dict[str, Any], ...] = ()  # judged candidates in order (history.candidate_rows)
    totals: dict[str, Any] = field(default_factory=dict)  # Store.run_totals: steps, tokens, cost
    approved: bool | None = None  # the review: True, False, or None (not reviewed)
    review_note: str = ""  # the reviewer's note
    reviewed_at: str | None = None  # when the review was recorded (ISO-8601), None when not reviewed
    provenance: dict[str, Any] = field(default_factory=dict)  # device, gpu, commit, backend, base_url, replayed, ...
    extras: dict[str, str] = field(default_factory=dict)  # more files to ship {name: text} (e.g. a recording); not part of the candidate

    def __post_init__(self) -> None:
        if MAIN_FILE not in self.files:
            raise ValueError(f"an export needs {MAIN_FILE} among the candidate's files, got {sorted(self.files)}")
        for name in (*self.files, *self.extras):
            _check_name(name)
        clashes = sorted(set(self.files) & set(self.extras))
        if clashes:
            raise ValueError(f"extra files {clashes} clash with the candidate's own files")
        if not self.candidate_hash:
            raise ValueError(f"an export needs the candidate's hash, got {self.candidate_hash!r}")
        judged = (self.verdict.get("candidate") or {}).get("hash")
        if judged and judged != self.candidate_hash:
            raise ValueError(f"the final verdict is for candidate {judged}, not the exported {self.candidate_hash}")
        object.__setattr__(self, "history", tuple(self.history))


def _check_name(name: str) -> None:
    """A candidate file name must be relative, stay inside the export, and not clash with its own files."""
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\\" in name or name.startswith("."):
        raise ValueError(f"candidate file name {name!r} must be a relative path inside the candidate")
    if name in PACKAGE_FILES:
        raise ValueError(f"candidate file {name!r} clashes with a file the export writes ({', '.join(PACKAGE_FILES)})")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# -- writing ----------------------------------------------------------------------------------


def export_package(out_dir: str | os.PathLike[str], info: ExportInfo) -> list[Path]:
    """Write the package at out_dir (atomically) and return the paths written, sorted.

    ValueError when out_dir holds something other than an earlier export, or when the written
    files do not hash to info.candidate_hash (what ships must be what was judged)."""
    out_dir = Path(out_dir)
    _check_target(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        names = _write_candidate(staging, info)
        names += _write_package_files(staging, info)
        names += _write_extras(staging, info)
        os.chmod(staging, 0o755)
        _swap_into_place(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return sorted(out_dir / n for n in names)


def _check_target(out_dir: Path) -> None:
    """Refuse a target that exists and is not an empty folder or an earlier export."""
    if not out_dir.exists() and not out_dir.is_symlink():
        return
    if out_dir.is_symlink() or not out_dir.is_dir():
        raise ValueError(f"export target {out_dir} exists and is a link or not a folder; choose another --out")
    if any(out_dir.iterdir()) and not is_export(out_dir):
        raise ValueError(f"export target {out_dir} holds files that are not a kernelwright export; "
                         "choose another --out (nothing was deleted)")


def is_export(folder: str | os.PathLike[str]) -> bool:
    """Whether folder holds an export written by this code (its run.json carries the export format)."""
    try:
        data = json.loads((Path(folder) / "run.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("format") == EXPORT_FORMAT


def _write_candidate(root: Path, info: ExportInfo) -> list[str]:
    """Write the candidate's files and check they hash to the judged hash (before anything else is added)."""
    for name, text in info.files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
    written = files_hash(root)
    if written != info.candidate_hash:
        raise ValueError(f"the exported files hash to {written}, not the judged candidate's {info.candidate_hash}; "
                         "refusing to ship files that differ from what was judged")
    return list(info.files)


def _write_package_files(root: Path, info: ExportInfo) -> list[str]:
    """Write __init__.py, verdict.json, run.json and SUMMARY.md."""
    prov = provenance(info)
    texts = {
        "__init__.py": init_text(info),
        "verdict.json": strict_json(info.verdict, indent=2) + "\n",
        "run.json": strict_json(run_record(info, prov), indent=2) + "\n",
        "SUMMARY.md": summary_markdown(info, prov),
    }
    for name, text in texts.items():
        (root / name).write_text(text, encoding="utf-8")
    return list(texts)


def _write_extras(root: Path, info: ExportInfo) -> list[str]:
    """Write the extra files (after the candidate's hash was checked, so they never count in it)."""
    for name, text in info.extras.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return list(info.extras)


def _swap_into_place(staging: Path, out_dir: Path) -> None:
    """Rename staging to out_dir; an existing out_dir is moved aside first and removed after."""
    if not out_dir.exists():
        os.rename(staging, out_dir)
        return
    aside = out_dir.parent / f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}"
    os.rename(out_dir, aside)
    try:
        os.rename(staging, out_dir)
    except BaseException:
        os.rename(aside, out_dir)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _atomic_write(path: Path, text: str) -> None:
    """Replace one file's text through a temporary file beside it."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_review(out_dir: str | os.PathLike[str], *, approved: bool, note: str) -> None:
    """Record a review in an existing export: run.json's approved/review_note and SUMMARY.md's Review line."""
    out_dir = Path(out_dir)
    if not is_export(out_dir):
        raise ValueError(f"{out_dir} is not a kernelwright export (no run.json with format {EXPORT_FORMAT})")
    record = json.loads((out_dir / "run.json").read_text())
    record.update(approved=bool(approved), review_note=str(note), reviewed_at=_now())
    _atomic_write(out_dir / "run.json", strict_json(record, indent=2) + "\n")
    summary_path = out_dir / "SUMMARY.md"
    summary = summary_path.read_text(encoding="utf-8") if summary_path.exists() else ""
    line = review_line(bool(approved), note)
    if _REVIEW_LINE.search(summary):
        summary = _REVIEW_LINE.sub(lambda _: line, summary, count=1)
    else:
        summary = summary.rstrip("\n") + f"\n\n{line}\n"
    _atomic_write(summary_path, summary)


def exported_candidate_hash(out_dir: str | os.PathLike[str]) -> str:
    """files_hash of the candidate files an export holds (those run.json lists), without the files the
    export added: the number to compare with run.json's candidate_hash."""
    out_dir = Path(out_dir)
    names = json.loads((out_dir / "run.json").read_text())["candidate_files"]
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            _check_name(name)
            target = Path(tmp) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out_dir / name, target)
        return files_hash(tmp)


# -- the files' contents ----------------------------------------------------------------------


def review_line(approved: bool | None, note: str | None) -> str:
    """`Review: not reviewed | approved — note | rejected — note`."""
    return REVIEW_PREFIX + history.review_text(approved, note)


def run_record(info: ExportInfo, prov: dict[str, Any]) -> dict[str, Any]:
    """run.json's content."""
    return {
        "format": EXPORT_FORMAT, "run_id": info.run_id, "candidate_hash": info.candidate_hash,
        "candidate_files": sorted(info.files), "extra_files": sorted(info.extras), "build_path": (info.verdict.get("candidate") or {}).get("build_path"),
        "status": info.verdict.get("status"),
        "problem": {"name": info.problem_name, "hash": info.problem_hash, "spec": info.problem_spec},
        "model": info.model, "strategy": info.strategy, "objective": info.objective,
        "approved": info.approved, "review_note": info.review_note, "reviewed_at": info.reviewed_at if info.approved is not None else None,
        "totals": info.totals, "search_verdict": info.search_verdict, "history": list(info.history),
        "provenance": prov,
    }


def provenance(info: ExportInfo) -> dict[str, Any]:
    """The caller's provenance with kernelwright's version, the export time and the verdict's GPU filled in."""
    system = info.verdict.get("system") or {}
    filled = {"kernelwright": __version__, "gpu": system.get("gpu"), "exported_at": _now()}
    filled.update({k: v for k, v in info.provenance.items() if v is not None or k not in filled})
    return filled


_INIT_TEMPLATE = '''"""Drop-in package exported by kernelwright: run @RUN_ID@, problem @PROBLEM@.

`from <this folder> import ModelNew` (or `import <this folder>`) builds the kernels and exposes
ModelNew. model_new.py is the candidate exactly as judged (hash in run.json); it works on its own as
a file too. Building raw kernels needs kernelwright installed (its runtime compiles and loads them).
"""

import importlib.util as _util
import sys as _sys
from pathlib import Path as _Path

RUN_ID = @RUN_ID_REPR@
CANDIDATE_HASH = @HASH_REPR@
_HERE = _Path(__file__).resolve().parent


def _load_model_new():
    """Import model_new.py as this package's submodule, with this folder on sys.path while it runs
    (as the judge imported it), so sibling imports and kernels/ beside it resolve from any directory."""
    name = __name__ + ".model_new"
    if name in _sys.modules:
        return _sys.modules[name]
    spec = _util.spec_from_file_location(name, _HERE / "model_new.py")
    module = _util.module_from_spec(spec)
    added = str(_HERE) not in _sys.path
    if added:
        _sys.path.insert(0, str(_HERE))
    _sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as exc:
        _sys.modules.pop(name, None)
        if (exc.name or "").split(".")[0] == "kernelwright":
            raise ImportError("this package needs kernelwright installed to build its kernels") from exc
        raise
    except BaseException:
        _sys.modules.pop(name, None)
        raise
    finally:
        if added and str(_HERE) in _sys.path:
            _sys.path.remove(str(_HERE))
    return module


model_new = _load_model_new()
ModelNew = model_new.ModelNew

__all__ = ["ModelNew", "CANDIDATE_HASH", "RUN_ID"]
'''


def init_text(info: ExportInfo) -> str:
    """The package's __init__.py."""
    return (_INIT_TEMPLATE.replace("@RUN_ID_REPR@", repr(info.run_id)).replace("@HASH_REPR@", repr(info.candidate_hash))
            .replace("@RUN_ID@", _docstring_safe(info.run_id)).replace("@PROBLEM@", _docstring_safe(info.problem_name)))


def _docstring_safe(text: str) -> str:
    """Text on one line that cannot end or break a triple-quoted docstring (no backslashes or quotes)."""
    return " ".join(str(text).split()).replace(chr(92), "/").replace('"', "'")


def _cell(value: Any) -> str:
    """Text for a Markdown table cell."""
    return " ".join(str("-" if value is None else value).split()).replace("|", "\\|")


def summary_markdown(info: ExportInfo, prov: dict[str, Any]) -> str:
    """SUMMARY.md's content."""
    parts = [
        f"# {_cell(info.problem_name)}: kernelwright run {info.run_id}\n",
        review_line(info.approved, info.review_note) + "\n",
        _overview(info), _objective_section(info.objective), _verdict_section(info.verdict),
        _search_section(info), _totals_section(info.totals), _use_section(), _provenance_section(prov),
    ]
    return "\n".join(parts)


def _overview(info: ExportInfo) -> str:
    rows = [("problem", f"{info.problem_name} (`{info.problem_hash[:12]}`), named `{info.problem_spec}`"),
            ("model", info.model), ("strategy", info.strategy),
            ("candidate", f"`{info.candidate_hash}` ({', '.join(sorted(info.files))})"),
            ("final verdict", f"**{info.verdict.get('status') or '-'}** (re-judged on fresh seeds)")]
    return "| | |\n|---|---|\n" + "".join(f"| {k} | {_cell(v)} |\n" for k, v in rows)


def _objective_section(objective: dict[str, Any]) -> str:
    lines = [f"- {k}: {_cell(v)}" for k, v in objective.items() if v not in (None, "", [], ())]
    return "## Objective\n\n" + ("\n".join(lines) if lines else "- (defaults)") + "\n"


def _verdict_section(v: dict[str, Any]) -> str:
    rows = [("candidate", history.fmt_ms(v.get("runtime_ms")), "-"),
            ("eager", history.fmt_ms(v.get("eager_ms")), history.fmt_x(v.get("speedup_vs_eager"))),
            ("torch.compile", history.fmt_ms(v.get("compile_ms")), history.fmt_x(v.get("speedup_vs_compile"))),
            ("the faster baseline", "-", history.fmt_x(v.get("speedup_vs_best")))]
    table = "| | time | candidate's speedup |\n|---|---|---|\n" + "".join(f"| {a} | {b} | {c} |\n" for a, b, c in rows)
    errors = f"Correctness: max abs error {history.fmt_num(v.get('max_abs_error'))}, max rel error {history.fmt_num(v.get('max_rel_error'))}."
    guards = history.fired_guards(v)
    skipped = history.steps_not_run(v)
    lines = [f"## Final verdict: {v.get('status') or '-'}\n", table, errors,
             f"Guards that fired: {'; '.join(guards) if guards else 'none'}.", "", "Steps that did not run:"]
    lines += [f"- {_cell(s)}" for s in skipped] or ["- none"]
    if v.get("log") and v.get("status") != "correct":
        lines += ["", "```", str(v["log"]), "```"]
    return "\n".join(lines) + "\n"


def _search_section(info: ExportInfo) -> str:
    lines = ["## Search", "", f"Won with: {history.verdict_line(info.search_verdict)}", ""]
    if info.history:
        lines += ["| seq | branch | status | runtime | vs best | candidate |", "|---|---|---|---|---|---|"]
        for r in info.history:
            lines.append(f"| {_cell(r.get('seq'))} | {_cell(r.get('branch') or '-')} | {_cell(r.get('status'))} | "
                         f"{history.fmt_ms(r.get('runtime_ms'))} | {history.fmt_x(r.get('speedup_vs_best'))} | "
                         f"`{_cell(str(r.get('candidate_hash') or '-')[:12])}` |")
    else:
        lines.append("No search history recorded.")
    return "\n".join(lines) + "\n"


def _totals_section(totals: dict[str, Any]) -> str:
    return f"## Tokens and cost\n\n{history.totals_line(totals)}.\n"


def _use_section() -> str:
    return ("## Use\n\nPut this folder's parent on `sys.path` and `from <folder name> import ModelNew` (the folder name\n"
            "must be a Python identifier), or copy `model_new.py` (with `kernels/` if present) into your project.\n"
            "Raw kernels are compiled on first import by kernelwright's runtime, into its build cache.\n")


def _provenance_section(prov: dict[str, Any]) -> str:
    return "## Provenance\n\n" + "\n".join(f"- {k}: {_cell(v)}" for k, v in prov.items()) + "\n"
