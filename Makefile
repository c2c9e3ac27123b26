# Two commands matter: `make run` (the whole system on this machine) and
# `make test` (everything, against the real local stand-ins). Both install
# what they need through scripts/setup.sh.

SHELL := /bin/bash
GO ?= go
# Lambda functions: one directory under functions/ per API route.
FUNCTIONS := $(notdir $(wildcard functions/*))
LAMBDA_TAGS := lambda.norpc $(if $(XRAY),xray)
LAMBDA_FLAGS := -trimpath -ldflags="-s -w" -tags "$(LAMBDA_TAGS)"

.PHONY: run test test-fast bench build renderer-artifact setup clean lint $(FUNCTIONS:%=build-%)

setup:
	@bash scripts/setup.sh

## run: start DynamoDB Local, SQS, S3, livekit-server and the API on 127.0.0.1:8080
run: setup
	$(GO) run ./scripts/devstack $(if $(RESET),-reset)

## test: vet, then every test against the real local stand-ins, then 30 s of fuzzing every route
test: setup lint
	$(GO) test -count=1 -timeout 15m ./...
	$(GO) test -run '^$$' -fuzz FuzzRoutes -fuzztime 30s -parallel 1 ./shared/httpapi

## test-fast: the inner loop: vet, then the pure and single-process tests (-short: nothing that
## needs DynamoDB Local, SQS, livekit-server or Chromium), in under a minute; no setup needed
## beyond Go and the C libraries (libvpx, libopus, espeak-ng, pocketsphinx)
test-fast: lint
	$(GO) test -short -count=1 ./...

lint:
	@unformatted=$$(gofmt -l $$(find functions gpu-fleet shared scripts -name '*.go' -not -path '*/node_modules/*') 2>/dev/null); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) build -tags xray ./shared/app

## bench: API latency vs raw DynamoDB, webhook delivery latency, PUT start to ws_uri and to video, speech to mouth motion per path, then the renderer benchmarks
bench: setup
	$(GO) run ./scripts/apibench
	$(GO) run ./scripts/webhook-bench -n 50
	$(GO) run ./scripts/startbench -n 30
	$(GO) run ./scripts/lipsync-bench -n 30
	$(GO) run ./scripts/talk-bench -rounds 2
	$(GO) test -run '^$$' -bench . -benchtime 200x ./gpu-fleet/...
	$(GO) run ./scripts/stream-bench -room -streams 1,8,10,12 -aspect 1:1
	$(GO) run ./scripts/stream-bench -streams 1,8,10,12 -aspect 1:1,4:3

## renderer-artifact: build/renderer.tar.gz, what RendererArtifactUri points at: the
## renderer-worker binary (cgo: build it on a machine of the hosts' OS and architecture)
## and the host bootstrap that the launch template runs from it
renderer-artifact:
	mkdir -p build/renderer
	$(GO) build -trimpath -o build/renderer/renderer-worker ./gpu-fleet/cmd/renderer-worker
	cp infra/renderer-host-user-data.sh build/renderer/
	tar -czf build/renderer.tar.gz -C build/renderer renderer-worker renderer-host-user-data.sh
	@ls -l build/renderer.tar.gz

## build: an arm64 `bootstrap` per Lambda function under build/<name>/
build: $(FUNCTIONS:%=build-%)
	@ls -l build/*/bootstrap

$(FUNCTIONS:%=build-%): build-%:
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build $(LAMBDA_FLAGS) -o build/$*/bootstrap ./functions/$*

# SAM's `BuildMethod: makefile` runs `make build-<LogicalId>` with ARTIFACTS_DIR
# set; each function's logical id is its directory name in CamelCase + Function.
define sam_target
build-$(shell echo $(1) | sed -E 's/(^|-)([a-z])/\U\2/g')Function:
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $$(GO) build $$(LAMBDA_FLAGS) -o $$(ARTIFACTS_DIR)/bootstrap ./functions/$(1)
endef
$(foreach f,$(FUNCTIONS),$(eval $(call sam_target,$(f))))

clean:
	rm -rf build .aws-sam
