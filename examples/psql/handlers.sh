# shellcheck shell=bash
# handlers.sh: the handlers of the example bash worker (worker.sh sources it).
#
# HANDLERS maps a kind to a shell function.  A handler reads the job from
# JOB_ID, JOB_KIND, JOB_RETRY_COUNT, JOB_PAYLOAD and JOB_CHECKPOINT (JSON
# texts), prints its result as JSON on stdout (or nothing), and exits
#   0 done, 65 permanent error, 75 rate limited (prints the delay), other: retry.
# JSON is read and built with SQL through job_sql (no jq needed).
#
# The handlers stand in for real work.  Each one is safe to run twice,
# because jobq delivers a job at least once: see "Writing a worker" in
# docs/guide.md.

# shellcheck disable=SC2034
HANDLERS=(
	[email.send]=send_email
	[image.resize]=resize_image
	[order.confirm]=confirm_order
	[report.build]=build_report
	[import.rows]=import_rows
	[webhook.deliver]=deliver_webhook
)

# Quick work: a real handler would call the mail service with an idempotency
# key derived from the job id, so a second run sends nothing.
send_email() {
	job_sql "SELECT jsonb_build_object('sent_to', :'payload'::jsonb -> 'to',
	                                   'message_id', 'msg-' || :'job_id')"
}

# Quick work whose output has a deterministic name: running it twice
# overwrites the same file.
resize_image() {
	job_sql "SELECT jsonb_build_object('resized', p -> 'image',
	                                   'width', coalesce(p -> 'width', '100'))
	           FROM (SELECT :'payload'::jsonb AS p) AS s"
}

# The job of the producers: confirm an order that was committed.
confirm_order() {
	job_sql "SELECT jsonb_build_object('confirmed', :'payload'::jsonb -> 'order_id')"
}

# Slow work: the worker extends the lease meanwhile.
build_report() {
	local seconds
	seconds=$(job_sql "SELECT coalesce(:'payload'::jsonb ->> 'seconds', '3')") || return
	sleep "$seconds"
	job_sql "SELECT jsonb_build_object('built', true, 'seconds', :'payload'::jsonb -> 'seconds')"
}

# Long work in chunks, resumable: progress is saved after every chunk and the
# next attempt starts where the last one stopped.  The first attempt of a
# payload with "fail_once_at" fails when it gets there (a dropped connection).
import_rows() {
	local rows chunk fail_at start n
	IFS=$'\t' read -r rows chunk fail_at start < <(job_sql "
		SELECT p ->> 'rows', coalesce(p ->> 'chunk', '10'), coalesce(p ->> 'fail_once_at', '-1'),
		       coalesce(nullif(:'checkpoint', '')::jsonb ->> 'done', '0')
		  FROM (SELECT :'payload'::jsonb AS p) AS s") || return
	n=$start
	while [ "$n" -lt "$rows" ]; do
		if [ "$JOB_RETRY_COUNT" = 0 ] && [ "$n" = "$fail_at" ]; then
			echo "connection reset while importing (simulated)" >&2
			return 1
		fi
		sleep 0.01 # "import" rows n .. n + chunk
		n=$((n + chunk > rows ? rows : n + chunk))
		job_checkpoint "{\"done\": $n}" || return
	done
	echo "{\"imported\": $rows, \"resumed_from\": $start}"
}

# Call an upstream that answers with the statuses of payload "responses" in
# turn (the last one for ever after).  The call number is saved as a
# checkpoint *before* each call, as a real handler saves an upstream request
# id, so every attempt knows what was already sent.
deliver_webhook() {
	local calls status
	IFS=$'\t' read -r calls status < <(job_sql "
		SELECT n, r -> least(n, jsonb_array_length(r) - 1)
		  FROM (SELECT coalesce((nullif(:'checkpoint', '')::jsonb ->> 'calls')::int, 0) AS n,
		               :'payload'::jsonb -> 'responses' AS r) AS s") || return
	job_checkpoint "{\"calls\": $((calls + 1))}" || return
	if [ "$status" = 429 ]; then
		echo "upstream returned 429" >&2
		echo "200 ms"
		return 75
	elif [ "$status" -ge 400 ] && [ "$status" -lt 500 ]; then
		echo "upstream returned $status" >&2
		return 65
	elif [ "$status" -ge 500 ]; then
		echo "upstream returned $status" >&2
		return 1
	fi
	echo "{\"status\": $status, \"calls\": $((calls + 1))}"
}
