'use strict'
// The error classes a handler throws to choose its job's outcome, and the
// ones the worker uses as abort reasons (job.signal.reason).
//
//   throw new Permanent(msg)         jobq.fail(..., retryable => false): the dead letter
//   throw new RetryIn(seconds, msg)  jobq.fail(..., retry_in => seconds): spends a retry
//   throw new Snooze(seconds, msg)   jobq.snooze(...): again later, no retry spent
//   throw anything else              jobq.fail(...): retried with the queue's backoff

// A failure that retrying cannot fix (bad input, HTTP 4xx, "card declined").
class Permanent extends Error {
  constructor (message, options) {
    super(message, options)
    this.name = 'Permanent'
  }
}

// Retry after exactly `seconds` (a rate limit's reset time); spends a retry.
class RetryIn extends Error {
  constructor (seconds, message = `retry in ${seconds} s`, options) {
    super(message, options)
    this.name = 'RetryIn'
    this.seconds = checkSeconds(seconds, 'RetryIn seconds')
  }
}

// Run the job again after `seconds` without spending a retry.
class Snooze extends Error {
  constructor (seconds, message = `snoozed for ${seconds} s`, options) {
    super(message, options)
    this.name = 'Snooze'
    this.seconds = checkSeconds(seconds, 'Snooze seconds')
  }
}

// The job's lease is gone (expired and reaped, cancelled, handed back): the
// job runs, or ran, elsewhere; stop working on it.
class LeaseLost extends Error {
  constructor (message = 'lease lost') {
    super(message)
    this.name = 'LeaseLost'
  }
}

// The handler ran longer than its timeout (job.signal.reason).
class HandlerTimeout extends Error {
  constructor (seconds) {
    super(`handler timed out after ${seconds} s`)
    this.name = 'HandlerTimeout'
    this.seconds = seconds
  }
}

// The worker is shutting down and handed the job back (job.signal.reason).
class HandedBack extends Error {
  constructor () {
    super('handed back at shutdown')
    this.name = 'HandedBack'
  }
}

// A finite, non-negative number of seconds, or a TypeError naming `what`.
// the longest delay jobq accepts (retry_in, snooze): 1000 years
const MAX_SECONDS = 1000 * 365.25 * 86400

function checkSeconds (s, what) {
  const n = typeof s === 'symbol' ? NaN : Number(s)
  if (!Number.isFinite(n) || n < 0 || n > MAX_SECONDS) {
    throw new TypeError(`${what} must be a number from 0 to ${MAX_SECONDS} seconds (1000 years), got ${String(s)}`)
  }
  return n
}

module.exports = { Permanent, RetryIn, Snooze, LeaseLost, HandlerTimeout, HandedBack, checkSeconds }
