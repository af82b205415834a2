#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance, pinned in
# package.json) against `cargo run --example conformance_server` (the test fixture in
# examples/conformance_server/): the ten Tasks-extension
# scenarios and every core server scenario the suite lists for protocol 2026-07-28.
# `--server conformance_retrofit` runs the ten tasks scenarios against the retrofit
# fixture instead (examples/conformance_retrofit.rs: no task code, `TaskMode::Auto`), and
# `--server gateway` against that fixture without any layer, behind the gateway (gateway/),
# and `--server federated` against conformance_server, with its own layer and tasks,
# behind the gateway: the fixture's tasks carried through it under task handles.
#
# Each scenario runs on its own, on the 2026-07-28 wire, with Node 22 from node_modules.
# Results are read from each scenario's checks.json (never from the suite's stdout) and
# written under conformance-results/ (git-ignored).
#
# A FAILURE check listed in scripts/conformance-expected-failures.txt
# (`scenario:check-id  # reason`) is reported but does not fail the run; any other
# FAILURE, or a scenario that produced no checks.json, makes the script exit 1.
# WARNING, SKIPPED and INFO checks are reported and never fail the run.
#
# Usage: scripts/conformance.sh [options]
#   --scenario NAME          run only this scenario (repeatable)
#   --tasks-only             run only the ten tasks scenarios
#   --core-only              run only the core 2026-07-28 scenarios
#   --url URL                test a server that is already running at URL (nothing is built
#                            or started)
#   --server EXAMPLE         what to build and start: conformance_server (default);
#                            conformance_retrofit; or gateway, the gateway (mcp-tasks-gateway) in front
#                            of conformance_retrofit served without its layer (MCP_PLAIN=1).
#                            The last two imply --tasks-only and the baseline
#                            scripts/conformance-retrofit-expected-failures.txt.
#                            federated: the gateway in front of conformance_server with
#                            its own layer, its tasks carried (--tasks-only, the default
#                            baseline)
#   --expected-failures FILE baseline file (default: scripts/conformance-expected-failures.txt)
#   --results DIR            where results go (default: conformance-results)
#   --timeout SECONDS        per-scenario limit (default: 120)
#   -h, --help               this text
#
# Environment: MCP_SSE=1 is passed on to the server, which then answers every request
# with an SSE stream instead of one JSON message (conformance_server and
# conformance_retrofit both read it).
#
# The closing line is `N passed, M failed`: N counts SUCCESS checks, M counts every
# FAILURE, baseline ones included. The line before it, `expected failures: K (see FILE)`,
# says how many of the M are in the baseline; the script exits 1 exactly when M > K.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SPEC_VERSION="2026-07-28"
TASKS_SCENARIOS=(
  tasks-lifecycle
  tasks-capability-negotiation
  tasks-wire-fields
  tasks-request-state-removal
  tasks-mrtr-input
  tasks-request-headers
  tasks-dispatch-and-envelope
  tasks-status-notifications
  tasks-required-task-error
  tasks-mrtr-composition
)

scenarios=()
run_tasks=1
run_core=1
url=""
server="conformance_server"
baseline=""
results="conformance-results"
scenario_timeout=120

usage() { sed -n '2,46p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --scenario) scenarios+=("${2:?--scenario needs a name}"); shift 2 ;;
    --scenario=*) scenarios+=("${1#*=}"); shift ;;
    --tasks-only) run_core=0; shift ;;
    --core-only) run_tasks=0; shift ;;
    --url) url="${2:?--url needs a URL}"; shift 2 ;;
    --url=*) url="${1#*=}"; shift ;;
    --server) server="${2:?--server needs an example name}"; shift 2 ;;
    --server=*) server="${1#*=}"; shift ;;
    --expected-failures) baseline="${2:?--expected-failures needs a file}"; shift 2 ;;
    --results) results="${2:?--results needs a directory}"; shift 2 ;;
    --timeout) scenario_timeout="${2:?--timeout needs seconds}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "conformance.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

case "$server" in
  conformance_server)
    baseline="${baseline:-scripts/conformance-expected-failures.txt}" ;;
  conformance_retrofit|gateway)
    # The retrofit fixture has only the tasks fixtures.
    run_core=0
    baseline="${baseline:-scripts/conformance-retrofit-expected-failures.txt}" ;;
  federated)
    # The tasks scenarios, answered by the fixture's own tasks through the gateway.
    run_core=0
    baseline="${baseline:-scripts/conformance-expected-failures.txt}" ;;
  *) echo "conformance.sh: --server must be conformance_server, conformance_retrofit, gateway or federated" >&2; exit 2 ;;
esac

log() { printf '[conformance] %s\n' "$*" >&2; }

