#!/usr/bin/env bash
# Runs Talon's fuzz targets (fuzz/, cargo fuzz with libFuzzer) on the machine's one
# toolchain: RUSTC_BOOTSTRAP=1 lets stable rustc take cargo-fuzz's -Z flags, and
# --sanitizer none needs no instrumented standard library (the targets assert their own
# invariants; a panic is a crash).
#
#   scripts/fuzz.sh smoke            every target for FUZZ_SECONDS (default 10) each, from its
#                                    corpus unpacked into a scratch folder: what CI runs
#   scripts/fuzz.sh run [RUNS]       every target for RUNS executions (default 10000000), on
#                                    both cores, then minimise what it found and pack it back
#                                    into fuzz/corpora/TARGET.tar.gz (commit those to keep it);
#                                    prints a table plus JSON of executions per target
#   scripts/fuzz.sh one TARGET ...   any cargo fuzz run arguments for one target
#
# The corpora are not files in git: each target's minimised corpus is one archive,
# fuzz/corpora/TARGET.tar.gz, unpacked into fuzz/corpus/TARGET (ignored by git), where
# libFuzzer writes what it finds. fuzz/seeds/ (hand-written inputs and fixed crashes) is
# read, never written. A crash leaves its input in fuzz/artifacts/TARGET/ and fails the
# command.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
export RUSTC_BOOTSTRAP=1
TARGETS=(wire_frames s3_request azure_request aws_chunked range_conditional xml_readers identities_file)

if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz
fi
cargo fuzz build --sanitizer none -O >/dev/null

# The working corpus of a target, fresh from its archive (or empty, for a new target),
# then the seeds: libFuzzer adds what it finds to the first folder only.
corpus_of() {
  rm -rf "corpus/$1"
  mkdir -p "corpus/$1"
  if [ -f "corpora/$1.tar.gz" ]; then
    tar -xzf "corpora/$1.tar.gz" -C "corpus/$1"
  fi
  echo "corpus/$1" "seeds/$1"
}

# Packs a target's minimised corpus back into its archive, byte for byte the same for the
# same files (sorted names, no times or owners), so an unchanged corpus changes nothing.
pack() {
  mkdir -p corpora
  cargo fuzz cmin --sanitizer none -O "$1" "corpus/$1" >/dev/null 2>&1 \
    || echo "cmin of $1 failed: its corpus is packed as it is" >&2
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - -C "corpus/$1" . \
    | gzip -n -9 > "corpora/$1.tar.gz"
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
    # Keep the archives small: only inputs that add coverage.
    for t in "${TARGETS[@]}"; do pack "$t"; done
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
