# dist.mk: "make dist", the release archive (for PGXN and for building from
# source elsewhere), included by the Makefile.
#
# jobq-<version>.zip is "git archive" of the committed HEAD, every file under
# a jobq-<version>/ prefix; <version> is jobq.control's default_version, and
# META.json must carry the same version (checked).  Uncommitted changes are
# not in the archive: the target warns about them.
#
# "make deb" is the Debian packages in dist/: postgresql-NN-jobq_<version>-<rev>_<arch>.deb
# for each PostgreSQL version with server headers here (the extension and
# bin/jobq) and python3-jobq_<version>-<rev>_all.deb (the Python library and
# the dashboard, jobq.web), built by scripts/deb-build from "git archive" of
# HEAD with dpkg-buildpackage and debian/ (pg_buildext, pybuild).
# scripts/deb-check installs them, and upgrades to them from the previous
# release's package, in throwaway Debian 12 and 13 roots.

DIST_VERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" $(srcdir)/jobq.control)
DIST_NAME = jobq-$(DIST_VERSION)
EXTRA_CLEAN += jobq-*.zip dist

.PHONY: dist
dist:
	@test -n "$(DIST_VERSION)" || { echo "dist: no default_version in jobq.control" >&2; exit 1; }
	@n=$$(grep -c '"version": "$(DIST_VERSION)"' $(srcdir)/META.json); \
	test "$$n" -ge 2 || { echo "dist: META.json's version and provides.jobq.version must be $(DIST_VERSION) (jobq.control)" >&2; exit 1; }
	@git -C $(srcdir) diff --quiet HEAD -- || echo "dist: warning: uncommitted changes are not in the archive" >&2
	git -C $(srcdir) archive --format=zip --prefix=$(DIST_NAME)/ -o $(abspath $(DIST_NAME).zip) HEAD
	@echo "dist: $(DIST_NAME).zip"

.PHONY: deb
deb:
	$(srcdir)/scripts/deb-build -o $(abspath dist) HEAD
