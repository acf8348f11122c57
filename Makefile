# The two entry points a newcomer needs; both install their own prerequisites.
.PHONY: setup test demo build bench

setup:
	@bash scripts/setup.sh

build: setup
	cargo build --release

# Everything CI runs.
test: setup
	cargo test --workspace --all-targets

demo: setup
	cargo run --release -- demo

bench: setup
	cargo bench --workspace
