# Makefile for jobq (PGXS)
#
#   make                 build
#   make install         install into the PostgreSQL found by pg_config
#   make installcheck    pg_regress + isolation suites (each starts its own
#                        preloaded server) and the TAP tests
#   make format          pgindent formatting (pg_bsd_indent, src/typedefs.list)
#
# The whole test suite, with packages, a server and a non-root user set up,
# is scripts/test; the demo is scripts/demo.

# PGXS defines "all"; the install-script rule below must not become the default.
.DEFAULT_GOAL := all

EXTENSION = jobq
MODULE_big = jobq
# every C file under src/ (the base at its top, the rooms in its folders)
SRCS = $(shell find src -name '*.c' | LC_ALL=C sort)
HDRS = $(shell find src -name '*.h' | LC_ALL=C sort)
OBJS = $(SRCS:.c=.o)

# Debian's PGXS has no automatic header dependencies (autodepend is off): a
# changed header rebuilds every object and every JIT bitcode file (.bc, for
# inlining), or code built against an older struct layout shares memory
# with newer code (seen: a field added to a shared-memory struct of
# shmem/shm_bgw.h left the launcher reading garbage).
$(OBJS) $(OBJS:.o=.bc): $(HDRS)

# Extension scripts live in extension/.  The current schema is written by
# concern in extension/schema/NN_<concern>.sql (tables, indexes, functions
# by area, views, privileges); the build concatenates them in name order
# into extension/jobq--$(EXTVERSION).sql, the install script CREATE
# EXTENSION jobq runs (generated: edit the sources, never the script).
# Beside it: jobq--0.1.0.sql, the install script of the first release
# (frozen), and one upgrade script per release, jobq--A--B.sql, organised by
# object, which carries a database of release A to B in place.  A schema
# change goes into the sources and into the upgrade script of the version
# under way; test/t/060_upgrade.pl checks that a fresh install and an
# upgraded database have the same schema.  0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.3.2, 0.3.3, 0.3.4, 0.3.5 and 0.3.6 databases are
# upgraded in place, so every upgrade script and jobq--0.1.0.sql are
# installed with the generated script.
EXTVERSION = $(shell sed -n "s/^default_version = '\\(.*\\)'/\\1/p" jobq.control)
SCHEMA_SOURCES = $(sort $(wildcard extension/schema/*.sql))
DATA_built = extension/jobq--$(EXTVERSION).sql
DATA = $(filter-out $(DATA_built),$(sort $(wildcard extension/jobq--*.sql)))

# the command-line tool (bin/jobq), installed into PostgreSQL's bindir
SCRIPTS := $(wildcard bin/jobq)

PG_CPPFLAGS = -I$(srcdir)/src -DJOBQ_VERSION='"$(EXTVERSION)"'
# CI (scripts/test) builds with WERROR=1: warnings are errors there.
ifdef WERROR
PG_CFLAGS = -Werror
endif

JOBQ_TEST_CONF = $(srcdir)/test/jobq_test.conf

REGRESS = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
# The test databases are UTF8 whatever the machine's locale (a minimal
# Debian has none, and initdb then makes SQL_ASCII): the expected output
# shows multibyte text.  sql/encodings.sql makes databases of other
# encodings itself.
REGRESS_OPTS = --temp-config=$(JOBQ_TEST_CONF) --temp-instance=tmp_check_regress \
	--encoding=UTF8

ISOLATION = $(patsubst test/isolation/specs/%.spec,%,$(sort $(wildcard test/isolation/specs/*.spec)))
ISOLATION_OPTS = --inputdir=$(srcdir)/test/isolation --outputdir=output_iso \
	--temp-config=$(JOBQ_TEST_CONF) --temp-instance=tmp_check_iso --encoding=UTF8

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

EXTRA_CLEAN = tmp_check_regress tmp_check_iso output_iso results regression.diffs \
	regression.out log

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# The install script of the current release: its \echo line, then the files
# of extension/schema/ in name order.
extension/jobq--$(EXTVERSION).sql: $(SCHEMA_SOURCES) jobq.control
	{ printf '%s\n' '\echo Use "CREATE EXTENSION jobq" to load this file. \quit' '' \
	    '-- jobq $(EXTVERSION) install script, made by make from extension/schema/: edit those files'; \
	  for f in $(SCHEMA_SOURCES); do echo; cat "$$f"; done; \
	} >$@.tmp && mv $@.tmp $@

# test/layout/check: src/ includes go one way, folder by folder (bgw ->
# ops -> queue -> workflow -> shmem, cron -> the base at src/'s top), and
# every C file sits in a placed folder.  Every installcheck runs it first.
.PHONY: check-layout
check-layout:
	$(srcdir)/test/layout/check

installcheck: check-layout

# make format: reformat src/ as PostgreSQL's pgindent does, with
# pg_bsd_indent (Debian package pg-bsd-indent) and PostgreSQL's options,
# over the typedef names in src/typedefs.list.  make check-format (run by
# installcheck) fails when a file of src/ is not formatted so.  make
# typedefs regenerates src/typedefs.list from the DWARF debug information of
# the built objects (every typedef the code uses, PostgreSQL's included), as
# PostgreSQL's own typedef tool does.
# src/ is formatted with pg_bsd_indent 2.1.1 (Debian 12's pg-bsd-indent);
# 2.1.2, which PostgreSQL 17 and 18 ship in their bindir, indents
# continuation lines differently, so check-format says so in one line and
# checks nothing with another version.
PG_BSD_INDENT = $(shell command -v pg_bsd_indent || echo $(bindir)/pg_bsd_indent)
PG_BSD_INDENT_VERSION = 2.1.1
PG_BSD_INDENT_OPTS = -bad -bap -bbb -bc -bl -cli1 -cp33 -cdb -nce -d0 -di12 \
	-nfc1 -i4 -l79 -lp -lpl -nip -npro -sac -tpg -ts4 -U$(srcdir)/src/typedefs.list

.PHONY: format check-format typedefs
format:
	@v=$$($(PG_BSD_INDENT) --version 2>&1 | sed -n 's/^pg_bsd_indent \([0-9.]*\).*/\1/p'); \
	if [ "$$v" != "$(PG_BSD_INDENT_VERSION)" ]; then \
		echo "make format needs pg_bsd_indent $(PG_BSD_INDENT_VERSION) (Debian 12's pg-bsd-indent); $(PG_BSD_INDENT) is $${v:-unknown}"; \
		exit 1; \
	fi; \
	for f in $(addprefix $(srcdir)/,$(SRCS) $(HDRS)); do \
		$(PG_BSD_INDENT) $(PG_BSD_INDENT_OPTS) "$$f" "$$f.indent" && \
		{ cmp -s "$$f" "$$f.indent" || { cp "$$f.indent" "$$f"; echo "formatted $$f"; }; }; \
		rm -f "$$f.indent"; \
	done

check-format:
	@v=$$($(PG_BSD_INDENT) --version 2>&1 | sed -n 's/^pg_bsd_indent \([0-9.]*\).*/\1/p'); \
	if [ "$$v" != "$(PG_BSD_INDENT_VERSION)" ]; then \
		echo "src/ formatting not checked: $(PG_BSD_INDENT) is version $${v:-unknown}, src/ is formatted with $(PG_BSD_INDENT_VERSION)"; \
		exit 0; \
	fi; \
	bad=0; for f in $(addprefix $(srcdir)/,$(SRCS) $(HDRS)); do \
		$(PG_BSD_INDENT) $(PG_BSD_INDENT_OPTS) "$$f" "$$f.indent" || exit 1; \
		if ! diff -u "$$f" "$$f.indent"; then bad=1; fi; \
		rm -f "$$f.indent"; \
	done; \
	if [ $$bad = 1 ]; then echo "src/ is not formatted: run make format"; exit 1; fi; \
	echo "src/ is formatted (pg_bsd_indent, src/typedefs.list)"

typedefs: all
	objdump -Wi $(OBJS) | awk '/DW_TAG_typedef/ { t = 1; next } \
		t && /DW_AT_name/ { print $$NF; t = 0 } /DW_TAG_/ { t = 0 }' | \
		LC_ALL=C sort -u >$(srcdir)/src/typedefs.list

installcheck: check-format

# make dist: a versioned archive of HEAD (after PGXS, so "all" stays the default)
include $(srcdir)/dist.mk
