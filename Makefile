# Self-describing targets: `make help` lists them.
SHELL := /bin/bash
GO    ?= go
BIN   := bin
# The trainer client runs on Debian's Python and its packages.
PYTHON ?= /usr/bin/python3
# Short fuzz runs in `make test`; `make fuzz` runs longer.
FUZZTIME ?= 5s
# FUZZMINIMIZE bounds the minimizing of each new input, in wall time. Go's
# byte minimizer tries a number of candidates quadratic in the input's
# length (a tar shard, a JPEG: kilobytes), up to 60 s by default, and the
# worker reports no executions until it is done: a short run would spend
# its time minimizing one input instead of fuzzing. A bound in executions
# (it was 1000x) is not one in time: FuzzCut's candidates that still decode
# run the whole pipeline three times (about 2 ms each here), so one
# minimizing took 2.1 s on a quiet machine and showed as 0 execs/s on
# make test's busy cores.
FUZZMINIMIZE ?= 500ms
# Every fuzz target in the tree, as NAME:./package/ (.ci/fuzzcheck, run by
# make lint, checks that none is missing and that each exists).
# The long end-to-end packages (namespaces, both agents' binaries): a test
# stream of their own, so that they start first.
E2E := ./testbed/ ./testbed/experiment/
FUZZ_TARGETS := \
	FuzzDecodeJPEG:./ops/jpeg/ \
	FuzzDecode:./ops/wireform/ \
	FuzzCut:./ops/ \
	FuzzRunLimited:./ops/hostile/ \
	FuzzOpenShard:./storage-agent/dataset/ \
	FuzzLoadIndex:./storage-agent/dataset/ \
	FuzzDecodeManifest:./storage-agent/dataset/ \
	FuzzDecodePlanFile:./compute-agent/planner/ \
	FuzzDecodeHandoff:./compute-agent/handoff/ \
	FuzzDecodeJournal:./compute-agent/journal/ \
	FuzzLoadProfile:./profiler/ \
	FuzzLayoutFromRanges:./internal/placement/ \
	FuzzParse:./policy/hardware/ \
	FuzzParseBudget:./policy/cacheplan/ \
	FuzzParseID:./testbed/fileserve/ \
	FuzzDecodeCacheEntry:./compute-agent/cache/ \
	FuzzDecodeCacheIndex:./compute-agent/cache/ \
	FuzzParseListPage:./storage-agent/dataset/s3src/ \
	FuzzParseCgroupFiles:./internal/cpuquota/ \
	FuzzParseTCPInfo:./internal/tcpinfo/
# The agents' tests that check what the ops compute (every split's bytes,
# the JPEG-domain cut, the estimates, every policy's tensors, the 70 MiB
# files refused) rather than how goroutines meet: the race detector makes
# their image ops and hashing 10-20x slower and finds nothing their racing
# neighbours do not, so make test runs them without it (a regular
# expression for go test -run, and -skip in the race run).
NORACE := ^(TestPlanFromEstimatesEncoded|TestEncodedSplitWithStorageAgent|TestCutAndFallbackInvariance|TestCutRefetched|TestEstimateRefusesHeaderBombs|TestFetchEverySplit|TestDatasetHostileEntries|TestPolicyPlacementInvariance|TestTooLargeFileSameUnderEveryPlan|TestTooLargeRawRefusedAtEverySplit)$$
NORACE_PKGS := ./compute-agent/computeagent/ ./compute-agent/planner/ ./storage-agent/storageagent/ ./storage-agent/dataset/
# The S3-compatible server the object-store tests and the testbed start
# (internal/s3gw): versitygw's POSIX gateway, installed by go install.
S3GW_PKG     := github.com/versity/versitygw/cmd/versitygw
S3GW_VERSION := v1.8.0
# The tests that start it (package.TestName, an extended regular
# expression): make test prints their passes (.ci/gotest), the proof that
# they ran rather than skipped.
S3_TESTS := ^s3src\.|^storageagent\.TestServeFromBucket$$|^experiment\.TestExperimentBucketLoopback$$
# mypy --strict over the Python client (make typecheck, make test). Its
# cache lives outside the checkout, as Go's build cache does: without it
# mypy analyzes torch and numpy again (70 s on 2 cores) in every fresh clone.
MYPY := cd python && mypy sophon build_backend
typecheck test: export MYPY_CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/sophon/mypy
DEMO_DIR ?= $(CURDIR)/.demo
# The demo's default: a link slow enough to be the bottleneck on 2 cores.
DEMO_IMAGES ?= 160
DEMO_RATE   ?= 100mbit
DEMO_CPUS   ?= 0.5
# make certs: a development CA, node certificates and a gossip key.
CERTS_DIR     ?= $(CURDIR)/.certs
CERTS_CLUSTER ?= sophon
CERTS_STORAGE ?= storage-1
CERTS_COMPUTE ?= compute-1
CERTS_HOSTS   ?= localhost,127.0.0.1,::1
CERTS_DAYS    ?= 365

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# prereq-build, prereq-demo, prereq-test: stop within seconds, printing the
# one apt-get line, when the machine lacks what the target needs
# (.ci/packages lists it; .ci/prereq checks it and installs nothing).
.PHONY: prereq-build prereq-demo prereq-test
prereq-build prereq-demo prereq-test: prereq-%:
	@PYTHON=$(PYTHON) bash .ci/prereq $*

