# bench/lib/record.sh: append a benchmark's final figures to bench/history/<BENCH>.tsv.
# shellcheck shell=bash
#
# Sourced (not run) by the shell benchmarks in bench/system/ and bench/gpu/run:
#     . "$here/../lib/record.sh"
#     bench_record BENCH METRIC MEDIAN SPREAD TARGET VERDICT [NOTE]
# appends one tab-separated row to bench/history/BENCH.tsv ("/" in BENCH becomes "-",
# e.g. system/overhead -> system-overhead.tsv) with the columns
#     date commit machine command metric median spread target verdict note
# filling in the date (UTC), the commit (`git rev-parse --short HEAD`, "-dirty" added when
# tracked files differ from it; "unknown" outside git), the machine (kernel, CPU model, CPU
# count, the GPU where nvidia-smi names one) and the command line (the knobs named in BENCH_KNOBS that are set, the script's path
# from the repository root and its arguments). A new file gets a header row first.
#
# Recording is optional and never changes what a script prints or its exit status:
#   BENCH_RECORD=0        writes nothing (bench/system/smoke sets it);
#   BENCH_HISTORY_DIR=D   writes into D instead of the repository's bench/history;
#   a copy of bench/ outside a git work tree (and no BENCH_HISTORY_DIR) writes nothing.
# Empty arguments are written as "-"; tabs and newlines inside a field become spaces.

# The script's command line, taken when this file is sourced (a sourced file sees the
# caller's positional parameters).
_bench_record_script=$0
_bench_record_args=("$@")
_bench_record_lib=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# _bench_record_dir: print the history directory, or nothing when recording is off
_bench_record_dir() {
  [ "${BENCH_RECORD:-1}" != 0 ] || return 1
  if [ -n "${BENCH_HISTORY_DIR:-}" ]; then
    echo "$BENCH_HISTORY_DIR"; return 0
  fi
  local top
  top=$(git -C "$_bench_record_lib" rev-parse --show-toplevel 2>/dev/null) || return 1
  [ -d "$top/bench" ] || return 1
  echo "$top/bench/history"
}

_bench_record_field() { local v=${1:--}; v=${v//$'\t'/ }; v=${v//$'\n'/ }; printf '%s' "$v"; }

bench_record() {  # BENCH METRIC MEDIAN SPREAD TARGET VERDICT [NOTE]
  [ $# -ge 6 ] || { echo "bench_record: BENCH METRIC MEDIAN SPREAD TARGET VERDICT [NOTE]" >&2; return 0; }
  local dir file commit machine cpu gpu cmd path var top
  dir=$(_bench_record_dir) || return 0
  mkdir -p "$dir" 2>/dev/null || return 0
  file="$dir/${1//\//-}.tsv"
  commit=$(git -C "$_bench_record_lib" rev-parse --short HEAD 2>/dev/null) || commit=unknown
  if [ "$commit" != unknown ] &&
     [ -n "$(git -C "$_bench_record_lib" status --porcelain --untracked-files=no 2>/dev/null | head -1)" ]; then
    commit="$commit-dirty"
  fi
  cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -1)
  machine="$(uname -r), ${cpu:-cpu model not exposed}, $(nproc) cpus"
  if command -v nvidia-smi >/dev/null 2>&1; then
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    if [ -n "$gpu" ]; then machine+=", GPU $gpu"; fi
  fi
  path=$_bench_record_script
  top=$(git -C "$_bench_record_lib" rev-parse --show-toplevel 2>/dev/null) &&
    path=$(realpath -m --relative-to="$top" "$path" 2>/dev/null || echo "$path")
  cmd=""
  for var in ${BENCH_KNOBS:-}; do
    [ -n "${!var+x}" ] && cmd+="$var=${!var} "
  done
  cmd+=$path
  [ ${#_bench_record_args[@]} -gt 0 ] && cmd+=" ${_bench_record_args[*]}"
  {
    [ -s "$file" ] || printf 'date\tcommit\tmachine\tcommand\tmetric\tmedian\tspread\ttarget\tverdict\tnote\n'
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%Y-%m-%dT%H:%MZ)" "$commit" \
      "$(_bench_record_field "$machine")" "$(_bench_record_field "$cmd")" "$(_bench_record_field "$2")" \
      "$(_bench_record_field "$3")" "$(_bench_record_field "$4")" "$(_bench_record_field "$5")" \
      "$(_bench_record_field "$6")" "$(_bench_record_field "${7:-}")"
  } >>"$file" 2>/dev/null || true
  return 0
}

# bench_verdict VALUE LIMIT: "met" when VALUE <= LIMIT, else "not met by N.NNx" (VALUE / LIMIT);
# a trailing "x" or unit on either is ignored; "-" when either is not a number.
bench_verdict() {
  awk -v v="$1" -v l="$2" 'BEGIN {
    if (v !~ /^[-+]?[0-9.]/ || l !~ /^[-+]?[0-9.]/ || l + 0 <= 0) { print "-"; exit }
    if (v + 0 <= l + 0) print "met"; else printf "not met by %.2fx\n", (v + 0) / (l + 0) }'
}
