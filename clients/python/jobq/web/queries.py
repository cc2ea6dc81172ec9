"""jobq/web/queries.py -- the statements behind the dashboard's pages.

Every statement reads jobq's views and functions as the dashboard's role,
so what a page shows is what that role may see.  The pages' own statements
(a job, the schedules, the workers) are next to their page in pages.py;
here are the shared ones, and the paging of job lists by job id
(top_id, keyset_page), which keeps a page's cost bounded however many jobs
are kept.
"""

PAGE_SIZE = 50          # jobs on a page of a list

# The overview's live refresh (every LIVE_INTERVAL, shared by every viewer
# for LIVE_TTL): three statements, each bounded by something other than the
# number of jobs kept: the queues, the running jobs (the partial index on
# lease_expires_at), the jobs finished in the last few minutes (the index on
# finished_at; class Minutes keeps the minutes counted before).  The other
# numbers come from the columns of jobq.queue_stats that count through
# indexes (pending from jobq.ready and jobq.scheduled, dead from the index
# of failed jobs), reused for STATS_TTL.
Q_QUEUES = """
SELECT q.queue, q.paused, q.breaker_state FROM jobq.queues q ORDER BY q.queue"""

Q_RUNNING = """
SELECT j.queue, pg_catalog.count(*) AS running
  FROM jobq.jobs j WHERE j.lease_expires_at IS NOT NULL GROUP BY j.queue"""

Q_MINUTE = "SELECT pg_catalog.date_trunc('minute', pg_catalog.now())"

Q_FINISHED = """
SELECT j.queue, pg_catalog.date_trunc('minute', j.finished_at) AS m,
       pg_catalog.count(*) FILTER (WHERE j.status = 'completed') AS completed,
       pg_catalog.count(*) FILTER (WHERE j.status = 'failed') AS failed
  FROM jobq.jobs j
 WHERE j.finished_at >= %s::timestamptz AND j.finished_at < %s::timestamptz
 GROUP BY 1, 2"""

# no completed or cancelled column: those would count every kept job
Q_STATS = """
SELECT s.queue, s.ready, s.delayed, s.failed, s.oldest_pending_age
  FROM jobq.queue_stats s"""

Q_DEAD_GROUPS = """
SELECT d.queue, d.kind,
       pg_catalog.left(pg_catalog.split_part(COALESCE(d.last_error, ''), E'\\n', 1), 200) AS error,
       pg_catalog.count(*) AS jobs, pg_catalog.max(d.finished_at) AS newest,
       pg_catalog.max(d.job_id) AS newest_job
  FROM jobq.dead_letter d
 WHERE d.queue = ANY (%s::text[])
 GROUP BY 1, 2, 3 ORDER BY jobs DESC, newest DESC LIMIT 100"""


# the application's workers; the jobs they hold are running jobs (the
# partial index on lease_expires_at), at most 20 a worker
Q_APP_WORKERS = """
SELECT w.worker_id, w.queues, w.info, w.started_at, w.last_seen_at, w.jobs_in_hand, w.gone,
       pg_catalog.now() - w.last_seen_at AS seen_ago
  FROM jobq.app_workers w ORDER BY w.gone, w.worker_id LIMIT 500"""

Q_HELD = """
SELECT h.worker_id, h.queue, h.job_id, h.kind FROM pg_catalog.unnest(%s::text[]) AS w(id),
  LATERAL (SELECT j.worker_id, j.queue, j.job_id, j.kind FROM jobq.jobs j
            WHERE j.lease_expires_at IS NOT NULL AND j.worker_id = w.id
            ORDER BY j.job_id LIMIT 20) h"""


# a workflow: its jobs (jobq.workflow_jobs walks it by index probes), then
# each drawn job's parents (jobq.parent_results: a probe of the index of
# children each); the roots, newest 100
Q_WF_JOBS = """
SELECT w.job_id, w.queue, w.kind, w.status, w.finished_at,
       pg_catalog.left(w.last_error, 200) AS last_error
  FROM jobq.workflow_jobs(%s::bigint) w ORDER BY w.job_id LIMIT %s"""

Q_WF_EDGES = """
SELECT p.job_id AS parent, c.id AS child
  FROM pg_catalog.unnest(%s::bigint[]) AS c(id), LATERAL jobq.parent_results(c.id) p"""

Q_WORKFLOWS = """
SELECT w.root, w.queue, w.kind, w.created_at, w.total, w.blocked, w.pending, w.running,
       w.completed, w.failed, w.cancelled, w.can_finish
  FROM jobq.workflows w ORDER BY w.root DESC LIMIT 100"""

Q_DETAILS = """
SELECT a.attempt, a.details FROM jobq.attempt a
 WHERE a.job_id = %s::bigint AND a.details IS NOT NULL"""


Q_PROBE = "SELECT j.job_id FROM jobq.jobs j WHERE j.job_id >= %s::bigint LIMIT 1"


def top_id(db):
    """The newest job id the role can see (None: none), without a scan.

    jobq.jobs is a security-barrier view, so ORDER BY job_id DESC LIMIT 1
    (or max()) over it sorts every visible row: the ordering cannot reach
    the primary key inside the view.  A comparison on job_id (leakproof)
    does: probes "is there a job at or above x" gallop up the powers of two,
    then a binary search closes in; about 2 x log2(top) primary-key probes.
    """
    def probe(x):
        return db.value(Q_PROBE, (x,)) is not None
    if not probe(1):
        return None
    lo = 1
    while lo < (1 << 61) and probe(lo * 2):
        lo *= 2
    hi = lo * 2
    while hi - lo > 1:
        m = (lo + hi) // 2
        if probe(m):
            lo = m
        else:
            hi = m
    return lo


WINDOW_FIRST = 1024       # ids in the first window of a page
WINDOW_MAX = 16384        # ids in the largest window
SPAN_MAX = 65536          # ids one page searches at most


def keyset_page(db, select, where, args, before, limit=PAGE_SIZE, select_args=()):
    """One page of "select" (over alias j), newest job id first, below "before".

    Keyset paging in windows of job ids: each window is a range scan of the
    primary key (job_id < hi AND job_id >= lo) sorted in memory, so a page
    reads at most SPAN_MAX ids' rows, however many jobs there are.  Returns
    (rows, next_before): next_before continues below the page, or None at
    the oldest job.  A page that searched SPAN_MAX ids without filling up
    ends early with a next_before of where it stopped.
    """
    if before is None:
        top = top_id(db)
        if top is None:
            return [], None
        hi = top + 1
    else:
        hi = before
    rows, width, span = [], WINDOW_FIRST, 0
    while len(rows) <= limit and hi > 1 and span < SPAN_MAX:
        lo = max(hi - width, 1)
        cond = where + ["j.job_id < %s::bigint", "j.job_id >= %s::bigint"]
        rows += db.rows(f"{select} WHERE {' AND '.join(cond)} ORDER BY j.job_id DESC"
                        f" LIMIT {limit + 1 - len(rows)}", list(select_args) + args + [hi, lo])
        span += hi - lo
        hi = lo
        width = min(width * 2, WINDOW_MAX)
    if len(rows) > limit:
        return rows[:limit], rows[limit - 1]["job_id"]
    return rows, (hi if hi > 1 else None)