.PHONY: deps
deps: ## Install (as root) every Debian package the build, demo and tests need (.ci/packages), and the S3 server (make s3gw)
	apt-get update && apt-get install -y --no-install-recommends $$(bash .ci/prereq --packages)
	$(MAKE) --no-print-directory s3gw

.PHONY: s3gw
s3gw: ## Install versitygw, the S3-compatible server of the object-store tests and testbed, into $(go env GOPATH)/bin (go install)
	@bin="$$($(GO) env GOPATH)/bin/versitygw"; \
	if [ -x "$$bin" ] && $(GO) version -m "$$bin" | grep -q "mod.*github.com/versity/versitygw.*$(S3GW_VERSION)"; then echo "versitygw $(S3GW_VERSION) already installed"; \
	else echo "$(GO) install $(S3GW_PKG)@$(S3GW_VERSION)"; $(GO) install $(S3GW_PKG)@$(S3GW_VERSION) || \
	  { echo "make s3gw: could not install versitygw; run: $(GO) install $(S3GW_PKG)@$(S3GW_VERSION)"; exit 1; }; fi

.PHONY: s3-many
s3-many: ## List and index 10,000 objects from a real S3 server (versitygw), the full size of the object-store listing test
	SOPHON_S3_MANY=10000 $(GO) test -count=1 -v -run '^TestListMany$$' ./storage-agent/dataset/s3src/

.PHONY: build
build: prereq-build ## Build every binary into bin/: storage-agent, compute-agent, testbed, policy, render (cgo, libjpeg-turbo)
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./storage-agent ./compute-agent ./testbed/cmd/... ./policy/cmd/... ./deploy/render

.PHONY: test
# The tests run the binaries make build made (SOPHON_TEST_BIN,
# internal/testutil) instead of building their own. make test installs
# versitygw (make s3gw, no root needed) and then demands it: the S3 tests
# fail, never skip, when it is missing (internal/testutil.DemandEnv).
test: export SOPHON_TEST_BIN := $(CURDIR)/$(BIN)
test: export SOPHON_TEST_DEMAND := versitygw
test: prereq-test s3gw lint proto-check build ## Check prerequisites, install versitygw (make s3gw), lint, check generated code, build (with and without cgo), run all tests (the agents' with -race; Go and the Python client's, from the repository and pip-installed in a venv), mypy --strict on the client and short fuzz runs, as concurrent streams (.ci/streams)
	@# The Go streams print each package's result, every skip with its
	@# reason and the S3 tests' passes; a failing one, its whole output.
	@GO=$(GO) FUZZTIME=$(FUZZTIME) FUZZMINIMIZE=$(FUZZMINIMIZE) SHOW='$(S3_TESTS)' bash .ci/streams \
	  "go test (testbed end to end)" "bash .ci/gotest -count=1 $(E2E)" \
	  "go test" "bash .ci/gotest -count=1 \$$($(GO) list ./... | grep -v -e /storage-agent -e /compute-agent -e '/testbed$$' -e '/testbed/experiment$$')" \
	  "go test -race (agents)" "bash .ci/gotest -race -count=1 -skip '$(NORACE)' ./storage-agent/... \$$($(GO) list ./compute-agent/... | grep -v '/compute-agent$$')" \
	  "go test (compute-agent binaries; the agents' NORACE tests)" "bash .ci/gotest -count=1 ./compute-agent/ && bash .ci/gotest -count=1 -run '$(NORACE)' $(NORACE_PKGS)" \
	  "binaries and python" "$(GO) test -count=1 -run '^(TestBinary|TestHostileCorpusAgainstBinary)$$' ./storage-agent/storageagent/ && \
	    $(PYTHON) -m unittest discover -s python/tests && PYTHON=$(PYTHON) python/tests/run-installed.sh" \
	  "typecheck (mypy --strict), build (CGO_ENABLED=0)" "($(MYPY)) && CGO_ENABLED=0 $(GO) build ./..." \
	  "fuzz (1 of 2)" "bash .ci/fuzz $(wordlist 1,7,$(FUZZ_TARGETS))" \
	  "fuzz (2 of 2)" "bash .ci/fuzz $(wordlist 8,99,$(FUZZ_TARGETS))"
	@# Last and alone: a well-behaved client's throughput under attack against
	@# its own solo throughput, a ratio that the streams' load would bend.
	$(GO) test -count=1 -run '^TestHostileClientsAgainstBinary$$' ./storage-agent/storageagent/

