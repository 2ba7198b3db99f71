"""The words the agent sends: the problem statement, the next-step nudges, the tree search's idea
and implementation requests, and the engineer's hints. The workflow and the judge's rules live in
the skill text (agent/skill.md); these are the per-turn parts.
"""

from __future__ import annotations

from typing import Any, Sequence

from kernelwright.agent.feedback import sanitize

CODE_ANSWER = ("Answer with one fenced ```python block holding the complete model_new.py (a `class ModelNew` with the "
               "reference's constructor and forward signature, its kernels inside the file).")


def problem_prompt(problem: Any, device: str, *, tools: bool, target: float | None) -> str:
    """The first user message: the reference program and what is asked."""
    goal = (f"Make it at least {target:g}x faster than the faster of eager PyTorch and torch.compile."
            if target else "Make it as fast as you can; every correct speedup counts.")
    how = ("Use the tools: write model_new.py into the workspace, compile, verify, profile, then submit."
           if tools else CODE_ANSWER)
    return (f"Reference program `{problem.name}` (the judge runs it on {device}):\n\n```python\n{problem.source.rstrip()}\n```\n\n"
            f"Write `ModelNew`, a drop-in replacement computing the same outputs with your own kernels. {goal} {how}")


def next_step(judged_ok: bool, target_met: bool, *, tools: bool) -> str:
    """The nudge appended to the judge's feedback on a candidate."""
    if target_met:
        return "The target is met. If you see a further gain, try it; otherwise reply DONE."
    if judged_ok:
        return "Correct. Find the bottleneck and make it faster. " + ("" if tools else CODE_ANSWER)
    return "Fix the problem above. " + ("" if tools else CODE_ANSWER)


def no_candidate(problem_text: str, *, tools: bool) -> str:
    """Feedback on a reply that held no usable candidate."""
    if tools:
        return f"No candidate was found in your reply: {problem_text} Write model_new.py with write_file and call verify, or a" + CODE_ANSWER[1:]
    return f"No candidate was found in your reply: {problem_text} {CODE_ANSWER}"


def hint(text: str) -> str:
    """An engineer's hint, as the model sees it."""
    return f"An engineer reviewing this run says:\n\n{sanitize(text, 4000)}\n\nTake this into account in your next candidate."


def engineer_candidate(files: dict[str, str], feedback: str) -> str:
    """An engineer's own edited candidate and its verdict, as the model sees them."""
    main = files.get("model_new.py", "")
    return ("An engineer edited the candidate; it is now the workspace's model_new.py:\n\n```python\n"
            f"{sanitize(main, 12000)}\n```\n\nThe judge says:\n{feedback}\n\nContinue from this candidate.")


def ideas_prompt(problem: Any, device: str, bank: Sequence[dict[str, Any]], tried: Sequence[dict[str, Any]], n: int) -> str:
    """Tree search: ask for n optimisation ideas in words, given the bank and what was tried."""
    lines = [f"Reference program `{problem.name}` (judged on {device}):\n\n```python\n{problem.source.rstrip()}\n```\n"]
    if bank:
        best = bank[0]
        lines.append(f"The best verified candidate so far ({_speed(best)}):\n\n```python\n{sanitize(best['files'].get('model_new.py', ''), 12000)}\n```\n")
    if tried:
        lines.append("Ideas tried so far and what came of them:")
        lines += [f"- {t['idea']} -> {t['outcome']}" for t in tried[-20:]]
        lines.append("")
    lines.append(f"Propose {n} distinct optimisation ideas for the next candidates, in words, no code: one numbered "
                 "line each, each saying what changes and why it should be faster. Avoid repeating ideas that failed.")
    return "\n".join(lines)


def implement_prompt(problem: Any, device: str, idea: str, base: dict[str, Any] | None) -> str:
    """Tree search: implement one idea, starting from the bank's best (or from scratch)."""
    start = ("Start from this verified candidate (" + _speed(base) + "):\n\n```python\n"
             + sanitize(base["files"].get("model_new.py", ""), 12000) + "\n```\n\n") if base else ""
    return (f"Reference program `{problem.name}` (judged on {device}):\n\n```python\n{problem.source.rstrip()}\n```\n\n"
            f"{start}Implement this idea: {idea}\n\n{CODE_ANSWER}")


def sample_prompt(problem: Any, device: str, target: float | None) -> str:
    """best-of-n: one independent attempt."""
    return problem_prompt(problem, device, tools=False, target=target)


def _speed(entry: dict[str, Any]) -> str:
    v = entry.get("verdict") or {}
    s = v.get("speedup_vs_best")
    return f"{v.get('runtime_ms', 0):.4g} ms, {s:.3f}x the faster baseline" if s else f"{v.get('runtime_ms') or 0:.4g} ms"
