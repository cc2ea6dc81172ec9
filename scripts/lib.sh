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
# the postgresql-common package); otherwise pg_as runs it as ourselves.  runuser
# keeps the working directory, and PostgreSQL's programs complain ("could not
# change directory") when that user cannot enter it (a checkout in root's
# home): callers cd to a directory of their scratch tree first.
#
# PG_BIN and PG_CONFIG name the system's PostgreSQL until use_private_pg
# points them at a private copy of it (see private_pg_tree).
#
# PG_MAJOR is the PostgreSQL this machine's Debian release ships (15 on
# Debian 12, 17 on Debian 13, 18 on unstable: scripts/root.sh), or JOBQ_PG
# when set; elsewhere, the newest PostgreSQL installed.

_lib_dir=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=scripts/root.sh
. "$_lib_dir/root.sh"

# The PostgreSQL major version to build and run against (see above).
pick_pg_major() {
	local v
	if [ -n "${JOBQ_PG:-}" ]; then
		echo "$JOBQ_PG"
	elif v=$(pg_of_release "$(host_release)"); then
		echo "$v"
	else
		v=$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path '*/bin/postgres' 2>/dev/null |
			sed 's|^/usr/lib/postgresql/\([0-9]*\)/.*|\1|' | sort -n | tail -n 1)
		[ -n "$v" ] || return 1
		echo "$v"
	fi
}
PG_MAJOR=$(pick_pg_major) ||
	{ echo "error: cannot tell which PostgreSQL to use on this machine (not Debian 12 or 13, and none installed): set JOBQ_PG" >&2; exit 1; }
PG_SYS_BIN=/usr/lib/postgresql/$PG_MAJOR/bin
PG_BIN=$PG_SYS_BIN
PG_CONFIG=$PG_BIN/pg_config
export PG_CONFIG
# DESTDIR of build_and_install: empty = the system's directories (as root)
PG_PRIVATE_ROOT=

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

# A package counts as present when its command is on PATH, whatever
# installed it (this machine's Node 20 comes with its own npm and conflicts
# with Debian's npm package).
declare -A PKG_COMMAND=([nodejs]=node [npm]=npm [git]=git)

# Services that installing a package enables and starts: stopped and
# disabled again when that package was installed by us (see quiet_services).
declare -A PKG_SERVICE=([pgbouncer]=pgbouncer ["postgresql-$PG_MAJOR"]=postgresql
	[etcd-server]=etcd [patroni]=patroni)

# Install the given Debian packages that are not installed yet.  apt-get
# runs only when something is missing, non-interactively.  Services that the
# newly installed packages enabled and started (pgbouncer; the $PG_MAJOR/main
# cluster that installing postgresql-$PG_MAJOR creates) are stopped and
# disabled again: the caller starts servers of its own.  Services of packages
# that were installed before are never touched.
ensure_packages() {
	local missing=() p status
	for p in "$@"; do
		if [ -n "${PKG_COMMAND[$p]:-}" ] && command -v "${PKG_COMMAND[$p]}" >/dev/null; then
			continue
		fi
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
	# Whether postgresql-common (the "postgresql" service and any cluster
	# of another version) was there before this install.
	local common_before=0
	pkg_installed postgresql-common && common_before=1
	info "installing missing packages: ${missing[*]}"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null 2>&1 |
		heartbeat "apt-get update"
	[ "${PIPESTATUS[0]}" = 0 ] || die "apt-get update failed"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		--no-install-recommends "${missing[@]}" </dev/null 2>&1 | heartbeat "apt-get install"
	[ "${PIPESTATUS[0]}" = 0 ] || die "apt-get install ${missing[*]} failed"
	quiet_services "$common_before" "${missing[@]}"
}

# True when Debian package $1 is installed.
pkg_installed() {
	case "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" in
		*" installed") return 0 ;;
		*) return 1 ;;
	esac
}