.PHONY: typecheck
typecheck: ## mypy --strict on the Python client and its build backend (settings in python/pyproject.toml; apt-get install mypy); part of make test
	@command -v mypy >/dev/null || { if [ "$$CI" = true ]; then echo "FAIL typecheck: CI=true but mypy is missing (apt-get install mypy)"; exit 1; fi; \
		echo "SKIP typecheck: mypy missing (apt-get install mypy)"; exit 0; }; \
	$(MYPY)

.PHONY: fuzz
fuzz: ## Longer fuzz runs (FUZZTIME=5m by default here)
	$(MAKE) test FUZZTIME=5m FUZZMINIMIZE=60s

.PHONY: lint
lint: ## gofmt, go vet, every fuzz target in make test (.ci/fuzzcheck), no function over 80 lines in the agents nor package over 3,000 and docs/architecture.md's package table up to date (.ci/codesize), and the README's apt-get line against .ci/packages
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./... ./.ci/codesize
	@bash .ci/fuzzcheck
	@$(GO) run ./.ci/codesize funcs -max 80 -top 0 compute-agent storage-agent
	@$(GO) run ./.ci/codesize packages -max 3000 -check docs/architecture.md
	@$(GO) test -count=1 ./.ci/codesize
	@want="apt-get install -y --no-install-recommends $$(bash .ci/prereq --packages)"; \
	  grep -qxF "$$want" README.md || { echo "README.md must carry the line: $$want (from .ci/packages)"; exit 1; }

.PHONY: size
size: ## The longest functions in the agents and every package's lines, purpose and imports, written into docs/architecture.md's table
	@$(GO) run ./.ci/codesize funcs -max 80 compute-agent storage-agent || true
	@$(GO) run ./.ci/codesize packages -max 3000 -write docs/architecture.md || true

.PHONY: wan
wan: ## The WAN delay line's accuracy matrix (root): 25, 100 and 500 Mbit/s x RTT 0, 20 and 80 ms, round trips by UDP echo (and ping) and bulk TCP goodput within 5%, its CPU per Gbit (docs/testbed.md, "A WAN link"); SOPHON_WAN_MTU=9000 for another MTU
	SOPHON_WAN_MATRIX=1 $(GO) test -count=1 -timeout 10m -run '^TestDelayLineMatrix$$' -v ./testbed/netns/

.PHONY: wan-fill
wan-fill: ## One connection fills a long link (root): 500 Mbit/s at 80 ms on the delay line, 16-40 KB files fetched raw over 4 epochs, those after the first at 90% or more of the link's payload rate on average (testbed TestWANFill; WAN_FILL_RATE, WAN_FILL_RTT, WAN_FILL_CC, STORAGE_AGENT_BIN and COMPUTE_AGENT_BIN for other set-ups)
	SOPHON_WAN_FILL=1 $(GO) test -count=1 -timeout 10m -run '^TestWANFill$$' -v ./testbed/

