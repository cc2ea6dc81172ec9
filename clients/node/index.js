'use strict'
// jobq for Node.js: a producer and a worker library over the pg package.
// See README.md; the types are in index.d.ts.

const { enqueue, enqueueMany, Producer } = require('./lib/producer')
const { Worker, Job } = require('./lib/worker')
const errors = require('./lib/errors')

module.exports = {
  enqueue,
  enqueueMany,
  Producer,
  Worker,
  Job,
  Permanent: errors.Permanent,
  RetryIn: errors.RetryIn,
  Snooze: errors.Snooze,
  LeaseLost: errors.LeaseLost,
  HandlerTimeout: errors.HandlerTimeout,
  HandedBack: errors.HandedBack
}
