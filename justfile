# Talon's everyday commands. Install just with `cargo install --locked just`;
# nothing here is needed for the README's two quick-start commands.

# List the recipes.
default:
    @just --list

# Run every test (the README's test command).
test:
    ./scripts/test.sh

# Lints exactly as CI runs them.
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets -- -D warnings

# Format the workspace.
fmt:
    cargo fmt --all

# Run the local deployment (`talon up`); pass flags after, e.g. `just run --data-dir /data`.
run *ARGS:
    cargo run --release -- up {{ARGS}}

# What CI runs.
ci:
    ./.ci/run
