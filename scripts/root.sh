# shellcheck shell=bash
# scripts/root.sh: throwaway Debian roots, for running jobq where users run
# it (sourced by scripts/test, scripts/fresh-check and scripts/deb-check,
# after scripts/lib.sh).
#
# A root is a minimal Debian made by mmdebstrap --variant=apt (essential
# packages and apt; no locale, no compiler), set up as a machine here: this
# machine's resolv.conf and CA bundle (npm needs it), proc, sysfs, a /dev
# of its own (a tmpfs with the usual device nodes, never this machine's
# /dev: removing a root left mounted by a killed run must not remove this
# machine's devices), a devpts instance of its own on /dev/pts and a tmpfs
# on /dev/shm mounted.  Commands run in
# it through chroot with a clean environment (no LANG: a minimal root has
# none).  No systemd runs there: what a command needs, it starts itself.
# root_cleanup (call it from the caller's EXIT trap) kills what still runs
# in the root, unmounts in reverse order, and deletes the root unless it is
# kept (JOBQ_KEEP_ROOT=1, or a root of the cache JOBQ_ROOTS).
#
# Which Debian release ships which PostgreSQL (the version a plain
# "apt-get install postgresql" gives there):
#
#   bookworm (Debian 12)   15
#   trixie   (Debian 13)   17
#   sid      (unstable)    18   (its Release file may be past its validity
#                                date on a snapshot mirror: apt is told not
#                                to check it, in the root only)
#
# PostgreSQL 16 is in no Debian release.

# The Debian release that ships PostgreSQL major $1, or nothing.
release_of_pg() {
	case "$1" in
		15) echo bookworm ;;
		17) echo trixie ;;
		18) echo sid ;;
		*) return 1 ;;
	esac
}

# The PostgreSQL major that Debian release $1 ships (codename), or nothing.
pg_of_release() {
	case "$1" in
		bookworm) echo 15 ;;
		trixie) echo 17 ;;
		forky | sid) echo 18 ;;
		*) return 1 ;;
	esac
}

# This machine's Debian codename (bookworm, trixie, forky...), or nothing.
host_release() {
	[ -r /etc/os-release ] || return 1
	(. /etc/os-release && echo "${VERSION_CODENAME:-}")
}

RT=''
RT_MOUNTS=()
RT_CACHED=0

# root_dir RELEASE DIR: where the root of RELEASE is: DIR, or with
# JOBQ_ROOTS set, $JOBQ_ROOTS/RELEASE (a cache of roots kept between runs).
root_dir() {
	if [ -n "${JOBQ_ROOTS:-}" ]; then
		echo "$JOBQ_ROOTS/$1"
	else
		echo "$2"
	fi
}

# root_bootstrap RELEASE DIR LOG [PACKAGE...]: make a root of RELEASE at
# $(root_dir RELEASE DIR) with the packages given (its mmdebstrap output in
# LOG), unless it is a cached root made before.  Touches no global state,
# so it may run in the background while other work goes on.
root_bootstrap() {
	local release=$1 dir log=$3
	dir=$(root_dir "$1" "$2")
	shift 3
	local pkgs=("$@") opts=(--variant=apt) mirrors=()
	if [ -n "${JOBQ_ROOTS:-}" ] && [ -f "$dir/.jobq-root" ]; then
		echo "reusing the $release root in $dir (JOBQ_ROOTS)" >"$log"
		return 0
	fi
	[ -e "$dir" ] && { echo "$dir exists: not making a root over it" >"$log"; return 1; }
	mkdir -p "$(dirname "$dir")"
	case "$release" in
		sid) opts+=(--aptopt 'Acquire::Check-Valid-Until "false"') ;;
		bookworm | trixie)
			# as a Debian installed from its media: updates and security too
			mirrors=("deb http://deb.debian.org/debian $release main"
				"deb http://deb.debian.org/debian $release-updates main"
				"deb http://deb.debian.org/debian-security $release-security main")
			;;
	esac
	if [ "${#pkgs[@]}" -gt 0 ]; then
		opts+=("--include=$(
			IFS=,
			echo "${pkgs[*]}"
		)")
	fi
	# One mmdebstrap at a time (roots of other versions are made by
	# background jobs), and once more after a failure: inside a fresh root,
	# a sid root made at the same time as a trixie one failed twice in
	# postgresql-common's postinst (systemd-tmpfiles: "/proc/ is not
	# mounted"), while the same sid root made alone succeeded every time.
	if ! root_mmdebstrap "$dir" "${opts[@]}" "$release" "$dir" "${mirrors[@]}" >"$log" 2>&1; then
		if grep -qs " $dir/" /proc/mounts; then
			echo "mmdebstrap failed and left mounts below $dir: not trying again" >>"$log"
			return 1
		fi
		echo "mmdebstrap failed; trying once more" >>"$log"
		rm -rf --one-file-system "$dir"
		root_mmdebstrap "$dir" "${opts[@]}" "$release" "$dir" "${mirrors[@]}" >>"$log" 2>&1 || return 1
	fi
	touch "$dir/.jobq-root"
}

# root_mmdebstrap DIR MMDEBSTRAP-ARGUMENTS...: mmdebstrap, holding a lock
# that every root_bootstrap on this machine takes (flock, util-linux).
root_mmdebstrap() {
	local lock
	lock="$(dirname "$1")/.jobq-mmdebstrap.lock"
	shift
	echo "waiting for the mmdebstrap lock $lock"
	flock "$lock" mmdebstrap "$@"
}

