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

.PHONY: all build test vet fmt-check lint bench demo chaos images images-core images-jaeger compose-secrets compose-secrets-tls compose-up compose-up-traces compose-up-tls compose-down bench-peer clean

all: build

## build: the three services, the bench, and nats-server (the version the workspace pins) into bin/.
build:
	@mkdir -p $(BIN)
	go build -o $(BIN)/ ./services/coordinator/cmd/brook-coordinator ./services/streamhost/cmd/brook-streamhost ./services/attention/cmd/brook-attention ./tools/cmd/brook-bench ./tools/cmd/brook-demo
	cd tools && go build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2

## test: vet, gofmt, golangci-lint, and every module's tests (the process suites included).
test: fmt-check vet lint
	go test -count=1 -timeout 18m $(PKGS)

vet:
	go vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

lint:
	go run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0 run $(PKGS)

## demo: build everything, start a local cluster, kill a stream owner, watch it fail over.
demo:
	go run ./tools/cmd/brook-demo $(DEMO_ARGS)

## bench: the cluster bench against a local process cluster, owner killed at 5 s.
BENCH_ARGS ?= --stream durable --kill-owner-at-secs 5 --duration 15s
bench:
	go run ./tools/cmd/brook-bench $(BENCH_ARGS)

## bench-peer: the same workloads against brook and NATS JetStream in one run (issue 16's three:
## 4 publishers x 16 outstanding, 1 publisher x 256, 1 synchronous publisher; PEER_WORKLOADS).
PEER_WORKLOADS ?= 4x16,1x256,1x1
bench-peer:
	go run ./tools/cmd/brook-bench --target both --workloads $(PEER_WORKLOADS) $(BENCH_ARGS)

## chaos: a seeded randomized run of the suites' faults, the bus's and the disk's too, at the default
## 800 ms TTL, 5 minutes (CHAOS_SEED, CHAOS_DURATION); it fails on a spurious failover or a lost
## confirmed record. Store failures need root (a tmpfs per host); without it they are left out.
chaos:
	BROOK_CHAOS=1 go test -count=1 -timeout 60m -run 'TestChaos' -v ./e2e/...

## images: FROM-scratch images of every service, nats-server and Jaeger (for the traces profile),
## and the compose stack's credentials (compose-secrets).
IMAGES := coordinator streamhost attention
images: images-core images-jaeger compose-secrets

# deploy/empty becomes the images' /data, owned by their user (git keeps no
# empty directory).
images-core:
	@mkdir -p deploy/bin deploy/empty
	go build -o deploy/bin/ ./services/coordinator/cmd/brook-coordinator ./services/streamhost/cmd/brook-streamhost ./services/attention/cmd/brook-attention ./tools/cmd/brook-probe
	cd tools && go build -o ../deploy/bin/nats-server github.com/nats-io/nats-server/v2
	for i in $(IMAGES); do docker build -q -f deploy/Dockerfile --build-arg BIN=brook-$$i -t brook/$$i:dev deploy; done
	docker build -q -f deploy/Dockerfile --build-arg BIN=nats-server -t brook/nats:dev deploy

images-jaeger:
	@mkdir -p deploy/bin deploy/empty
	cd deploy/jaeger && GOWORK=off go build -o ../bin/jaeger github.com/jaegertracing/jaeger/cmd/jaeger
	docker build -q -f deploy/Dockerfile --build-arg BIN=jaeger -t brook/jaeger:dev deploy

## compose-secrets: the compose stack's NKEY credentials and nats-server accounts (brook-auth) in
## BROOK_SECRETS_DIR (default ./deploy/secrets, git-ignored; docker-compose.yml reads the same
## variable), unless it already holds a deployment. The files are given to the containers' user
## 65532:65532 (mode 0600), which needs root: run as another user, it uses sudo.
## compose-secrets-tls: the same with a development CA and certificates, for docker-compose.tls.yml,
## in BROOK_SECRETS_DIR or else ./deploy/secrets-tls.
TLS_SECRETS_DIR := $(if $(filter environment command line,$(origin BROOK_SECRETS_DIR)),$(BROOK_SECRETS_DIR),./deploy/secrets-tls)
BROOK_SECRETS_DIR ?= ./deploy/secrets
SECRETS_OWNER ?= 65532:65532
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
COMPOSE_NODES := h1,h2,h3,h4
define compose-secrets
	@if $(SUDO) test -e $(1)/auth.conf; then \
		echo "$(1) holds a deployment (brook-auth --force in it to replace every key)"; \
	else \
		mkdir -p $(BIN) && go build -o $(BIN)/ ./tools/cmd/brook-auth && \
		$(SUDO) $(BIN)/brook-auth --dir $(1) --nodes $(COMPOSE_NODES) --owner $(SECRETS_OWNER) $(2); \
	fi
endef
compose-secrets:
	$(call compose-secrets,$(BROOK_SECRETS_DIR))

# The server certificate, which nats1, nats2 and nats3 share, names all three
# (the services dial them) and this machine; auth.conf's certificate paths
# are where the servers mount the directory. A deployment generated before
# the stack had three servers names only `nats`: it is refused, not used.
TLS_HOSTS := nats1,nats2,nats3,127.0.0.1,localhost
compose-secrets-tls:
	$(call compose-secrets,$(TLS_SECRETS_DIR),--tls --hosts $(TLS_HOSTS) --server-dir /etc/secrets)
	@if ! $(SUDO) grep -q '"nats3"' $(TLS_SECRETS_DIR)/deployment.json; then \
		echo "$(TLS_SECRETS_DIR): the server certificate does not name nats1, nats2 and nats3; delete the directory to generate a new deployment" >&2; \
		exit 1; \
	fi

compose-up: images-core compose-secrets
	docker-compose up -d

compose-up-traces: images-core images-jaeger compose-secrets
	BROOK_OTLP_ENDPOINT=http://jaeger:4318 docker-compose --profile traces up -d

compose-up-tls: images-core compose-secrets-tls
	BROOK_SECRETS_DIR=$(TLS_SECRETS_DIR) docker-compose -f docker-compose.yml -f docker-compose.tls.yml up -d

compose-down:
	docker-compose down -v

clean:
	rm -rf $(BIN) deploy/bin deploy/empty
