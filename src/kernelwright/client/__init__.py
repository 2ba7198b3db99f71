"""The one door to the judge for every caller: in-process warm workers or `kernelwright serve`."""

from kernelwright.client.judge import Judge, ServiceError

__all__ = ["Judge", "ServiceError"]
