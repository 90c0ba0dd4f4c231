# kiln: the two commands are `make run` and `make test`; both set up what they need.
SHELL := /bin/bash
.DEFAULT_GOAL := run

MODEL        ?= models/SmolLM2-135M-Instruct.Q4_1.gguf
KILN_SHARED  ?= $(abspath ../shared)
export KILN_SHARED
CARGO        ?= cargo
KILN         := target/release/kiln

.PHONY: run test model build release fmt lint check unit bench profile clean

## run: fetch the default model if absent, build release, run kiln on it.
run: model release
	$(KILN) inspect $(MODEL)

## test: set up everything the tests need, then format, lint and the whole suite.
test: model check unit

model: $(MODEL)
$(MODEL):
	scripts/fetch-model.sh

## quantized-models: Q4_0 and Q8_0 copies of the default model (for benchmarks), made by
## `kiln quantize` from the release binary.
QUANTIZED := models/SmolLM2-135M-Instruct.Q4_0.gguf models/SmolLM2-135M-Instruct.Q8_0.gguf
.PHONY: quantized-models
quantized-models: $(QUANTIZED)
$(QUANTIZED): models/SmolLM2-135M-Instruct.%.gguf: $(MODEL) | release
	$(KILN) quantize $(MODEL) $@ --type $* --quiet

build:
	$(CARGO) build

release:
	$(CARGO) build --release

fmt:
	$(CARGO) fmt

check:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

unit:
	$(CARGO) test --all-targets

## bench: criterion benchmarks.
bench: model
	$(CARGO) bench

clean:
	$(CARGO) clean
