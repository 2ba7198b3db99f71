"""The records every layer shares, at the bottom of the package: the verdict and its parts
(core.records) and the agent's runs and steps (core.runs). They import nothing of kernelwright's
own, so the store below the judge and the agent can keep them (DESIGN.md, Layout)."""
