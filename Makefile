# Thin wrapper over CMake/CTest: the two commands of the README, plus a sanitizer run.
#   make          build everything (library, CLI, tests, benchmarks; CUDA when nvcc is found)
#   make eval     the main job: `mlakv eval` (accuracy of every format vs layer magnitude)
#   make demo     run `mlakv demo` (bytes/token, capacity and reconstruction error)
#   make test     run all tests: ctest (C, CUDA when a GPU is present, CLI, codecs vs ml_dtypes)
#                 and pytest of python/tests
#   make sanitize ASan + UBSan build in build-asan, running the CPU tests
#   make install  install the library, header, CLI and CMake / pkg-config files
#                 (PREFIX=dir to choose where; default CMake's, /usr/local)
#   make install-check  install into a temporary prefix and build + run an external C program
#                 against it through find_package(mlakv) and pkg-config (tests/install/)
#   make pip-check  `pip install .` into a fresh venv (timed), then a Python round trip with it
#                 from outside the source tree (tests/install/pip_check.sh; needs PyPI)
# Nothing is installed: missing optional tools (numpy, ml_dtypes, pytest, a GPU) make the
# tests that need them report "skipped". Set MLAKV_REQUIRE_PYTHON=1 to fail instead (CI).

BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
PYTHON ?= python3
PYTEST_DIR ?= python/tests

.PHONY: all build eval demo test test-c test-python sanitize install install-check pip-check clean

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

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX))

install-check: build
	tests/install/check.sh $(BUILD)

pip-check:
	tests/install/pip_check.sh $(PYTHON)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
