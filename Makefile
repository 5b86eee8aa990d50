# Thin wrapper over CMake/CTest: the two commands of the README, plus a sanitizer run.
#   make          build everything (library, CLI, tests, benchmarks; CUDA when nvcc is found)
#   make eval     the main job: `mlakv eval` (accuracy of every format vs layer magnitude), its
#                 CSV and plot (build/eval.csv, build/eval.png; matplotlib from the test venv)
#   make demo     run `mlakv demo` (bytes/token, capacity and reconstruction error)
#   make test     run all tests: ctest (C, CUDA when a GPU is present, CLI, codecs vs ml_dtypes)
#                 and pytest of python/tests, in a project-local venv (.venv) that it creates
#                 and fills with numpy, ml_dtypes, pytest and matplotlib from PyPI when missing
#   make sanitize ASan + UBSan build in build-asan, running the CPU tests
#   make install  install the library, header, CLI and CMake / pkg-config files
#                 (PREFIX=dir to choose where; default CMake's, /usr/local)
#   make install-check  install into a temporary prefix and build + run an external C program
#                 against it through find_package(mlakv) and pkg-config (tests/install/)
#   make pip-check  `pip install .` into a fresh venv (timed), then a Python round trip with it
#                 from outside the source tree (tests/install/pip_check.sh; needs PyPI)
#   make venv     only the test venv set-up (VENV=dir to put it elsewhere; VENV= with an empty
#                 value uses $(PYTHON) as it is, installing nothing)
#   make venv-torch  the test venv plus torch and ninja (optional; runs the torch.ops.mlakv
#                 tests, and builds their compiled kernels): the
#                 CPU wheel from TORCH_INDEX when that index answers, else PyPI's torch
# A suite that is skipped fails `make test`, except the CUDA tests on a machine without a usable
# GPU and the torch tests while torch is not installed (optional); the summary lists them
# (tests/check_skips.sh).
#   make fuzz     libFuzzer harnesses of tests/fuzz (clang) in build-fuzz, each run
#                 FUZZ_SECONDS (300) from its seed corpus; make fuzz-short: 30 s each (CI)

BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 300
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
PYTHON ?= python3
PYTEST_DIR ?= python/tests
VENV ?= .venv
TEST_PY_PACKAGES ?= numpy ml_dtypes pytest matplotlib
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
ifeq ($(strip $(VENV)),)
TEST_PYTHON := $(PYTHON)
else
TEST_PYTHON := $(abspath $(VENV))/bin/python
endif
LOGS = $(abspath $(BUILD))/test-logs

.PHONY: all build eval demo test test-c test-python test-build venv venv-torch sanitize install install-check pip-check \
        fuzz fuzz-build fuzz-short clean

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# the table, the CSV in $(BUILD)/eval.csv and, when matplotlib imports in the test venv, the
# plot $(BUILD)/eval.png (tools/plot_eval.py)
eval: build venv
	./$(BUILD)/mlakv eval --csv $(BUILD)/eval.csv
	@if $(TEST_PYTHON) -c 'import matplotlib' 2>/dev/null; then \
	  $(TEST_PYTHON) tools/plot_eval.py $(BUILD)/eval.csv $(BUILD)/eval.png && echo "plot: $(BUILD)/eval.png"; \
	else echo "plot skipped: matplotlib not importable by $(TEST_PYTHON)"; fi

demo: build
	./$(BUILD)/mlakv demo

test: test-build
	@status=0; \
	$(MAKE) --no-print-directory test-c || status=1; \
	$(MAKE) --no-print-directory test-python || status=1; \
	echo; echo "==== summary"; \
	tests/check_skips.sh ctest $(LOGS)/ctest.log; \
	tests/check_skips.sh pytest $(LOGS)/pytest.log; \
	if [ $$status -ne 0 ]; then echo "make test: FAILED (see above)"; exit 1; fi; \
	echo "make test: all tests passed"

# The venv for the Python-driven tests: created when missing, the packages of
# TEST_PY_PACKAGES installed when one does not import.
venv:
	@if [ -n "$(strip $(VENV))" ] && [ ! -x "$(TEST_PYTHON)" ]; then \
	  echo "creating $(VENV) (test venv)"; \
	  $(PYTHON) -m venv $(VENV) || { echo "cannot create $(VENV): on Debian, apt-get install python3-venv"; exit 1; }; \
	fi; \
	missing=$$($(TEST_PYTHON) -c 'import importlib.util, sys; print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))' $(TEST_PY_PACKAGES)) || exit 1; \
	if [ -n "$$missing" ]; then \
	  if [ -z "$(strip $(VENV))" ]; then echo "$(TEST_PYTHON) lacks: $$missing (VENV= installs nothing)"; exit 1; fi; \
	  echo "installing into $(VENV): $$missing"; \
	  $(TEST_PYTHON) -m pip install -q $$missing || exit 1; \
	fi

