#!/usr/bin/env bash
# Interop on the 2025-11-25 Tasks wire: the official TypeScript SDK v1 client
# (@modelcontextprotocol/sdk, `client.experimental.tasks`; version pinned in
# package.json) runs scripts/interop/sdk-v1.mjs against
#   everything  @modelcontextprotocol/server-everything (the SDK's own server side: the
#               reference for scripts/interop/SDK-V1-WIRE.md);
#   memory      the quickstart example on the memory store;
#   redis       two quickstart processes on one Redis (REDIS_URL, a fresh key prefix);
#   postgres    two quickstart processes on one PostgreSQL (DATABASE_URL, a fresh table);
#   retrofit    the retrofit example: a plain rmcp server whose tools are all
#               `TaskMode::Auto` (tasks made by the layer alone), on the memory store.
# Every run goes ahead; the script fails if any failed. Servers listen on 127.0.0.1
# only and are stopped by PID. Logs and wire transcripts: target/interop-v1/.
#
# Usage: bash scripts/interop-v1.sh [--only everything|memory|redis|postgres|retrofit]...
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
log() { printf '[interop-v1] %s\n' "$*" >&2; }

runs=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --only)
      case "${2:-}" in
        everything | memory | redis | postgres | retrofit) runs+=("$2") ;;
        *) echo "interop-v1.sh: --only takes everything, memory, redis, postgres or retrofit" >&2; exit 2 ;;
      esac
      shift 2
      ;;
    *) echo "usage: bash scripts/interop-v1.sh [--only everything|memory|redis|postgres|retrofit]..." >&2; exit 2 ;;
  esac
done
[[ ${#runs[@]} -gt 0 ]] || runs=(everything memory redis postgres retrofit)

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"

OUT="$ROOT/target/interop-v1"
mkdir -p "$OUT"
# SIGTERM drains the servers; they get 15.0 s before SIGKILL.
STOP_GRACE_TENTHS=150
. "$ROOT/scripts/interop/lib.sh"
ensure_node

# The scratch Redis prefixes and PostgreSQL tables of the runs, removed at exit.
prefixes=()
tables=()
drop_scratch() {
  local prefix table
  for prefix in "${prefixes[@]}"; do
    redis-cli -u "$REDIS_URL" --scan --pattern "${prefix}*" |
      xargs -r redis-cli -u "$REDIS_URL" DEL >/dev/null || true
  done
  for table in "${tables[@]}"; do
    psql -q "$DATABASE_URL" -c "SET lock_timeout = '5s'; DROP TABLE IF EXISTS \"$table\", \"${table}_leases\", \"${table}_lease_holds\", \"${table}_feed\", \"${table}_counts\"; DROP FUNCTION IF EXISTS \"${table}_feed_fn\"()" \
      >/dev/null || true
  done
}
finish() {
  stop_all
  drop_scratch
}
trap finish EXIT
# A signal ends the script at once (the clients run in the background and are waited
# for, so that it is not held up until they end), and the EXIT trap stops everything.
trap 'exit 143' TERM
trap 'exit 130' INT

random_hex() { od -An -tx1 -N6 /dev/urandom | tr -d ' \n'; }

# One quickstart process named $1 (its log: $OUT/$1.log), with the store settings
# given as further NAME=VALUE arguments, on 127.0.0.1 and a port the OS picks; sets
# `url` from the address it prints.
start_quickstart() {
  start_example "$QUICKSTART" "$@"
}

# The same, for the example whose executable is $1.
start_example() {
  local exe="$1" name="$2" logfile="$OUT/$2.log" pid
  shift 2
  env "$@" MCP_ADDR=127.0.0.1:0 RUST_LOG="${RUST_LOG:-info,mcp_tasks=debug}" "$exe" \
    </dev/null >"$logfile" 2>&1 &
  pid=$!
  pids+=("$pid")
  await_line "$pid" "$logfile" 'listening on http://' || return 1
  url="$(printed_url "$logfile")"
  log "$name: $url (pid $pid)"
}

sdk_v1() {
  local name="$1"
  shift
  "$NODE" "$ROOT/scripts/interop/sdk-v1.mjs" --wire "$OUT/$name.wire.txt" "$@" &
  pids+=("$!")
  wait "$!"
}

run_everything() {
  start_everything url || return 1
  log "everything: $url"
  sdk_v1 everything --target everything --url "$url"
}

run_memory() {
  start_quickstart memory MCP_STORE=memory || return 1
  sdk_v1 memory --target quickstart --a "$url"
}

run_retrofit() {
  start_example "$RETROFIT" retrofit MCP_STORE=memory || return 1
  sdk_v1 retrofit --target retrofit --url "$url"
}

run_redis() {
  local prefix a b
  prefix="mcp-tasks-interop-v1:$(random_hex):"
  prefixes+=("$prefix")
  start_quickstart redis-a MCP_STORE="$REDIS_URL" MCP_STORE_PREFIX="$prefix" || return 1
  a="$url"
  start_quickstart redis-b MCP_STORE="$REDIS_URL" MCP_STORE_PREFIX="$prefix" || return 1
  b="$url"
  sdk_v1 redis --target quickstart --a "$a" --b "$b"
}

run_postgres() {
  local table a b
  table="interop_v1_$(random_hex)"
  tables+=("$table")
  # One after the other: the first migrates the fresh table.
  start_quickstart postgres-a MCP_STORE="$DATABASE_URL" MCP_STORE_TABLE="$table" || return 1
  a="$url"
  start_quickstart postgres-b MCP_STORE="$DATABASE_URL" MCP_STORE_TABLE="$table" || return 1
  b="$url"
  sdk_v1 postgres --target quickstart --a "$a" --b "$b"
}

if [[ " ${runs[*]} " != " everything " ]]; then
  log "building the quickstart and retrofit examples (features postgres, redis)"
  built="$(cargo build --quiet --example quickstart --example retrofit --features postgres,redis \
    --message-format=json-render-diagnostics | "$NODE" -e '
      const exes = {};
      require("readline").createInterface({ input: process.stdin }).on("line", (line) => {
        const m = JSON.parse(line);
        if (m.reason === "compiler-artifact" && m.executable) exes[m.target?.name] = m.executable;
      }).on("close", () => {
        if (!exes.quickstart || !exes.retrofit) process.exit(1);
        console.log(`${exes.quickstart}\n${exes.retrofit}`);
      });')"
  QUICKSTART="$(sed -n 1p <<<"$built")"
  RETROFIT="$(sed -n 2p <<<"$built")"
fi

log "@modelcontextprotocol/sdk $("$NODE" -p 'require("./node_modules/@modelcontextprotocol/sdk/package.json").version'), server-everything $("$NODE" -p 'require("./node_modules/@modelcontextprotocol/server-everything/package.json").version')"
failed=()
for run in "${runs[@]}"; do
  log "== $run"
  if "run_$run"; then
    log "== $run: passed"
  else
    log "== $run: FAILED (logs and wire transcript: $OUT/)"
    failed+=("$run")
  fi
  stop_all
done

if [[ ${#failed[@]} -gt 0 ]]; then
  log "failed: ${failed[*]}"
  exit 1
fi
log "all passed: ${runs[*]}"