# quiet_services COMMON_BEFORE PACKAGE...: stop and disable the services of
# the given packages (just installed by ensure_packages), with systemctl when
# systemd runs, else with service and update-rc.d.  postgresql-$PG_MAJOR's
# service is the "postgresql" service of postgresql-common, which also starts
# clusters of other versions: when postgresql-common was there before
# (COMMON_BEFORE=1), only the $PG_MAJOR/main cluster is stopped and set to
# start manually (its start.conf), and the service is left alone.
quiet_services() {
	local common_before=$1 p svc
	shift
	for p in "$@"; do
		svc=${PKG_SERVICE[$p]:-}
		[ -n "$svc" ] || continue
		if [ "$svc" = postgresql ] && [ "$common_before" = 1 ]; then
			if [ -f "/etc/postgresql/$PG_MAJOR/main/start.conf" ]; then
				info "stopping cluster $PG_MAJOR/main (created by installing $p) and setting it to start manually"
				as_root pg_ctlcluster "$PG_MAJOR" main stop >/dev/null 2>&1 || true
				echo manual | as_root tee "/etc/postgresql/$PG_MAJOR/main/start.conf" >/dev/null
			fi
			continue
		fi
		info "stopping and disabling service $svc (enabled by installing $p)"
		if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
			as_root systemctl disable --now "$svc" >/dev/null 2>&1 ||
				warn "could not stop and disable $svc (systemctl disable --now $svc)"
		else
			if command -v service >/dev/null && [ -x "/etc/init.d/$svc" ]; then
				as_root service "$svc" stop >/dev/null 2>&1 || warn "could not stop $svc (service $svc stop)"
			fi
			if command -v update-rc.d >/dev/null && [ -x "/etc/init.d/$svc" ]; then
				as_root update-rc.d "$svc" disable >/dev/null 2>&1 || warn "could not disable $svc (update-rc.d $svc disable)"
			fi
		fi
	done
}

# The packages a build needs.
# shellcheck disable=SC2034
BUILD_PACKAGES=("postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR" make gcc)
# PostgreSQL 17 and later ship pg_bsd_indent (make check-format) with their
# server headers; for 15 it is a package of its own.
[ "$PG_MAJOR" -lt 17 ] && BUILD_PACKAGES+=(pg-bsd-indent)
# Debian's PostgreSQL 18 has its LLVM JIT in a package of its own, which
# apt installs as a recommendation: a stock server has it (jit = on).
[ "$PG_MAJOR" -ge 18 ] && BUILD_PACKAGES+=("postgresql-$PG_MAJOR-jit")

# suite_packages SUITE...: the packages the suites need on top of the build
# ones, one per line.
suite_packages() {
	local s
	for s in "$@"; do
		case "$s" in
			regress | isolation) ;;
			tap) printf '%s\n' libipc-run-perl pgbouncer ;;
			pgtap) printf '%s\n' "postgresql-$PG_MAJOR-pgtap" libtap-parser-sourcehandler-pgtap-perl ;;
			soak) ;;
			cron) printf '%s\n' clang libclang-rt-dev python3 tzdata ;;
			cli) printf '%s\n' python3 python3-psycopg ;;
			examples) printf '%s\n' python3 python3-psycopg python3-yaml nodejs npm pgbouncer ;;
			# clients: also jobq web's modules, whose missing-module messages
			# it checks one module at a time (the others present)
			clients) printf '%s\n' python3 python3-psycopg python3-waitress python3-jinja2 nodejs npm pgbouncer ;;
			web) printf '%s\n' python3 python3-psycopg python3-waitress python3-jinja2 chromium ;;
			ha) printf '%s\n' patroni etcd-server etcd-client python3-etcd python3-psycopg nodejs npm ;;
			# the bench records the commit it builds; its contenders run in Node,
			# the public benchmark's adapter in Python
			bench) printf '%s\n' git nodejs npm python3 python3-psycopg ;;
		esac
	done | sort -u
}

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

