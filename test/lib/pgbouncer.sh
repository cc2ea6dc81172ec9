# test/lib/pgbouncer.sh: the PgBouncer the test scripts start, in transaction
# mode, as jobq's users run it.  Sourced by test/examples/run.sh and
# test/clients/*/run.sh.
#
# pgbouncer_ini INI SERVER_HOST SERVER_PORT SOCKET_DIR LISTEN_PORT POOL_SIZE
#   writes INI; users.txt, the log and the pid file go next to it.
pgbouncer_ini() {
	local ini=$1 dir
	dir=$(dirname "$ini")
	cat >"$ini" <<EOF
[databases]
* = host=$2 port=$3
[pgbouncer]
listen_addr =
unix_socket_dir = $4
listen_port = $5
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
default_pool_size = $6
max_client_conn = $(($6 * 10))
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
}
