"""Authenticated result channel from a judge child to the judge.

The judge hands each child a fresh random key on stdin before any candidate code is imported; every
message carries a sequence number and an HMAC-SHA256 over it, so bytes that a candidate writes to the
channel, or to stdout, are refused rather than read as results. Newline-delimited JSON on a pipe.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import select
import time
from typing import Any

KEY_BYTES = 32
MAX_LINE = 64 * 2**20  # a message larger than this is refused


class ChannelClosed(EOFError):
    """The writer's end closed (the child exited or died)."""


class ChannelTimeout(TimeoutError):
    """No message arrived in time."""


class ChannelForged(ValueError):
    """A message failed authentication or arrived out of order."""


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def _mac(key: bytes, seq: int, body: str) -> str:
    return hmac.new(key, f"{seq}:{body}".encode(), hashlib.sha256).hexdigest()


class Writer:
    """The child's side: signs and writes messages."""

    def __init__(self, fd: int, key: bytes) -> None:
        self._fd = fd
        self._key = key
        self._seq = 0

    def send(self, obj: Any) -> None:
        body = json.dumps(obj, separators=(",", ":"), default=str)
        line = json.dumps({"seq": self._seq, "mac": _mac(self._key, self._seq, body), "body": body}) + "\n"
        self._seq += 1
        data = line.encode()
        while data:
            written = os.write(self._fd, data)
            data = data[written:]


class Reader:
    """The judge's side: reads, checks and decodes messages."""

    def __init__(self, fd: int, key: bytes) -> None:
        self._fd = fd
        self._key = key
        self._seq = 0
        self._buf = b""

    def pending(self) -> bool:
        """Whether a message (or part of one) waits unread."""
        if self._buf:
            return True
        try:
            ready, _, _ = select.select([self._fd], [], [], 0)
        except (OSError, ValueError):
            return False
        return bool(ready)

    def recv(self, timeout_s: float) -> Any:
        line = self._read_line(time.monotonic() + timeout_s)
        try:
            frame = json.loads(line)
            seq, mac, body = int(frame["seq"]), str(frame["mac"]), str(frame["body"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ChannelForged(f"malformed message on the result channel: {exc}") from None
        if seq != self._seq or not hmac.compare_digest(mac, _mac(self._key, seq, body)):
            raise ChannelForged(f"message {seq} failed authentication (expected sequence {self._seq})")
        self._seq += 1
        return json.loads(body)

    def _read_line(self, deadline: float) -> bytes:
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelTimeout("no message before the deadline")
            ready, _, _ = select.select([self._fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._fd, 1 << 20)
            if not chunk:
                raise ChannelClosed("the child closed the result channel")
            self._buf += chunk
            if len(self._buf) > MAX_LINE:
                raise ChannelForged(f"message larger than {MAX_LINE} bytes")
        line, _, self._buf = self._buf.partition(b"\n")
        return line