# private_pg_tree ROOT: copy the system's PostgreSQL $PG_MAJOR installation
# (/usr/lib/postgresql/$PG_MAJOR and /usr/share/postgresql/$PG_MAJOR, with what
# packages such as pgTAP put there) to ROOT/usr/..., and make it the DESTDIR of
# build_and_install.  PostgreSQL finds lib/ and share/ relative to its
# binaries, so servers started from ROOT's bin/ load what is installed there
# and nothing else; PostgreSQL 15 has no extension_control_path to point a
# server at a private directory otherwise.  The headers are a symlink, so
# ROOT's pg_config describes a tree PGXS can use.
private_pg_tree() {
	local root=$1
	mkdir -p "$root/usr/lib/postgresql" "$root/usr/share/postgresql" "$root/usr/include"
	cp -a "/usr/lib/postgresql/$PG_MAJOR" "$root/usr/lib/postgresql/"
	cp -a "/usr/share/postgresql/$PG_MAJOR" "$root/usr/share/postgresql/"
	[ -e /usr/include/postgresql ] && ln -sfn /usr/include/postgresql "$root/usr/include/postgresql"
	PG_PRIVATE_ROOT=$root
}

# Build jobq in directory $1 (as the server user when root, so the tree stays
# writable by it) with the system's pg_config, and install it: into
# $PG_PRIVATE_ROOT (make install DESTDIR=..., as ourselves, who made that
# copy) when set, else into the system's directories (as root).  Extra
# arguments go to the build's make.  Then use_private_pg switches PG_BIN and
# PG_CONFIG to the private tree.
build_and_install() {
	local dir=$1
	shift
	(cd "$dir" && pg_as make -j"$(nproc)" PG_CONFIG="$PG_SYS_BIN/pg_config" "$@") || return 1
	if [ -n "$PG_PRIVATE_ROOT" ]; then
		(cd "$dir" && make install DESTDIR="$PG_PRIVATE_ROOT" PG_CONFIG="$PG_SYS_BIN/pg_config" >/dev/null)
	else
		(cd "$dir" && as_root make install PG_CONFIG="$PG_SYS_BIN/pg_config" >/dev/null)
	fi
}

# use_private_pg: point PG_BIN and PG_CONFIG at $PG_PRIVATE_ROOT's copy.
use_private_pg() {
	[ -n "$PG_PRIVATE_ROOT" ] || return 0
	PG_BIN=$PG_PRIVATE_ROOT/usr/lib/postgresql/$PG_MAJOR/bin
	PG_CONFIG=$PG_BIN/pg_config
	export PG_CONFIG
}