# --- Node 22 and the pinned suite -------------------------------------------------------
NODE="$ROOT/node_modules/node/bin/node"
CLI="$ROOT/node_modules/@modelcontextprotocol/conformance/dist/index.js"
stamp="$ROOT/node_modules/.package-lock.json"
if [[ ! -x "$NODE" || ! -f "$CLI" || ! -f "$stamp" || "$ROOT/package-lock.json" -nt "$stamp" ]]; then
  log "installing the pinned conformance suite and Node 22 (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error >&2
fi
if ! "$NODE" -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 22 ? 0 : 1)'; then
  echo "conformance.sh: $NODE is not Node >= 22" >&2
  exit 1
fi

# --- which scenarios ----------------------------------------------------------------------
if [[ ${#scenarios[@]} -eq 0 ]]; then
  if [[ $run_tasks -eq 1 ]]; then
    scenarios+=("${TASKS_SCENARIOS[@]}")
  fi
  if [[ $run_core -eq 1 ]]; then
    # The suite's own list of server scenarios that apply at 2026-07-28.
    mapfile -t core < <("$NODE" "$CLI" list --server --spec-version "$SPEC_VERSION" \
      | sed -n "s/^  - \([^ ]*\) \[\(.*\)\]\$/\1 \2/p" \
      | awk -v v="$SPEC_VERSION" '$2 ~ v { print $1 }')
    if [[ ${#core[@]} -eq 0 ]]; then
      echo "conformance.sh: the suite listed no $SPEC_VERSION server scenarios" >&2
      exit 1
    fi
    scenarios+=("${core[@]}")
  fi
fi

# --- the server ---------------------------------------------------------------------------
mkdir -p "$results"
results="$(cd "$results" && pwd)"
server_pids=()

stop_server() {
  local pid
  for pid in "${server_pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      kill -9 "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  server_pids=()
}
trap stop_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  "$NODE" -e '
    const s = require("net").createServer();
    s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

# start_example NAME PORT LOG [VAR=VALUE...]: starts the example NAME (or, for
# `gateway`, the mcp-tasks-gateway binary) on 127.0.0.1:PORT and waits until it
# accepts connections.
start_example() {
  local name="$1" port="$2" logfile="$3" target
  shift 3
  case "$name" in
    gateway) target=(-p mcp-tasks-gateway) ;;
    *) target=(--example "$name") ;;
  esac
  log "starting $name on 127.0.0.1:${port} (log: $logfile)"
  # `cargo run` replaces itself with the program on Unix, so $! is the server.
  env "$@" MCP_ADDR="127.0.0.1:${port}" cargo run --quiet "${target[@]}" \
    >"$logfile" 2>&1 &
  local pid=$!
  server_pids+=("$pid")
  for _ in $(seq 1 300); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "conformance.sh: $name exited during startup; its log:" >&2
      tail -n 50 "$logfile" >&2 || true
      exit 1
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/${port}") 2>/dev/null; then
      return 0
    fi
    sleep 0.2
  done
  echo "conformance.sh: $name did not accept connections on port ${port} within 60 s" >&2
  exit 1
}

if [[ -z "$url" ]]; then
  if [[ "$server" == "gateway" ]]; then
    # The retrofit fixture without its layer (a server with no tasks support at all)
    # as the upstream, and the gateway in front of it.
    log "building the conformance_retrofit example and the gateway"
    cargo build --quiet --example conformance_retrofit >&2
    cargo build --quiet -p mcp-tasks-gateway >&2
    upstream_port="$(free_port)"
    start_example conformance_retrofit "$upstream_port" "$results/upstream.log" MCP_PLAIN=1
    port="$(free_port)"
    start_example gateway "$port" "$results/server.log" \
      MCP_UPSTREAM="http://127.0.0.1:${upstream_port}/mcp" MCP_TASK_REQUIRED_TOOLS=failing_job \
      MCP_PRINCIPAL=header MCP_PRINCIPAL_HEADER=authorization
  elif [[ "$server" == "federated" ]]; then
    # The fixture with its own TasksLayer as the upstream, and the gateway in front of
    # it carrying the fixture's tasks (MCP_UPSTREAM_TASKS, on by default).
    log "building the conformance_server example and the gateway"
    cargo build --quiet --example conformance_server >&2
    cargo build --quiet -p mcp-tasks-gateway >&2
    upstream_port="$(free_port)"
    start_example conformance_server "$upstream_port" "$results/upstream.log"
    port="$(free_port)"
    start_example gateway "$port" "$results/server.log" \
      MCP_UPSTREAM="http://127.0.0.1:${upstream_port}/mcp" MCP_UPSTREAM_TASKS=on \
      MCP_TASK_HANDLE_KEY="conformance-federated-handle-key-0123456789" \
      MCP_PRINCIPAL=header MCP_PRINCIPAL_HEADER=authorization
  else
    log "building the $server example"
    cargo build --quiet --example "$server" >&2
    port="$(free_port)"
    start_example "$server" "$port" "$results/server.log"
  fi
  url="http://127.0.0.1:${port}/mcp"
fi

# --- the expected-failures baseline ----------------------------------------------------------
declare -A expected=()
if [[ -f "$baseline" ]]; then
  while IFS= read -r line || [[ -n "$line" ]]; do
    line="${line%%#*}"
    line="$(echo "$line" | tr -d '[:space:]')"
    [[ -z "$line" ]] && continue
    if [[ "$line" != *:* ]]; then
      echo "conformance.sh: $baseline: '$line' is not 'scenario:check-id'" >&2
      exit 2
    fi
    expected["$line"]=1
  done <"$baseline"
fi

# Prints "passed failed warnings skipped" on the first line, then one failing check id per line.
summarize_checks() {
  "$NODE" -e '
    const checks = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    const count = (s) => checks.filter((c) => c.status === s).length;
    console.log([count("SUCCESS"), count("FAILURE"), count("WARNING"), count("SKIPPED")].join(" "));
    for (const c of checks) if (c.status === "FAILURE") console.log(c.id);
  ' "$1"
}

# --- run ----------------------------------------------------------------------------------------
total_passed=0
total_unexpected=0
total_expected=0
rows=()
unexpected_list=()
expected_list=()
seen_failures=()

for scenario in "${scenarios[@]}"; do
  dir="$results/$scenario"
  rm -rf "$dir"
  mkdir -p "$dir"
  log "running $scenario"
  set +e
  timeout --kill-after=10 "$scenario_timeout" \
    "$NODE" "$CLI" server --url "$url" --scenario "$scenario" \
    --spec-version "$SPEC_VERSION" --force -o "$dir" \
    >"$dir/suite.stdout.txt" 2>"$dir/suite.stderr.txt"
  rc=$?
  set -e
  checks="$(find "$dir" -name checks.json -type f | sort | tail -n 1)"
  if [[ -z "$checks" ]]; then
    rows+=("$(printf '%-48s %6s %6s %8s %7s  %s' "$scenario" 0 1 0 0 "no checks.json (suite exit $rc)")")
    unexpected_list+=("$scenario:(no checks.json, suite exit $rc)")
    total_unexpected=$((total_unexpected + 1))
    continue
  fi
  mapfile -t summary < <(summarize_checks "$checks" || true)
  if [[ ${#summary[@]} -eq 0 ]]; then
    rows+=("$(printf '%-48s %6s %6s %8s %7s  %s' "$scenario" 0 1 0 0 "unreadable checks.json")")
    unexpected_list+=("$scenario:(unreadable checks.json)")
    total_unexpected=$((total_unexpected + 1))
    continue
  fi
  read -r passed failed warnings skipped <<<"${summary[0]}"
  note=""
  for id in "${summary[@]:1}"; do
    key="$scenario:$id"
    seen_failures+=("$key")
    if [[ -n "${expected[$key]:-}" ]]; then
      expected_list+=("$key")
      total_expected=$((total_expected + 1))
    else
      unexpected_list+=("$key")
      total_unexpected=$((total_unexpected + 1))
      note="UNEXPECTED FAILURE"
    fi
  done
  if [[ -z "$note" && $failed -gt 0 ]]; then
    note="expected failures only"
  fi
  total_passed=$((total_passed + passed))
  rows+=("$(printf '%-48s %6s %6s %8s %7s  %s' "$scenario" "$passed" "$failed" "$warnings" "$skipped" "$note")")
done

# --- report -------------------------------------------------------------------------------------
echo
printf '%-48s %6s %6s %8s %7s\n' scenario passed failed warnings skipped
printf '%s\n' "$(printf '%.0s-' $(seq 1 80))"
printf '%s\n' "${rows[@]}"
echo

if [[ ${#expected_list[@]} -gt 0 ]]; then
  echo "Expected failures (listed in $baseline):"
  printf '  ~ %s\n' "${expected_list[@]}"
fi
stale=()
for key in "${!expected[@]}"; do
  scenario="${key%%:*}"
  ran=0
  for s in "${scenarios[@]}"; do [[ "$s" == "$scenario" ]] && ran=1; done
  [[ $ran -eq 1 ]] || continue
  found=0
  for f in "${seen_failures[@]:-}"; do [[ "$f" == "$key" ]] && found=1; done
  [[ $found -eq 1 ]] || stale+=("$key")
done
if [[ ${#stale[@]} -gt 0 ]]; then
  echo "Baseline entries that no longer fail (remove them from $baseline):"
  printf '  + %s\n' "${stale[@]}"
fi
if [[ ${#unexpected_list[@]} -gt 0 ]]; then
  echo "Unexpected failures:"
  printf '  x %s\n' "${unexpected_list[@]}"
fi
echo "Results: $results"
echo "expected failures: $total_expected (see $baseline)"
echo "$total_passed passed, $((total_unexpected + total_expected)) failed"

if [[ $total_unexpected -gt 0 ]]; then
  exit 1
fi
exit 0
