# The two entry points a newcomer needs; both install their own prerequisites.
.PHONY: setup control-plane test demo demo-k8s build bench

setup:
	@bash scripts/setup.sh

# The real Kubernetes control plane for the end-to-end suite, and the kubectl, helm and promtool
# the tests run (kubectl of the control plane's own release, never the one on PATH), built from Go
# modules into a cache folder (only what is missing; a no-op once built; see
# scripts/k8s-control-plane.sh).
control-plane:
	@bash scripts/k8s-control-plane.sh >/dev/null

build: setup
	cargo build --release

# Everything CI runs; the real-control-plane tests fail rather than skip when it is missing.
test: setup control-plane
	GEOMETER_REQUIRE_CONTROL_PLANE=1 cargo test --workspace --all-targets
	GEOMETER_REQUIRE_CONTROL_PLANE=1 cargo test --workspace --doc

demo: setup
	cargo run -- demo

# The demo on the real control plane (built on first use), for watching with the real kubectl.
demo-k8s: setup
	bash scripts/demo-k8s.sh $(ARGS)

# The benchmarks, each writing its table into BENCHMARKS.md (scripts/bench-results.sh), and the
# planner against the exact optimiser on thousands of random clusters (CI runs a few hundred:
# solver/tests/planner/optimal.rs). The simulator's benchmark needs Alibaba's GPU-sharing trace:
# GEOMETER_TRACE=/path/to/alibaba-gpu-v2023 make bench.
bench: setup
	cargo bench --workspace
	if [ -n "$${GEOMETER_TRACE:-}" ]; then bash scripts/bench-simulator.sh "$$GEOMETER_TRACE"; fi
	bash scripts/bench-dynamic-mig.sh
	bash scripts/bench-results.sh
	GEOMETER_OPTIMAL_CASES=5000 cargo test --release --workspace --test planner optimal
