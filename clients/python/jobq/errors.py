"""What a handler raises to say how its job ended, when not by returning."""

from __future__ import annotations


class Permanent(Exception):
    """Retrying cannot help (bad input, a 4xx answer): the job goes to the
    dead letter at once, whatever retries it has left."""


class RetryIn(Exception):
    """Fail this attempt and run the job again after exactly ``seconds``
    (an upstream's rate-limit reset time).  The attempt counts as a retry:
    with no retries left the job goes to the dead letter."""

    def __init__(self, seconds: float, message: str = "retry requested") -> None:
        super().__init__(message)
        self.seconds = float(seconds)


class Snooze(Exception):
    """Put the job back, due after ``seconds``, without spending a retry
    (jobq.snooze): "not now" rather than "failed"."""

    def __init__(self, seconds: float, message: str = "snoozed") -> None:
        super().__init__(message)
        self.seconds = float(seconds)


class LeaseLost(Exception):
    """The job is no longer ours (its lease expired and it was reaped or
    re-claimed, or it was cancelled): stop working on it.  Raised by
    ``job.checkpoint()``; a handler may let it propagate."""
