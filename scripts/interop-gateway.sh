#!/usr/bin/env bash
# Interop through the gateway: the official TypeScript SDK v2 client
# (@modelcontextprotocol/client, pinned in package.json) on protocol 2026-07-28 runs
# scripts/interop/gateway-v2.mjs against examples/gateway/ in front of
#   everything   @modelcontextprotocol/server-everything (2025-11-25, sessions): the
#                gateway's era bridge;
#   conformance  the conformance_server fixture served without its layer (MCP_PLAIN=1,
#                2026-07-28): the gateway passes requests through.
# Each run lists tools, resources and prompts, reads a resource, gets a prompt, calls a
# tool with progress, and answers an elicitation and a sampling request through the
# client's handlers; the client checks every message against its 2026-07-28 schemas.
# Every run goes ahead; the script fails if any failed. Servers listen on 127.0.0.1
# only and are stopped by PID. Logs: target/interop-gateway/.
#
# Usage: bash scripts/interop-gateway.sh [--only everything|conformance]...
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
log() { printf '[interop-gateway] %s\n' "$*" >&2; }

runs=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --only)
      case "${2:-}" in
        everything | conformance) runs+=("$2") ;;
        *) echo "interop-gateway.sh: --only takes everything or conformance" >&2; exit 2 ;;
      esac
      shift 2
      ;;
    *) echo "usage: bash scripts/interop-gateway.sh [--only everything|conformance]..." >&2; exit 2 ;;
  esac
done
[[ ${#runs[@]} -gt 0 ]] || runs=(everything conformance)

NODE="$ROOT/node_modules/node/bin/node"
stamp="$ROOT/node_modules/.package-lock.json"
if [[ ! -x "$NODE" || ! -f "$stamp" || "$ROOT/package-lock.json" -nt "$stamp" ]]; then
  log "installing the pinned packages and Node 22 (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error >&2
fi
EVERYTHING="$ROOT/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
OUT="$ROOT/target/interop-gateway"
mkdir -p "$OUT"

# Processes started by this script, stopped at exit (and after each run) by PID.
pids=()
stop() {
  local pid="$1"
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  # The gateway drains for up to 5 s on SIGTERM; then it is killed.
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
stop_all() {
  for pid in "${pids[@]}"; do stop "$pid"; done
  pids=()
}
trap stop_all EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

free_port() {
  "$NODE" -e '
    const s = require("net").createServer();
    s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

# Waits until `pattern` shows in the log of the process `pid` (each server prints it
# once it listens), within 60 s; fails if the process exits first.
await_line() {
  local pid="$1" logfile="$2" pattern="$3"
  for _ in $(seq 1 600); do
    if grep -qE "$pattern" "$logfile" 2>/dev/null; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      log "a server exited during startup; its log ($logfile):"
      tail -n 40 "$logfile" >&2 || true
      return 1
    fi
    sleep 0.1
  done
  log "no '$pattern' within 60 s in $logfile"
  return 1
}

# The URL a server printed as `… listening on http://…/mcp` in its log.
printed_url() {
  grep -m1 -oE 'listening on http://[^ ]+/mcp' "$1" | sed 's/^listening on //'
}

# server-everything with streamableHttp on a free port (127.0.0.1 through the preload);
# sets `upstream`.
start_everything() {
  local port logfile="$OUT/everything.log"
  port="$(free_port)"
  PORT="$port" "$NODE" --import "$ROOT/scripts/interop/loopback.mjs" "$EVERYTHING" streamableHttp \
    </dev/null >"$logfile" 2>&1 &
  pids+=("$!")
  await_line "$!" "$logfile" "listening on port $port" || return 1
  upstream="http://127.0.0.1:${port}/mcp"
}

# The conformance fixture without its layer, on a port the OS picks; sets `upstream`.
start_conformance() {
  local logfile="$OUT/conformance.log"
  MCP_PLAIN=1 MCP_ADDR=127.0.0.1:0 RUST_LOG=warn "$CONFORMANCE" </dev/null >"$logfile" 2>&1 &
  pids+=("$!")
  await_line "$!" "$logfile" 'listening on http://' || return 1
  upstream="$(printed_url "$logfile")"
}

# The gateway in front of `upstream`, on a port the OS picks; sets `url`.
start_gateway() {
  local name="$1" logfile="$OUT/$1.gateway.log"
  MCP_UPSTREAM="$upstream" MCP_ADDR=127.0.0.1:0 RUST_LOG="${RUST_LOG:-info,mcp_tasks=debug}" \
    "$GATEWAY" </dev/null >"$logfile" 2>&1 &
  pids+=("$!")
  await_line "$!" "$logfile" 'listening on http://' || return 1
  url="$(printed_url "$logfile")"
  log "$name: gateway $url (pid $!) in front of $upstream"
}

client() {
  MCP_URL="$url" MCP_TARGET="$1" "$NODE" "$ROOT/scripts/interop/gateway-v2.mjs" &
  pids+=("$!")
  wait "$!"
}

run_everything() {
  start_everything || return 1
  start_gateway everything || return 1
  client everything
}

run_conformance() {
  start_conformance || return 1
  start_gateway conformance || return 1
  client conformance
}

# The executables of the examples, built in one cargo run.
log "building the gateway and conformance_server examples"
built="$(cargo build --quiet --example gateway --example conformance_server \
  --message-format=json-render-diagnostics | "$NODE" -e '
    const exes = {};
    require("readline").createInterface({ input: process.stdin }).on("line", (line) => {
      const m = JSON.parse(line);
      if (m.reason === "compiler-artifact" && m.executable) exes[m.target?.name] = m.executable;
    }).on("close", () => {
      if (!exes.gateway || !exes.conformance_server) process.exit(1);
      console.log(exes.gateway);
      console.log(exes.conformance_server);
    });')"
GATEWAY="$(sed -n 1p <<<"$built")"
CONFORMANCE="$(sed -n 2p <<<"$built")"

log "@modelcontextprotocol/client $("$NODE" -p 'require("./node_modules/@modelcontextprotocol/client/package.json").version'), server-everything $("$NODE" -p 'require("./node_modules/@modelcontextprotocol/server-everything/package.json").version')"
failed=()
for run in "${runs[@]}"; do
  log "== $run"
  if "run_$run"; then
    log "== $run: passed"
  else
    log "== $run: FAILED (logs: $OUT/)"
    failed+=("$run")
  fi
  stop_all
done

if [[ ${#failed[@]} -gt 0 ]]; then
  log "failed: ${failed[*]}"
  exit 1
fi
log "all passed: ${runs[*]}"
