# Thin wrapper over CMake/CTest: the two commands of the README, plus a sanitizer run.
#   make          build everything (library, CLI, tests, benchmarks; CUDA when nvcc is found)
#   make eval     the main job: `mlakv eval` (accuracy of every format vs layer magnitude)
#   make demo     run `mlakv demo` (bytes/token, capacity and reconstruction error)
#   make test     run all tests: ctest (C, CUDA when a GPU is present, CLI, codecs vs ml_dtypes)
#                 and pytest of python/tests
#   make sanitize ASan + UBSan build in build-asan, running the CPU tests
#   make fuzz     libFuzzer harnesses of tests/fuzz (clang) in build-fuzz, each run
#                 FUZZ_SECONDS (300) from its seed corpus; make fuzz-short: 30 s each (CI)
# Nothing is installed: missing optional tools (numpy, ml_dtypes, pytest, a GPU) make the
# tests that need them report "skipped". Set MLAKV_REQUIRE_PYTHON=1 to fail instead (CI).

BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 300
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
PYTHON ?= python3
PYTEST_DIR ?= python/tests

.PHONY: all build eval demo test test-c test-python sanitize fuzz fuzz-build fuzz-short clean

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

eval: build
	./$(BUILD)/mlakv eval

demo: build
	./$(BUILD)/mlakv demo

test: build
	@status=0; \
	$(MAKE) --no-print-directory test-c || status=1; \
	$(MAKE) --no-print-directory test-python || status=1; \
	if [ $$status -ne 0 ]; then echo "make test: FAILED (see above)"; exit 1; fi; \
	echo "make test: all tests passed"

test-c: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# pytest exit 5 = no tests collected: not a failure. No pytest: skipped (or a failure when
# MLAKV_REQUIRE_PYTHON=1).
test-python: build
	@if [ ! -d "$(PYTEST_DIR)" ]; then echo "pytest: no $(PYTEST_DIR), skipped"; exit 0; fi; \
	if ! $(PYTHON) -c "import pytest, numpy" 2>/dev/null; then \
	  if [ "$${MLAKV_REQUIRE_PYTHON:-0}" = 1 ]; then echo "pytest/numpy missing"; exit 1; fi; \
	  echo "pytest: skipped (pytest or numpy not installed: $(PYTHON) -m pip install pytest numpy ml_dtypes)"; \
	  exit 0; \
	fi; \
	MLAKV_LIBRARY="$(abspath $(BUILD))/libmlakv.so" MLAKV_CLI="$(abspath $(BUILD))/mlakv" \
	  PYTHONPATH="$(abspath python)$${PYTHONPATH:+:$$PYTHONPATH}" \
	  $(PYTHON) -m pytest -q $(PYTEST_DIR); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; rc=0; fi; \
	exit $$rc

sanitize:
	cmake -S . -B $(ASAN_BUILD) -DMLAKV_SANITIZE=ON -DMLAKV_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS)

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
