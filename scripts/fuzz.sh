#!/usr/bin/env bash
# Runs Talon's fuzz targets (fuzz/, cargo fuzz with libFuzzer) on the machine's one
# toolchain: RUSTC_BOOTSTRAP=1 lets stable rustc take cargo-fuzz's -Z flags, and
# --sanitizer none needs no instrumented standard library (the targets assert their own
# invariants; a panic is a crash).
#
#   scripts/fuzz.sh smoke            every target for FUZZ_SECONDS (default 10) each, from the
#                                    committed corpus: what CI runs
#   scripts/fuzz.sh run [RUNS]       every target for RUNS executions (default 10000000), on
#                                    both cores, then merge what was found into the corpus and
#                                    print a table plus JSON of executions per target
#   scripts/fuzz.sh one TARGET ...   any cargo fuzz run arguments for one target
#
# A crash leaves its input in fuzz/artifacts/TARGET/ and fails the command.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
export RUSTC_BOOTSTRAP=1
TARGETS=(wire_frames s3_request azure_request aws_chunked range_conditional xml_readers identities_file)

if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz
fi
cargo fuzz build --sanitizer none -O >/dev/null

corpus_of() {
  mkdir -p "corpus/$1"
  # Seeds are kept apart (reviewed by hand); the corpus grows from runs.
  echo "corpus/$1" "seeds/$1"
}

case "${1:-smoke}" in
  smoke)
    secs=${FUZZ_SECONDS:-10}
    for t in "${TARGETS[@]}"; do
      printf '==> fuzz %s for %ss\n' "$t" "$secs"
      # shellcheck disable=SC2046
      cargo fuzz run --sanitizer none -O "$t" $(corpus_of "$t") -- \
        -max_total_time="$secs" -print_final_stats=1 2>&1 | grep -E "^(stat::number_of_executed_units|stat::new_units_added)|ERROR|panicked" || true
      [ -z "$(ls -A "artifacts/$t" 2>/dev/null)" ] || { echo "crash inputs in fuzz/artifacts/$t" >&2; exit 1; }
    done
    ;;
  run)
    runs=${2:-10000000}
    mkdir -p logs
    pids=()
    for t in "${TARGETS[@]}"; do
      # shellcheck disable=SC2046
      ( set +e; cargo fuzz run --sanitizer none -O "$t" $(corpus_of "$t") -- \
          -runs="$runs" -print_final_stats=1 > "logs/$t.log" 2>&1; echo "exit $?" >> "logs/$t.log" ) &
      pids+=($!)
      # Two at a time: this machine has two cores.
      if [ "${#pids[@]}" -ge 2 ]; then wait "${pids[0]}" || true; pids=("${pids[@]:1}"); fi
    done
    wait || true
    printf '\n| target | executions | new units | result | seconds |\n|---|---|---|---|---|\n'
    json="{"
    for t in "${TARGETS[@]}"; do
      execs=$(grep -oE "stat::number_of_executed_units: +[0-9]+" "logs/$t.log" | awk '{print $2}' | tail -1 || true)
      units=$(grep -oE "stat::new_units_added: +[0-9]+" "logs/$t.log" | awk '{print $2}' | tail -1 || true)
      secs=$(grep -oE "Done [0-9]+ runs in [0-9]+ second" "logs/$t.log" | awk '{print $5}' | tail -1 || true)
      result=$(grep -q "^exit 0" "logs/$t.log" && echo ok || echo CRASH)
      printf '| %s | %s | %s | %s | %s |\n' "$t" "${execs:-?}" "${units:-?}" "$result" "${secs:-?}"
      json+="\"$t\":{\"executions\":${execs:-0},\"result\":\"$result\"},"
    done
    echo "${json%,}}"
    failed=$(grep -L "^exit 0" logs/*.log || true)
    # Keep the committed corpus small: only inputs that add coverage.
    for t in "${TARGETS[@]}"; do
      cargo fuzz cmin --sanitizer none -O "$t" "corpus/$t" >/dev/null 2>&1 || true
    done
    [ -z "$failed" ] || { echo "crashed: $failed (inputs in fuzz/artifacts/)" >&2; exit 1; }
    ;;
  one)
    shift
    cargo fuzz run --sanitizer none -O "$@"
    ;;
  *)
    echo "usage: scripts/fuzz.sh smoke | run [RUNS] | one TARGET [ARGS...]" >&2
    exit 2
    ;;
esac
