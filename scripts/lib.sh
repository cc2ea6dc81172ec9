# shellcheck shell=bash
# scripts/lib.sh: shell helpers shared by scripts/test and scripts/demo.
#
# Source it from bash (set -euo pipefail is the caller's business).  It knows
# where Debian's PostgreSQL 15 lives, installs missing apt packages, builds
# and installs jobq, copies the source tree to a scratch directory, and starts
# and stops throwaway servers that listen on a Unix socket only.
#
# initdb and postgres refuse to run as root.  When we are root, every server
# command goes through pg_as, which runs it as the "postgres" user (created by
# the postgresql-common package); otherwise pg_as runs it as ourselves.

PG_MAJOR=15
PG_BIN=/usr/lib/postgresql/$PG_MAJOR/bin
PG_CONFIG=$PG_BIN/pg_config
export PG_CONFIG

if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then
	_c_bold=$'\e[1m' _c_red=$'\e[31m' _c_green=$'\e[32m' _c_yellow=$'\e[33m' _c_off=$'\e[0m'
else
	_c_bold='' _c_red='' _c_green='' _c_yellow='' _c_off=''
fi

# Print a section heading.
section() { printf '\n%s==> %s%s\n' "$_c_bold" "$*" "$_c_off"; }

# Print an informational line.
info() { printf '    %s\n' "$*"; }

# Print a warning to stderr.
warn() { printf '%swarning:%s %s\n' "$_c_yellow" "$_c_off" "$*" >&2; }

# Print an error to stderr and exit.
die() { printf '%serror:%s %s\n' "$_c_red" "$_c_off" "$*" >&2; exit 1; }

# Print a green PASS / red FAIL word.
pass_word() { printf '%sPASS%s' "$_c_green" "$_c_off"; }
fail_word() { printf '%sFAIL%s' "$_c_red" "$_c_off"; }

# True when running as root.
is_root() { [ "$(id -u)" -eq 0 ]; }

# Run a command as root: directly when we are root, else through sudo.
as_root() {
	if is_root; then
		"$@"
	else
		command -v sudo >/dev/null || die "not root and sudo is not installed: cannot run '$*'"
		sudo "$@"
	fi
}

# The user that owns and runs test servers: postgres when we are root.
pg_user() {
	if is_root; then echo postgres; else id -un; fi
}

# set_pg_as HOME: make pg_as (and the PG_AS prefix array, for use after
# "timeout" and the like) run commands as the server user, with HOME set to a
# directory that user can write.
set_pg_as() {
	if is_root; then
		PG_AS=(runuser -u postgres -- env HOME="$1")
	else
		PG_AS=()
	fi
}
set_pg_as /tmp

# Run a command as the server user (postgres when root).
pg_as() { "${PG_AS[@]}" "$@"; }

# Install the given Debian packages that are not installed yet.  apt-get
# runs only when something is missing, non-interactively.
ensure_packages() {
	local missing=() p status
	for p in "$@"; do
		status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
		case "$status" in
			*" installed") ;;
			*) missing+=("$p") ;;
		esac
	done
	if [ "${#missing[@]}" -eq 0 ]; then
		info "packages present: $*"
		return 0
	fi
	info "installing missing packages: ${missing[*]}"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		--no-install-recommends "${missing[@]}" </dev/null
}

# The packages a build needs.
# shellcheck disable=SC2034
BUILD_PACKAGES=("postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR" make gcc)

# The packages the test suites need on top of the build ones.
# shellcheck disable=SC2034
TEST_PACKAGES=("postgresql-$PG_MAJOR-pgtap" libtap-parser-sourcehandler-pgtap-perl libipc-run-perl
	clang libclang-rt-14-dev python3 tzdata pgbouncer python3-psycopg python3-yaml)

# Copy the source tree $1 into the existing directory $2: the files git knows
# about (tracked, plus untracked ones that are not ignored), or, outside a git
# checkout, everything but build outputs.
copy_tree() {
	local src=$1 dst=$2
	if command -v git >/dev/null && git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		(cd "$src" && git ls-files -z --cached --others --exclude-standard |
			while IFS= read -r -d '' f; do
				[ -e "$f" ] && printf '%s\0' "$f"
			done |
			tar --null -T - -cf -) | tar -C "$dst" -xf -
	else
		tar -C "$src" -cf - \
			--exclude=.git --exclude=.demo --exclude='*.o' --exclude='*.so' \
			--exclude='*.bc' --exclude='tmp_check*' --exclude=results \
			--exclude=output_iso --exclude='regression.*' --exclude=log . |
			tar -C "$dst" -xf -
	fi
}

# Build jobq in directory $1 (as the server user when root, so the tree stays
# writable by it) and install it; extra arguments go to the build's make.
build_and_install() {
	local dir=$1
	shift
	(cd "$dir" && pg_as make -j"$(nproc)" PG_CONFIG="$PG_CONFIG" "$@") &&
		(cd "$dir" && as_root make install PG_CONFIG="$PG_CONFIG" >/dev/null)
}

# Print a TCP port on 127.0.0.1 that nothing listens on.  Our servers listen
# on a Unix socket in a private directory only, so the number matters little;
# it just keeps logs and socket names unambiguous.
free_port() {
	local port
	for _ in $(seq 1 50); do
		port=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	die "no free port found"
}

# pg_start DATADIR SOCKDIR PORT LOGFILE [postgresql.conf line...]
# initdb DATADIR (as the server user), append settings, start and wait.
pg_start() {
	local data=$1 sock=$2 port=$3 logfile=$4
	shift 4
	pg_as "$PG_BIN/initdb" -D "$data" -U postgres -A trust --no-sync \
		-E UTF8 --locale=C >"$data.initdb.log" 2>&1 ||
		{ cat "$data.initdb.log" >&2; return 1; }
	{
		echo "# added by scripts/lib.sh"
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$sock'"
		echo "port = $port"
		echo "fsync = off"
		echo "shared_preload_libraries = 'jobq'"
		local line
		for line in "$@"; do echo "$line"; done
	} | pg_as tee -a "$data/postgresql.conf" >/dev/null
	pg_as "$PG_BIN/pg_ctl" -D "$data" -l "$logfile" -w -t 60 start >/dev/null ||
		{ tail -n 30 "$logfile" >&2; return 1; }
}

# pg_stop DATADIR: stop the server if it runs (fast shutdown).
pg_stop() {
	local data=$1
	[ -f "$data/postmaster.pid" ] || return 0
	pg_as "$PG_BIN/pg_ctl" -D "$data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
		pg_as "$PG_BIN/pg_ctl" -D "$data" -m immediate -w -t 30 stop >/dev/null 2>&1 ||
		true
}

# Seconds since the epoch, with milliseconds.
now_s() { date +%s.%N | cut -c1-14; }

# Elapsed seconds (one decimal) since a now_s timestamp.
elapsed_since() { awk -v s="$1" -v e="$(now_s)" 'BEGIN { printf "%.1f", e - s }'; }
