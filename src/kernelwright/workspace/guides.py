"""The texts a workspace carries for whoever works in it: SKILL.md (the agent's skill text for the
workspace's policy and device, then how the steps map to commands here) and a short README.md."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernelwright.agent.skill import render_skill
from kernelwright.workspace.exits import EXIT_CODES

if TYPE_CHECKING:
    from kernelwright.workspace.layout import WorkspaceConfig


def _device(config: "WorkspaceConfig") -> str:
    """The device the texts describe: the workspace's, or the one found now for "auto"."""
    if config.device != "auto":
        return config.device
    from kernelwright.judge.evaluate import resolve_device

    return resolve_device("auto")


def exit_code_lines() -> str:
    return "\n".join(f"| {code} | {meaning} |" for code, meaning in EXIT_CODES.items())


def skill_text(config: "WorkspaceConfig") -> str:
    """SKILL.md: the skill text, then this workspace's commands."""
    skill = render_skill(config.objective_obj(), _device(config))
    return skill.rstrip() + "\n\n" + _HERE.replace("{name}", config.problem_name).replace("{codes}", exit_code_lines())


def readme_text(config: "WorkspaceConfig") -> str:
    """README.md: what is here and the commands."""
    return _README.replace("{name}", config.problem_name).replace("{id}", config.id).replace("{codes}", exit_code_lines())


_HERE = """## Working in this workspace

The steps above name tools (`compile`, `verify`, `profile`, `submit`, `read_file`, `write_file`,
`list_files`). Here you edit the files yourself and run the same steps as commands, from this folder
or any folder inside it:

| step | command |
|---|---|
| compile + verify | `kernelwright check --quick` |
| compile + verify + profile | `kernelwright check` |
| submit (fresh seeds, baselines timed beside it, compute-sanitizer on a GPU) | `kernelwright check --final` |
| every check so far | `kernelwright workspace history` |

`kernelwright mcp` serves the same tools, by those names, over MCP (see README.md).

- The candidate is `model_new.py`, every source file beside it and everything under `kernels/`.
  `reference/{name}.py` is the problem: read it, never edit it (the judge checks its hash).
- `--json` prints the whole result (verdict included) as JSON on stdout.
- Exit codes:

| code | meaning |
|---|---|
{codes}
"""

_README = """# Workspace for {name} ({id})

```bash
kernelwright check --quick        # build the kernels, check correctness on the judge's secret inputs
kernelwright check                # ... and time against eager PyTorch and torch.compile
kernelwright check --final        # the judgement that counts: fresh seeds, baselines timed beside it
kernelwright check --json         # the same, as JSON on stdout
kernelwright workspace history    # every check made here, from the store
kernelwright mcp                  # the same tools for a coding agent, over MCP (stdio; --transport http)
```

- `model_new.py` (class `ModelNew`) and `kernels/`: the candidate. `reference/{name}.py`: the problem, read-only.
- `SKILL.md`: how to work, the fairness rules of this workspace's policy, and what the judge refuses.
- `.kernelwright/workspace.json`: the workspace's id, problem and policy.
- `kernelwright workspace export . DIR --layout cuda-agent` writes a CUDA Agent workdir of this task.

| exit code | meaning |
|---|---|
{codes}
"""