.PHONY: reliability
reliability: ## Faults at full counts: 30 storage-agent kill -9/restarts (0.5-10 s gaps), 10 SIGSTOPs of 20 s with a replica, 10 compute-agent kill -9/resumes; then the hostile corpus and clients, and the agent's memory after a burst and 60 s idle. Figures appended to docs/results/reliability.jsonl
	@mkdir -p docs/results
	SOPHON_RELIABILITY=full SOPHON_RELIABILITY_OUT=$(CURDIR)/docs/results/reliability.jsonl \
		$(GO) test -count=1 -timeout 60m -run 'TestFault' -v ./testbed/
	SOPHON_RELIABILITY=full $(GO) test -count=1 -run 'TestHostile|TestMutualTLS|TestDatasetHostileEntries|TestIdleMemoryReturns' -v ./storage-agent/storageagent/ ./storage-agent/dataset/

.PHONY: bench
bench: build bench-link ## Go benchmarks, the link benchmarks, then ours vs the torchvision peer on the same JPEGs
	$(GO) test -run '^$$' -bench . -benchmem ./ops/... ./storage-agent/... ./compute-agent/...
	bash testbed/scripts/peer-compare.sh

.PHONY: bench-link
bench-link: ## Raw loopback transport and the shaped No-Off epoch (tc in namespaces as root, else a shaping proxy)
	BENCH_IMAGES=$${BENCH_IMAGES:-600} $(GO) test -run '^$$' -bench 'RawLoopback|LinkBound' -benchtime 1x ./testbed/

.PHONY: train-fidelity
train-fidelity: build ## Training accuracy through the compressed pipelines: train_cnn.py on a generated labelled set (4 classes x 100 at 500x375, 100 held out), 3 seeds x 10 epochs each of imagenet-train, -q95 and -q90 through the real agents; prints where each compressed pipeline's mean final held-out accuracy lies against the lossless seeds' spread and fails when below it (testbed/scripts/train-fidelity.sh; TRAIN_FIDELITY_OUT, a fresh folder, default a new one under /tmp)
	PYTHON=$(PYTHON) BIN=$(CURDIR)/$(BIN) bash testbed/scripts/train-fidelity.sh $(TRAIN_FIDELITY_OUT)

.PHONY: bench-cluster
bench-cluster: ## The cluster planner at ImageNet scale (1.28 M samples, 8 storage agents, 64 ranks on 8 nodes): time, memory, bound, every policy
	$(GO) run ./policy/cmd/policy scale

.PHONY: demo
demo: prereq-demo build ## The main job: generate a dataset, run every policy and the torchvision peer over a shaped link, print the table
	$(BIN)/testbed run --gen openimages-like:$(DEMO_IMAGES) --rate $(DEMO_RATE) --storage-cpus $(DEMO_CPUS) \
		--epochs 2 --out $(DEMO_DIR)

.PHONY: certs
certs: ## Development CA, one key pair per node and a gossip key in CERTS_DIR (.certs/); keeps an existing CA
	$(GO) run ./storage-agent certs --out $(CERTS_DIR) --cluster $(CERTS_CLUSTER) --storage $(CERTS_STORAGE) \
		--compute $(CERTS_COMPUTE) --hosts $(CERTS_HOSTS) --days $(CERTS_DAYS)

.PHONY: clean
clean: ## Remove build outputs and the demo dataset
	rm -rf $(BIN) $(DEMO_DIR)

.PHONY: proto
proto: ## Regenerate proto/dataplanepb from its .proto (protoc 3.21 + pinned go tools)
	PATH="$(CURDIR)/$(BIN)/tools:$$PATH" && mkdir -p $(BIN)/tools && \
	$(GO) build -o $(BIN)/tools/ google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc && \
	protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative proto/dataplanepb/dataplane.proto

.PHONY: proto-check
proto-check: ## Fail when the committed generated code is stale (skipped, loudly, without protoc)
	@command -v protoc >/dev/null || { if [ "$$CI" = true ]; then echo "FAIL proto-check: CI=true but protoc is missing"; exit 1; fi; \
		echo "SKIP proto-check: protoc missing (apt-get install protobuf-compiler)"; exit 0; }; \
	$(MAKE) --no-print-directory proto
	git diff --exit-code -- proto/ || { echo "generated code is stale: run make proto and commit"; exit 1; }
