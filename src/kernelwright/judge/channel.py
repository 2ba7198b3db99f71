"""Authenticated result channel from a judge child to the judge.

The judge hands each child a fresh random key on stdin before any candidate code is imported; every
message carries a sequence number and an HMAC-SHA256 over it, so bytes that a candidate writes to the
channel, or to stdout, are refused rather than read as results. Newline-delimited JSON on a unix
stream socket (a pipe works too, without descriptors).

Descriptors (a sealed memfd holding a candidate's outputs, judge.handover) travel on the same socket
as SCM_RIGHTS ancillary data: a child attaches them to a reply, whose authenticated body says how
many belong to it; the judge sends them to a child as a one-byte message ahead of the command that
names them. The judge accepts at most MAX_FDS per read and MAX_PENDING unclaimed: more is forgery.
"""

from __future__ import annotations

import array
import hashlib
import hmac
import json
import os
import select
import socket
import time
from typing import Any, Callable

KEY_BYTES = 32
MAX_LINE = 64 * 2**20  # a message larger than this is refused
MAX_FDS = 4  # descriptors one read may carry
MAX_PENDING = 16  # descriptors received and not yet claimed by a message
EXIT_POLL_S = 0.25  # how often a reader with `alive` looks whether the child itself has exited


class ChannelClosed(EOFError):
    """The writer's end closed (the child exited or died)."""


class ChannelTimeout(TimeoutError):
    """No message arrived in time."""


class ChannelForged(ValueError):
    """A message failed authentication or arrived out of order."""


def close_fds(fds: list[int]) -> None:
    """Close descriptors, ignoring ones already closed."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


# Bound at import, before any candidate code runs in a child: the write of a timed call's ask is the
# last thing before the judge's answer arrives (judge.window.ask_seed), and a replaced os.write there
# could wait for the answer and peek at it (MSG_PEEK) before the child reads it.
_write = os.write


def _mac(key: bytes, seq: int, body: str) -> str:
    return hmac.new(key, f"{seq}:{body}".encode(), hashlib.sha256).hexdigest()


class Writer:
    """The child's side: signs and writes messages."""

    def __init__(self, fd: int, key: bytes) -> None:
        self._fd = fd
        self._key = key
        self._seq = 0
        self._sock: socket.socket | None = None

    def _socket(self) -> socket.socket:
        if self._sock is None:
            self._sock = socket.socket(fileno=self._fd)  # owns the descriptor from now on, as this process does
        return self._sock

    def send(self, obj: Any, fds: list[int] | tuple[int, ...] = ()) -> None:
        """Sign and write one message; fds go with its first byte (the channel must be a socket)."""
        body = json.dumps(obj, separators=(",", ":"), default=str)
        line = json.dumps({"seq": self._seq, "mac": _mac(self._key, self._seq, body), "body": body}) + "\n"
        self._seq += 1
        data = line.encode()
        if fds:
            written = socket.send_fds(self._socket(), [data], list(fds))
            data = data[written:]
        while data:
            written = _write(self._fd, data)
            data = data[written:]

    def recv_fds(self, n: int, timeout_s: float = 30.0) -> list[int]:
        """The n descriptors the judge sent ahead of a command (one one-byte message)."""
        sock = self._socket()
        ready, _, _ = select.select([sock], [], [], timeout_s)
        if not ready:
            raise ChannelTimeout("the judge's descriptors did not arrive")
        _, fds, flags, _ = socket.recv_fds(sock, 1, n)
        if len(fds) != n or flags & socket.MSG_CTRUNC:
            for fd in fds:
                os.close(fd)
            raise ChannelForged(f"expected {n} descriptors, got {len(fds)}")
        return fds


class Reader:
    """The judge's side: reads, checks and decodes messages."""

    def __init__(self, fd: int, key: bytes, sock: socket.socket | None = None, alive: Callable[[], bool] | None = None) -> None:
        self._fd = fd
        self._key = key
        # whether the child itself still runs: processes it started inherit its end of the channel
        # and would keep the judge waiting for an end of file until the command's deadline
        self._alive = alive
        self._seq = 0
        self._buf = b""
        self._sock = sock  # when the channel is a socket: descriptors may come with the bytes
        self._fds: list[int] = []  # received, not yet claimed by a message

    def take_fds(self, n: int) -> list[int]:
        """The next n descriptors received (the caller owns them); ChannelForged if fewer came."""
        if n < 0 or n > len(self._fds):
            raise ChannelForged(f"a message claims {n} descriptors; {len(self._fds)} arrived")
        taken, self._fds = self._fds[:n], self._fds[n:]
        return taken

    def unclaimed(self) -> int:
        """How many descriptors arrived that no message has claimed."""
        return len(self._fds)

    def close_fds(self) -> None:
        """Close descriptors that arrived and were never claimed."""
        close_fds(self._fds)
        self._fds = []

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
            ready, _, _ = select.select([self._fd], [], [], left if self._alive is None else min(left, EXIT_POLL_S))
            if not ready:
                if self._alive is not None and not self._alive() and not select.select([self._fd], [], [], 0)[0]:
                    raise ChannelClosed("the child exited; processes it started still hold the result channel")
                continue
            chunk = self._read_chunk()
            if not chunk:
                raise ChannelClosed("the child closed the result channel")
            self._buf += chunk
            if len(self._buf) > MAX_LINE:
                raise ChannelForged(f"message larger than {MAX_LINE} bytes")
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _read_chunk(self) -> bytes:
        if self._sock is None:
            return os.read(self._fd, 1 << 20)
        chunk, ancdata, flags, _ = self._sock.recvmsg(1 << 20, socket.CMSG_SPACE(MAX_FDS * 4), socket.MSG_CMSG_CLOEXEC)
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                got = array.array("i")
                got.frombytes(data[:len(data) - len(data) % got.itemsize])
                self._fds.extend(got)
        if flags & socket.MSG_CTRUNC or len(self._fds) > MAX_PENDING:
            self.close_fds()
            raise ChannelForged("too many descriptors on the result channel")
        return chunk
