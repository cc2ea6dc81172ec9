#!/bin/sh
#
# test/cron/run.sh -- tests of the cron code outside pg_regress
#
#   1. unit tests of src/cron/parse.c alone (test/cron/unit.c, plain cc,
#      with AddressSanitizer and UBSan);
#   2. the libFuzzer harness (test/cron/fuzz_cron.c) for FUZZ_SECONDS
#      seconds (default 10; e.g. FUZZ_SECONDS=600 for a longer run);
#   3. the differential test (test/cron/reference.py): CRON_CASES random
#      cases (default 3000) against the server named by the PG* variables
#      (PGHOST, PGPORT, PGUSER, PGDATABASE), where CREATE EXTENSION jobq
#      has been run.
#
# A missing tool (a compiler without the sanitizers, clang without
# libFuzzer: scripts/test installs clang and libclang-rt-14-dev) fails the
# run when CI=true; elsewhere the step is skipped and counted as such.  A
# build that fails with the tools present always fails.
#
# Exits non-zero on any failure; the last line is "N passed, N failed", with
# ", N skipped" when a step was skipped.

set -u
cd "$(dirname "$0")/../.." || exit 2
FUZZ_SECONDS=${FUZZ_SECONDS:-10}
CRON_CASES=${CRON_CASES:-3000}
CC=${CC:-cc}
work=$(mktemp -d) || { echo "0 passed, 1 failed"; exit 2; }
trap 'rm -rf "$work"' EXIT INT TERM
passed=0
failed=0
skipped=0

# skip WHAT: a step cannot run for want of a tool; a failure under CI=true
skip() {
	if [ "${CI:-}" = true ]; then
		echo "FAILED (CI=true allows no skip): $1"
		failed=$((failed + 1))
	else
		echo "SKIPPED: $1"
		skipped=$((skipped + 1))
	fi
}

# add the "N passed, N failed" line of a step's output, or one failure
count() {
	line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$1" | tail -n 1)
	if [ -n "$line" ]; then
		passed=$((passed + $(echo "$line" | cut -d' ' -f1)))
		failed=$((failed + $(echo "$line" | cut -d' ' -f3)))
	fi
	if [ "$2" -ne 0 ] && { [ -z "$line" ] || [ "$(echo "$line" | cut -d' ' -f3)" -eq 0 ]; }; then
		failed=$((failed + 1))
	fi
}

echo "== unit tests (test/cron/unit.c)"
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
if ! echo 'int main(void){return 0;}' | $CC $san -x c -o "$work/probe" - 2>"$work/probe.log"; then
	skip "unit tests under AddressSanitizer/UBSan: $CC cannot build with $san ($(tail -n 1 "$work/probe.log")); running them without"
	san=""
fi
if $CC -std=c99 -O1 -g -Wall -Wextra -Werror $san -Isrc -o "$work/unit" \
	test/cron/unit.c src/cron/parse.c > "$work/unit.log" 2>&1; then
	"$work/unit" > "$work/unit.log" 2>&1
	rc=$?
else
	rc=1
fi
cat "$work/unit.log"
count "$work/unit.log" $rc

echo "== fuzzing (test/cron/fuzz_cron.c) for $FUZZ_SECONDS s"
if ! command -v clang >/dev/null; then
	skip "fuzzing: clang is not installed (Debian: clang libclang-rt-14-dev)"
elif ! echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n){return 0;}' |
	clang -fsanitize=fuzzer -x c -o "$work/fuzz_probe" - >"$work/fuzz_probe.log" 2>&1; then
	skip "fuzzing: clang cannot link libFuzzer (Debian: libclang-rt-14-dev): $(tail -n 1 "$work/fuzz_probe.log")"
elif clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	-Isrc test/cron/fuzz_cron.c src/cron/parse.c -o "$work/fuzz_cron" \
	> "$work/fuzz_build.log" 2>&1; then
	mkdir "$work/corpus"
	i=0
	while IFS= read -r line; do
		i=$((i + 1))
		{ printf '\020\062\124\166\020\062\004\000'; printf '%s' "$line"; } \
			> "$work/corpus/seed$i"
	done < test/cron/seeds.txt
	"$work/fuzz_cron" -max_total_time="$FUZZ_SECONDS" -timeout=10 \
		-rss_limit_mb=2048 -dict=test/cron/cron.dict -artifact_prefix="$work/" \
		"$work/corpus" > "$work/fuzz.log" 2>&1
	rc=$?
	if [ $rc -eq 0 ]; then
		grep -E '^Done [0-9]+ runs' "$work/fuzz.log" | sed 's/^/fuzz: /'
		echo "1 passed, 0 failed"
		passed=$((passed + 1))
	else
		tail -n 40 "$work/fuzz.log"
		for f in "$work"/crash-* "$work"/timeout-* "$work"/leak-* "$work"/oom-*; do
			[ -e "$f" ] && cp "$f" test/cron/ && echo "fuzz: input saved as test/cron/$(basename "$f")"
		done
		echo "0 passed, 1 failed"
		failed=$((failed + 1))
	fi
else
	echo "fuzz harness build FAILED:"
	tail -n 20 "$work/fuzz_build.log"
	echo "0 passed, 1 failed"
	failed=$((failed + 1))
fi

echo "== differential test (test/cron/reference.py), $CRON_CASES cases"
python3 test/cron/reference.py --cases "$CRON_CASES" > "$work/diff.log" 2>&1
rc=$?
cat "$work/diff.log"
count "$work/diff.log" $rc

if [ "$skipped" -gt 0 ]; then
	echo "$passed passed, $failed failed, $skipped skipped"
else
	echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
