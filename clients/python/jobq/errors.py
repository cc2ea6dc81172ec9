"""What a handler raises to say how its job ended, when not by returning."""

from __future__ import annotations

import math

# the longest delay jobq accepts (retry_in, snooze): 1000 years
MAX_SECONDS = 1000 * 365.25 * 86400


def _check_seconds(seconds: float, what: str) -> float:
    """seconds as a float, or ValueError/TypeError naming what: a handler's
    bad delay is its own error (its job fails by it), not a report the
    server refuses after the handler ended (the job then sat until its
    lease expired, and the handler's error was lost)."""
    try:
        n = float(seconds)
    except (TypeError, ValueError):
        raise TypeError("%s must be a number of seconds, got %r" % (what, seconds)) from None
    if not math.isfinite(n) or n < 0 or n > MAX_SECONDS:
        raise ValueError("%s must be from 0 to %d seconds (1000 years), got %r"
                         % (what, MAX_SECONDS, seconds))
    return n


class Permanent(Exception):
    """Retrying cannot help (bad input, a 4xx answer): the job goes to the
    dead letter at once, whatever retries it has left."""


class RetryIn(Exception):
    """Fail this attempt and run the job again after exactly ``seconds``
    (an upstream's rate-limit reset time).  The attempt counts as a retry:
    with no retries left the job goes to the dead letter."""

    def __init__(self, seconds: float, message: str = "retry requested") -> None:
        super().__init__(message)
        self.seconds = _check_seconds(seconds, "RetryIn seconds")


class Snooze(Exception):
    """Put the job back, due after ``seconds``, without spending a retry
    (jobq.snooze): "not now" rather than "failed"."""

    def __init__(self, seconds: float, message: str = "snoozed") -> None:
        super().__init__(message)
        self.seconds = _check_seconds(seconds, "Snooze seconds")


class LeaseLost(Exception):
    """The job is no longer ours (its lease expired and it was reaped or
    re-claimed, or it was cancelled): stop working on it.  Raised by
    ``job.checkpoint()``; a handler may let it propagate."""
