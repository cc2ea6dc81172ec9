#!/usr/bin/env bash
#
# producer.sh: enqueue inside the application's own transaction, from psql.
#
# Usage: producer.sh [--queue Q] [--orders N] [--fail]
#
# Each order is inserted and its confirmation job enqueued in one
# transaction, so the job exists only if the order commits.  --fail makes
# the transaction fail after the enqueue: neither the order nor the job is
# left.  The connection comes from the libpq variables (PGHOST, PGPORT,
# PGDATABASE, PGUSER, ...); it works through PgBouncer in transaction mode.

set -u
QUEUE=default
ORDERS=1
FAIL=0
while [ $# -gt 0 ]; do
	case $1 in
		--queue) QUEUE=$2; shift ;;
		--orders) ORDERS=$2; shift ;;
		--fail) FAIL=1 ;;
		*) echo "producer.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
PSQL=${PSQL:-psql}

"$PSQL" -X -q -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" -c "CREATE TABLE IF NOT EXISTS example_orders (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	customer text NOT NULL, amount numeric NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now())" || exit 1

for i in $(seq 0 $((ORDERS - 1))); do
	"$PSQL" -X -q -A -t -v ON_ERROR_STOP=1 -v queue="$QUEUE" -v customer="customer-$i" \
		-v amount=$((10 + i)) -v fail="$FAIL" <<-'SQL' || exit 1
			BEGIN;
			INSERT INTO example_orders (customer, amount) VALUES (:'customer', :'amount')
			RETURNING id AS order_id \gset
			SELECT job_id FROM jobq.enqueue('order.confirm', jsonb_build_object('order_id', :'order_id'::bigint),
			                                queue => :'queue', idempotency_key => 'order-' || :'order_id')
			\gset
			-- anything going wrong before COMMIT takes the job with it
			\if :fail
				ROLLBACK;
				\echo order rolled back (payment declined, simulated): no order, no job
			\else
				COMMIT;
				\echo order :order_id committed with job :job_id
			\endif
		SQL
done