venv-torch: venv
	@$(TEST_PYTHON) -c 'import ninja' 2>/dev/null || $(TEST_PYTHON) -m pip install -q ninja || exit 1
	@if $(TEST_PYTHON) -c 'import torch' 2>/dev/null; then \
	  $(TEST_PYTHON) -c 'import torch; print("torch", torch.__version__, "(present)")'; exit 0; fi; \
	echo "installing torch into $(VENV) (CPU wheel from $(TORCH_INDEX), else PyPI)"; \
	$(TEST_PYTHON) -m pip install -q --retries 0 --timeout 20 --index-url $(TORCH_INDEX) torch || \
	  $(TEST_PYTHON) -m pip install -q torch || exit 1; \
	$(TEST_PYTHON) -c 'import torch; print("torch", torch.__version__)'

# the build, with the test venv's interpreter for the ctest python tests (test_codecs_ref)
test-build: venv $(BUILD)/CMakeCache.txt
	@grep -qx "MLAKV_PYTHON3:FILEPATH=$(TEST_PYTHON)" $(BUILD)/CMakeCache.txt || \
	  cmake -S . -B $(BUILD) -DMLAKV_PYTHON3:FILEPATH=$(TEST_PYTHON) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

test-c: test-build
	@mkdir -p $(LOGS); \
	{ cd $(BUILD) && MLAKV_REQUIRE_PYTHON=1 ctest --output-on-failure -j $(JOBS); echo $$? >$(LOGS)/ctest.rc; } 2>&1 | tee $(LOGS)/ctest.log; \
	rc=$$(cat $(LOGS)/ctest.rc); \
	tests/check_skips.sh ctest $(LOGS)/ctest.log >/dev/null || { tests/check_skips.sh ctest $(LOGS)/ctest.log; rc=1; }; \
	exit $$rc

# pytest exit 5 (no tests collected) is a failure too.
test-python: test-build
	@mkdir -p $(LOGS); \
	{ MLAKV_LIBRARY="$(abspath $(BUILD))/libmlakv.so" MLAKV_CLI="$(abspath $(BUILD))/mlakv" \
	  PYTHONPATH="$(abspath python)$${PYTHONPATH:+:$$PYTHONPATH}" \
	  $(TEST_PYTHON) -m pytest -q -rs $(PYTEST_DIR); echo $$? >$(LOGS)/pytest.rc; } 2>&1 | tee $(LOGS)/pytest.log; \
	rc=$$(cat $(LOGS)/pytest.rc); \
	if [ "$$rc" -eq 5 ]; then echo "pytest: no tests collected in $(PYTEST_DIR)"; fi; \
	tests/check_skips.sh pytest $(LOGS)/pytest.log >/dev/null || { tests/check_skips.sh pytest $(LOGS)/pytest.log; rc=1; }; \
	exit $$rc

sanitize: venv
	cmake -S . -B $(ASAN_BUILD) -DMLAKV_SANITIZE=ON -DMLAKV_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DMLAKV_PYTHON3:FILEPATH=$(TEST_PYTHON) $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	@mkdir -p $(ASAN_BUILD)/test-logs; \
	{ cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 MLAKV_REQUIRE_PYTHON=1 \
	  ctest --output-on-failure -j $(JOBS); echo $$? >test-logs/ctest.rc; } 2>&1 | tee $(ASAN_BUILD)/test-logs/ctest.log; \
	rc=$$(cat $(ASAN_BUILD)/test-logs/ctest.rc); \
	tests/check_skips.sh ctest $(ASAN_BUILD)/test-logs/ctest.log || rc=1; \
	exit $$rc

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX))

install-check: build
	tests/install/check.sh $(BUILD)

pip-check:
	tests/install/pip_check.sh $(PYTHON)

# Fuzzing: each tests/fuzz/fuzz_NAME runs FUZZ_SECONDS over a scratch corpus seeded from
# tests/fuzz/corpus/NAME (new inputs stay in $(FUZZ_BUILD)/corpus, not in the repo), with
# tests/fuzz/NAME.dict when present. A crash or violated property stops the run and leaves
# the input in $(FUZZ_BUILD)/artifacts (replay: $(FUZZ_BUILD)/fuzz/fuzz_NAME FILE).
fuzz-build:
	CC=$(FUZZ_CC) cmake -S . -B $(FUZZ_BUILD) -DMLAKV_FUZZ=ON -DMLAKV_CUDA=OFF \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzzers

fuzz: fuzz-build
	@set -e; mkdir -p $(FUZZ_BUILD)/artifacts; \
	for bin in $(FUZZ_BUILD)/fuzz/fuzz_*; do \
	  name=$${bin##*/fuzz_}; corpus=$(FUZZ_BUILD)/corpus/$$name; mkdir -p $$corpus; \
	  dict=""; if [ -f tests/fuzz/$$name.dict ]; then dict=-dict=tests/fuzz/$$name.dict; fi; \
	  echo "== fuzz_$$name: $(FUZZ_SECONDS) s"; \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $$bin -max_total_time=$(FUZZ_SECONDS) -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$name- $$dict $$corpus tests/fuzz/corpus/$$name \
	    > $(FUZZ_BUILD)/fuzz-$$name.log 2>&1 || { tail -n 60 $(FUZZ_BUILD)/fuzz-$$name.log; \
	      echo "fuzz_$$name FAILED: input in $(FUZZ_BUILD)/artifacts/"; exit 1; }; \
	  grep -E '^stat::(number_of_executed_units|new_units_added)' $(FUZZ_BUILD)/fuzz-$$name.log || true; \
	done; echo "make fuzz: no crash, no violated property"

fuzz-short:
	$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=30

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
