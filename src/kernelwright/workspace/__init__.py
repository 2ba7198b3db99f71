"""Workspaces: a folder per problem where an engineer or any coding agent works, with `kernelwright
check` and `kernelwright mcp` judging through the same judge and keeping every check in the store."""
