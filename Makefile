# vsr — the front door.  CMake does the building underneath.
#
#   make         build build/vsr and build/fakellm (optimised, with debug info)
#   make run     install what is missing, build, and run the demo (two fake backends + vsr)
#   make test    install what is missing, then the sanitizer build: unit tests (ctest),
#                a short fuzzing pass over every parser, and the end-to-end suite (pytest)
#   make bench   install what is missing, build, and write the performance record: vsr against
#                nginx, HAProxy and no proxy (docs/performance.md, raw JSON in bench/results/),
#                then the routing core alone and the reliability layer (overhead, failover).
#                BENCH_ARGS=--quick for a one-minute smoke run (bench/run --help)
#   make fuzz    fuzz every parser for FUZZ_SECONDS each (default 60)
#   make image   the container image, build/vsr-image.tar (an OCI archive: podman load -i ...)

MAKEFLAGS += --no-print-directory
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PYTHON ?= /usr/bin/python3
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 30

.PHONY: all build run test unit e2e fuzz fuzz-smoke bench deps clean

all: build

build:
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVSR_TESTS=OFF >/dev/null
	@cmake --build build -j $(JOBS)

build-asan/vsr: FORCE
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DVSR_SANITIZE=ON >/dev/null
	@cmake --build build-asan -j $(JOBS)

deps:
	@scripts/setup-deps

run: deps build
	@scripts/run-demo

unit: build-asan/vsr
	cd build-asan && ctest --output-on-failure -j $(JOBS)

fuzz-build:
	@cmake -S . -B build-fuzz -DVSR_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build build-fuzz -j $(JOBS)

fuzz-smoke: fuzz-build
	@scripts/fuzz-all $(FUZZ_SMOKE_SECONDS)

fuzz: deps fuzz-build
	@scripts/fuzz-all $(FUZZ_SECONDS)

e2e: build-asan/vsr
	VSR_BIN=$(CURDIR)/build-asan/vsr FAKELLM_BIN=$(CURDIR)/build-asan/fakellm \
	  $(PYTHON) -m pytest -q -p no:cacheprovider tests/e2e

test: deps
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory fuzz-smoke
	@$(MAKE) --no-print-directory e2e
	@$(MAKE) --no-print-directory helm-check
	@$(MAKE) --no-print-directory image-check

bench: deps build
	@scripts/setup-deps --bench
	@bench/run $(BENCH_ARGS)
	@echo; echo "model signals (domains + jailbreak + pii) over a keyword request, 1 and 8 clients:"
	@M=$${VSR_MODEL_CACHE:-$$HOME/.cache/vsr/models}/use-lite.vsrm; \
	  $(PYTHON) bench/runtime_routing.py --model $$M --classifiers --requests 1600 && \
	  $(PYTHON) bench/runtime_routing.py --model $$M --classifiers --requests 1600 --clients 8 --runtime-threads 2
	@echo; build/plan_bench 20000
	@echo; $(PYTHON) bench/reliability.py
	@echo; $(PYTHON) bench/looper.py
	@echo; $(PYTHON) bench/protocols.py
	@echo; $(PYTHON) bench/extproc.py
	@bench/quality/run build

clean:
	rm -rf build build-asan build-fuzz

FORCE:

# The Helm chart: lint and render five value sets, validate the manifests
# against the Kubernetes schemas (kubernetes-models), assert the rendered manifests
# and check the rendered configurations with vsr itself.
.PHONY: helm-check
helm-check: build-asan/vsr
	@HELM=$$(scripts/fetch-helm) && K8SM=$$(scripts/fetch-helm --validators) && \
	for s in "" "--set gateway.mode=extproc --set extproc.networkPolicy.enabled=true" \
	         "--set replicaCount=3" "--set autoscaling.enabled=true" \
	         "--values tests/helm/k8s-source-values.yaml"; do \
	  $$HELM lint deploy/helm/vsr $$s >/dev/null && \
	  $$HELM template t deploy/helm/vsr $$s | $(PYTHON) -c 'import json, sys, yaml; [print(json.dumps(d)) for d in yaml.safe_load_all(sys.stdin) if d]' | \
	    node tests/helm/validate.js $$K8SM || exit 1; \
	done && \
	HELM=$$HELM VSR_BIN=$(CURDIR)/build-asan/vsr /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/helm

# The container image (scripts/build-image) and its check: the OCI config, the
# file list, and the image run by podman (tests/image).
.PHONY: image image-check
image: build
	@scripts/setup-deps --image
	@scripts/build-image build/vsr-image.tar

image-check: image
	@VSR_BIN=$(CURDIR)/build/vsr FAKELLM_BIN=$(CURDIR)/build/fakellm $(PYTHON) -m pytest -q -p no:cacheprovider -rs tests/image
