"""SQLite store: problems, candidates by content hash, and verdicts (later: baselines, runs, trajectories)."""

from kernelwright.store.db import STORE_ENV, Store, default_store_path
from kernelwright.store.migrations import Migration, latest_version

__all__ = ["STORE_ENV", "Migration", "Store", "default_store_path", "latest_version"]
