# The two commands a newcomer needs are `make demo` and `make test`; the
# rest are for developers. Every target is a thin wrapper over scripts/.
.PHONY: demo test build release bench lint fmt update-golden

demo:           ## build, start the daemon on embedded defaults, run a demo session
	./scripts/demo

test:           ## install what the tests need, then run them all
	./scripts/test

build:          ## static binary in ./bin/agentbox
	./scripts/build

release:        ## cross-build dist/: linux daemons, darwin/windows clients, SHA256SUMS
	./scripts/release

bench:          ## benchmarks; prints figures and ratios against the goals
	./scripts/bench

lint:           ## golangci-lint with the project's config (.golangci.yml)
	go run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0 run ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

update-golden:  ## rewrite golden files and committed generated files
	./scripts/update-golden
