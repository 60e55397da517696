"""A process named so that it can be recognised later: its PID with its start time, since a PID alone may name an
unrelated process once ours has exited (the workspace's claim by a running experiment, a pipeline's key)."""

from __future__ import annotations

from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class Process:
    pid: int
    create_time: float  # seconds since the epoch, as psutil reports it

    @classmethod
    def of(cls, pid: int) -> Process:
        return cls(pid, psutil.Process(pid).create_time())

    @classmethod
    def parse(cls, text: str) -> Process:
        """The inverse of str(): "<pid>-<start time>"."""
        pid, create_time = text.split("-", 1)
        return cls(int(pid), float(create_time))

    def __str__(self) -> str:
        return f"{self.pid}-{self.create_time:.2f}"

    def running(self) -> bool:
        """Alive and still ours; a zombie counts as gone (it has exited, only its parent has not reaped it)."""
        try:
            process = psutil.Process(self.pid)
            return abs(process.create_time() - self.create_time) < 0.5 and process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False
