# Makefile for jobq (PGXS)
#
#   make                 build
#   make install         install into the PostgreSQL found by pg_config
#   make installcheck    pg_regress + isolation suites (each starts its own
#                        preloaded server) and the TAP tests
#   make format          pgindent-like formatting with clang-format
#
# The whole test suite, with packages, a server and a non-root user set up,
# is scripts/test; the demo is scripts/demo.

# PGXS defines "all"; the install-script rule below must not become the default.
.DEFAULT_GOAL := all

EXTENSION = jobq
MODULE_big = jobq
OBJS = $(patsubst %.c,%.o,$(sort $(wildcard src/*.c)))

# Extension scripts live in extension/: the install script of the first
# release (jobq--0.1.0.sql, frozen) and one upgrade script per release after
# it (jobq--A--B.sql).  Released scripts are never edited: every schema change
# goes into the upgrade script of the version under way.  There is no install
# script for later versions: CREATE EXTENSION jobq runs 0.1.0 and then each
# upgrade in turn, so a fresh install and an upgraded one are the same
# schema by construction (pg_stat_statements does the same).
EXTVERSION = $(shell sed -n "s/^default_version = '\\(.*\\)'/\\1/p" jobq.control)
DATA = $(sort $(wildcard extension/jobq--*.sql))

# the command-line tool (bin/jobq), installed into PostgreSQL's bindir
SCRIPTS := $(wildcard bin/jobq)

PG_CPPFLAGS = -I$(srcdir)/src -DJOBQ_VERSION='"$(EXTVERSION)"'
# CI (scripts/test) builds with WERROR=1: warnings are errors there.
ifdef WERROR
PG_CFLAGS = -Werror
endif

JOBQ_TEST_CONF = $(srcdir)/test/jobq_test.conf

REGRESS = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --temp-config=$(JOBQ_TEST_CONF) --temp-instance=tmp_check_regress

ISOLATION = $(patsubst test/isolation/specs/%.spec,%,$(sort $(wildcard test/isolation/specs/*.spec)))
ISOLATION_OPTS = --inputdir=$(srcdir)/test/isolation --outputdir=output_iso \
	--temp-config=$(JOBQ_TEST_CONF) --temp-instance=tmp_check_iso

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

EXTRA_CLEAN = tmp_check_regress tmp_check_iso output_iso results regression.diffs \
	regression.out log

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# test/layout/check: src/ includes go one way (processes -> features ->
# queue operations -> access control and shared memory -> leaf), no C file
# over 900 lines.  Every installcheck runs it first.
.PHONY: check-layout
check-layout:
	$(srcdir)/test/layout/check

installcheck: check-layout

.PHONY: format
format:
	clang-format -i --style=file src/*.c src/*.h

# make dist: a versioned archive of HEAD (after PGXS, so "all" stays the default)
include $(srcdir)/dist.mk
