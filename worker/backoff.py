"""When the output cannot take more for now: a full disk, a store's quota or
its request to slow down.  Such a task is not at fault, so the worker waits
and retries it, keeping its lease (heartbeats go on) and its attempts; a
full disk must not quarantine a whole run in seconds."""

from __future__ import annotations

import errno
from dataclasses import dataclass

from common.storage import busy_reason
from common.storage.s3 import S3_BACKOFF_CODES  # noqa: F401 (where it was)

#: errno values of a full device or an exhausted quota.
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def no_room(error: BaseException | None) -> str | None:
    """Why ``error``, or an error it was raised from, means the output has no
    room for now (one line); None if it means something else."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in NO_SPACE_ERRNOS:
            return f"no space on the output ({error.strerror or 'ENOSPC'})"
        busy = busy_reason(error)  # each storage backend knows its store's words for "slow down"
        if busy:
            return busy
        error = error.__cause__ or error.__context__
    return None


@dataclass
class Backoff:
    """Delays between retries: doubling from ``first`` up to ``most`` seconds."""

    first: float = 1.0
    most: float = 60.0
    waited: float = 0.0
    _next: float = 0.0

    def next_delay(self) -> float:
        delay = self._next or self.first
        self._next = min(delay * 2, self.most)
        self.waited += delay
        return delay
