"""The RL environment: tasks with their splits (rl.tasks), episodes over the agent's tools
(rl.env.KernelEnv) and the reward of a final verdict (rl.reward). Plain Python: no trainer is
imported here."""

from kernelwright.rl.env import EnvConfig, EpisodeOver, KernelEnv, parse_action
from kernelwright.rl.reward import Reward, RewardConfig, milestone, score
from kernelwright.rl.tasks import Task, load_tasks, split_of

__all__ = ["EnvConfig", "EpisodeOver", "KernelEnv", "Reward", "RewardConfig", "Task", "load_tasks", "milestone", "parse_action",
           "score", "split_of"]
