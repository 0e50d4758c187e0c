# brook: the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
export GOPROXY ?= https://proxy.golang.org
export GOFLAGS ?= -buildvcs=false
export CGO_ENABLED ?= 0

# Every Go folder is its own module in go.work; the root is no module, so the
# test target names each module's packages explicitly.
MODULES := pkg schemas services/coordinator services/streamhost services/attention tools e2e
PKGS := $(addprefix ./,$(addsuffix /...,$(MODULES)))
BIN := $(CURDIR)/bin

.PHONY: all build test vet fmt-check lint bench demo chaos images compose-up compose-down bench-peer clean

all: build

build:
	@mkdir -p $(BIN)
	go build -o $(BIN)/ ./services/coordinator/cmd/brook-coordinator ./services/streamhost/cmd/brook-streamhost ./services/attention/cmd/brook-attention

## test: vet, gofmt, and every module's tests (the process suites included).
test: fmt-check vet
	go test -count=1 -timeout 18m $(PKGS)

vet:
	go vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

lint:
	go run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0 run $(PKGS)

clean:
	rm -rf $(BIN)