# root_enter RELEASE DIR: make the root of RELEASE (see root_dir) the one
# that root_run and root_cleanup act on, and mount what it needs.
root_enter() {
	RT=$(root_dir "$1" "$2")
	RT_CACHED=0
	[ -n "${JOBQ_ROOTS:-}" ] && RT_CACHED=1
	[ -f "$RT/.jobq-root" ] || { warn "no root at $RT"; return 1; }
	root_mount
}

# root_mount: set $RT up as a machine here (see the header).
root_mount() {
	local f
	cp -L /etc/resolv.conf "$RT/etc/resolv.conf"
	mkdir -p "$RT/etc/ssl/certs" "$RT/usr/local/share/ca-certificates"
	[ -f /etc/ssl/certs/ca-certificates.crt ] && cp -L /etc/ssl/certs/ca-certificates.crt "$RT/etc/ssl/certs/"
	for f in /usr/local/share/ca-certificates/*.crt; do
		[ -e "$f" ] && cp -L "$f" "$RT/usr/local/share/ca-certificates/"
	done
	root_mount_one "$RT/proc" -t proc proc &&
		root_mount_one "$RT/sys" -t sysfs sysfs &&
		root_mount_one "$RT/dev" -t tmpfs -o mode=755,size=1m tmpfs &&
		root_dev_nodes "$RT/dev" &&
		root_mount_one "$RT/dev/pts" -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts &&
		root_mount_one "$RT/dev/shm" -t tmpfs -o mode=1777 tmpfs
}

# root_dev_nodes DIR: the device nodes and links a root's programs use, in
# DIR (the root's own /dev).
root_dev_nodes() {
	local d=$1
	mknod -m 666 "$d/null" c 1 3 &&
		mknod -m 666 "$d/zero" c 1 5 &&
		mknod -m 666 "$d/full" c 1 7 &&
		mknod -m 666 "$d/random" c 1 8 &&
		mknod -m 666 "$d/urandom" c 1 9 &&
		mknod -m 666 "$d/tty" c 5 0 &&
		ln -s pts/ptmx "$d/ptmx" &&
		ln -s /proc/self/fd "$d/fd" &&
		ln -s /proc/self/fd/0 "$d/stdin" &&
		ln -s /proc/self/fd/1 "$d/stdout" &&
		ln -s /proc/self/fd/2 "$d/stderr" &&
		mkdir "$d/pts" "$d/shm"
}

# root_mount_one TARGET MOUNT-ARGS...: mount, remembered for root_cleanup.
root_mount_one() {
	local target=$1
	shift
	mkdir -p "$target"
	mount "$@" "$target" && RT_MOUNTS+=("$target")
}

# The environment of a root login: nothing of this machine's but where its
# network needs it (proxy settings, the extra CA file Node.js reads); no LANG.
root_env() {
	local v
	RT_ENV=(HOME=/root USER=root LOGNAME=root SHELL=/bin/bash TERM="${TERM:-dumb}"
		PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
	for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY NODE_EXTRA_CA_CERTS NO_COLOR; do
		[ -n "${!v:-}" ] && RT_ENV+=("$v=${!v}")
	done
	return 0
}

# root_run COMMAND...: run COMMAND in the root, as root, in a clean
# environment (plus RT_EXTRA_ENV, an array of VAR=VALUE).
root_run() {
	root_env
	chroot "$RT" /usr/bin/env -i "${RT_ENV[@]}" "${RT_EXTRA_ENV[@]}" "$@"
}

# True when something is mounted at or below $RT.
root_mounted_below() {
	awk -v r="$RT" '$5 == r || index($5, r "/") == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo
}

# Signal the processes whose root directory is $RT or below; true when
# there was one.
root_kill_inside() {
	local sig=$1 p r n=0
	for p in /proc/[0-9]*; do
		r=$(readlink "$p/root" 2>/dev/null) || continue
		case "$r" in
			"$RT" | "$RT"/*) kill "-$sig" "${p#/proc/}" 2>/dev/null && n=$((n + 1)) ;;
		esac
	done
	[ "$n" -gt 0 ]
}

# root_cleanup: stop what runs in the root, unmount, delete it (unless
# JOBQ_KEEP_ROOT=1 or it is a cached root).  Safe to call twice.
root_cleanup() {
	local i
	[ -n "$RT" ] && [ -d "$RT" ] || return 0
	if root_kill_inside TERM; then
		sleep 3
		root_kill_inside KILL && sleep 1
	fi
	for ((i = ${#RT_MOUNTS[@]} - 1; i >= 0; i--)); do
		umount "${RT_MOUNTS[$i]}" 2>/dev/null || umount -l "${RT_MOUNTS[$i]}" ||
			warn "could not unmount ${RT_MOUNTS[$i]}"
	done
	RT_MOUNTS=()
	if [ "${JOBQ_KEEP_ROOT:-0}" = 1 ] || [ "$RT_CACHED" = 1 ]; then
		info "root kept: $RT (chroot '$RT' /bin/bash)"
	elif root_mounted_below; then
		warn "something is still mounted below $RT: not deleting it"
	else
		rm -rf --one-file-system "$RT"
	fi
	RT=''
}
