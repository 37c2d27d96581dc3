# Fuge development tasks. Run `make` (or `make help`) to list them.
# Each target is a single command; anything longer lives in scripts/.

.DEFAULT_GOAL := help

FUZZTIME ?= 60s ## time each fuzz target runs (make fuzz)
BENCH    ?= .   ## regexp selecting Go benchmarks (make bench-go)
QUICK    ?=     ## 1: one pair of each, short runs, no managerscale, balancing or rate-limit run (make bench)
SEEDS    ?= 200 ## number of simulator seeds (make sim)
FIRST    ?=     ## first simulator seed; the simulator's default is 1 (make sim)
SEED     ?=     ## replay this one simulator seed, verbosely (make sim)

help: ## Show this help
	@echo 'usage: make <target> [VAR=value ...]'
	@echo
	@echo 'targets:'
	@awk -F ':.*## ' '/^[a-z][a-z0-9_-]*:.*## / { printf "  %-13s  %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
	@echo
	@echo 'variables:'
	@awk -F ' *[?]= *| *## ' '/^[A-Z_]+ *[?]=.*## / { printf "  %-8s  %s%s\n", $$1, $$3, ($$2 == "" ? "" : " [" $$2 "]") }' $(MAKEFILE_LIST)

test: ## Run every test with the race detector (what CI runs)
	scripts/test.sh

vet: ## Run go vet and staticcheck (installed into ./bin)
	scripts/vet.sh

fmt: ## Fail if any Go file is not gofmt-formatted
	scripts/fmt.sh

fuzz: ## Run every fuzz target for FUZZTIME each
	FUZZTIME='$(strip $(FUZZTIME))' scripts/fuzz.sh

bench: ## fuge-proxy beside HAProxy, nginx, round-robin (installs them): bench/results/<date>/report.md
	QUICK='$(strip $(QUICK))' scripts/bench.sh

bench-go: ## Run the Go benchmarks matching BENCH, with allocations
	go test -run '^$$' -bench '$(strip $(BENCH))' -benchmem ./...

bench-ratelimit: ## Fleet-wide rate limits on 10 real fuge-proxies, 3 managers, faults and 20% gossip loss: bench/results/<date>/ratelimit
	go run ./bench/ratelimit

bench-manager: ## Measure the manager under 500 owners + 2,000 lookups (PRS §7.1) at R=4096 (RING='4096 65536' adds the large ring); SCALE=10: 5,000 + 20,000 on 3 nodes at R=8192, lookups started 2,000 at a time; MARKDOWN=FILE
	go run ./bench/managerscale -ring '$(or $(strip $(RING)),$(if $(filter 10,$(SCALE)),8192,4096))' -changes 4 $(if $(filter 10,$(SCALE)),-owners 5000 -lookups 20000 -nodes 3 -steady 30s -churn 30s -start-concurrency 2000) $(if $(strip $(MARKDOWN)),-markdown '$(strip $(MARKDOWN))')

bench-migration: ## Drain one presence server under load, state migration off then on: devices republished
	go run ./bench/migration/cmd

bench-balance: ## Balancing policies off, seeds, fit under Zipf 0.8 and 1.1 with a load shift (5 min): bench/results/<date>/balance/
	go run ./bench/balance

chaos: ## Run the fault harness (real processes) for DURATION (2m) from SEED (1), or SCENARIOS once each
	go run ./bench/chaos -seed '$(or $(strip $(SEED)),1)' -duration '$(or $(strip $(DURATION)),2m)' $(if $(strip $(SCENARIOS)),-scenarios '$(strip $(SCENARIOS))')

sim: ## Run the simulator over SEEDS seeds, or replay SEED
	SEEDS='$(strip $(SEEDS))' FIRST='$(strip $(FIRST))' SEED='$(strip $(SEED))' scripts/sim.sh

proto: ## Regenerate api/fugev1 from proto/ (installs protoc and plugins)
	scripts/proto.sh

demo: ## Run the demo: manager, 3 presence servers, fuge-proxy under load; kill one, add one, check every read
	scripts/demo.sh

tidy: ## Tidy go.mod and go.sum
	go mod tidy

clean: ## Remove ./bin and the Go test cache
	rm -rf bin
	go clean -testcache

.PHONY: help test vet fmt fuzz bench bench-go bench-manager bench-balance bench-migration bench-ratelimit chaos sim proto demo tidy clean