# check_installed BUILD_DIR: fail (with a message) unless $PG_CONFIG's
# directories hold the library and control file just built in BUILD_DIR, and,
# with a private tree, unless those directories are inside it.
check_installed() {
	local dir=$1 lib share
	lib=$("$PG_CONFIG" --pkglibdir) share=$("$PG_CONFIG" --sharedir)
	if [ -n "$PG_PRIVATE_ROOT" ]; then
		case "$lib/" in
			"$PG_PRIVATE_ROOT"/*) ;;
			*) echo "pg_config $PG_CONFIG gives pkglibdir $lib, outside $PG_PRIVATE_ROOT" >&2; return 1 ;;
		esac
	fi
	cmp -s "$dir/jobq.so" "$lib/jobq.so" ||
		{ echo "$lib/jobq.so is not the library just built in $dir" >&2; return 1; }
	cmp -s "$dir/jobq.control" "$share/extension/jobq.control" ||
		{ echo "$share/extension/jobq.control is not $dir/jobq.control" >&2; return 1; }
}

# loaded_jobq DATADIR: the path of the jobq.so that the server running on
# DATADIR has mapped (shared_preload_libraries), from /proc.
loaded_jobq() {
	local pid
	pid=$(head -n 1 "$1/postmaster.pid" 2>/dev/null) || return 1
	awk '$6 ~ /\/jobq\.so$/ { print $6; exit }' "/proc/$pid/maps" 2>/dev/null
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

# Heartbeats: a step that prints nothing for HEARTBEAT_SECS (10) seconds
# gets a line saying it still runs, so that no step is silent for long.

# heartbeat LABEL [PATTERN DIR]: copy standard input to standard output as
# it comes; after HEARTBEAT_SECS without any, print "... LABEL: still
# running, N s so far", and with PATTERN (a Perl regular expression) and DIR
# what the newest process running in directory DIR with exactly one argument
# matching PATTERN names ("now: 020_worker_contained.pl": prove prints a
# script's name only when it ends; prove itself has them all as arguments;
# DIR keeps other runs' processes out).  A line left unfinished is printed
# again after the heartbeat, so that what follows still completes it.  Exits
# 0 at the end of the input.  (Plain perl-base, in every Debian; the
# processes are read from /proc.)
heartbeat() {
	perl -e '
		my ($label, $every, $pattern, $dir) = @ARGV;
		# " (now: NAME)": the last path component of the one argument matching
		# $pattern of the most recently started process whose working
		# directory is $dir and that has exactly one such argument, or ""
		sub now_running {
			return "" unless length $pattern;
			my ($best, $best_start) = ("", -1);
			foreach my $p (glob("/proc/[0-9]*")) {
				next unless (readlink("$p/cwd") // "") eq $dir;
				open(my $fh, "<", "$p/cmdline") or next;
				my $cmd = do { local $/; <$fh> } // next;
				close($fh);
				my @hits = grep { /$pattern/ } split /\0/, $cmd;
				next unless @hits == 1;
				open($fh, "<", "$p/stat") or next;
				my $stat = <$fh> // next;
				close($fh);
				# the fields after "(comm)"; the start time is field 22
				$stat =~ s/^.*\) //s;
				my $start = (split / /, $stat)[19];
				($best, $best_start) = ($hits[0], $start) if $start > $best_start;
			}
			$best =~ s{.*/}{};
			return length $best ? " (now: $best)" : "";
		}
		$| = 1;
		my ($t0, $last, $partial) = (time, time, "");
		my $rin = "";
		vec($rin, fileno(STDIN), 1) = 1;
		while (1) {
			my $n = select(my $rout = $rin, undef, undef, 1);
			if ($n > 0) {
				my $got = sysread(STDIN, my $buf, 65536);
				last unless $got;
				print $buf;
				my $i = rindex($buf, "\n");
				$partial = $i >= 0 ? substr($buf, $i + 1) : $partial . $buf;
				$last = time;
			} elsif (time - $last >= $every) {
				printf "%s    ... %s: still running, %d s so far%s\n%s",
					(length $partial ? "\n" : ""), $label, time - $t0, now_running(), $partial;
				$last = time;
			}
		}' "$1" "${HEARTBEAT_SECS:-10}" "${2:-}" "${3:-}"
}

# with_heartbeat LABEL LOGFILE COMMAND...: run COMMAND with its output in
# LOGFILE, printing "... LABEL: still running, N s" every HEARTBEAT_SECS
# seconds while it runs; returns its exit status.  The command runs in the
# foreground (Ctrl-C reaches it); the ticker in the background ends with it,
# or when this shell is gone.
with_heartbeat() {
	local label=$1 log=$2 tick rc=0
	shift 2
	(
		every=${HEARTBEAT_SECS:-10} n=0
		while sleep 1 && kill -0 $$ 2>/dev/null; do
			n=$((n + 1))
			[ $((n % every)) -eq 0 ] && info "... $label: still running, $n s so far"
		done
	) &
	tick=$!
	"$@" >"$log" 2>&1 || rc=$?
	kill "$tick" 2>/dev/null || true
	wait "$tick" 2>/dev/null || true
	return "$rc"
}

# Seconds since the epoch, with milliseconds.
now_s() { date +%s.%N | cut -c1-14; }

# Elapsed seconds (one decimal) since a now_s timestamp.
elapsed_since() { awk -v s="$1" -v e="$(now_s)" 'BEGIN { printf "%.1f", e - s }'; }

# Elapsed milliseconds since a now_s timestamp.
elapsed_ms_since() { awk -v s="$1" -v e="$(now_s)" 'BEGIN { printf "%.0f", (e - s) * 1000 }'; }
