#!/usr/bin/env bash
# Interop through the gateway: the official TypeScript SDK v2 client
# (@modelcontextprotocol/client, pinned in package.json) on protocol 2026-07-28 runs
# scripts/interop/gateway-v2.mjs against the gateway (mcp-tasks-gateway) in front of
#   everything   @modelcontextprotocol/server-everything (2025-11-25, sessions): the
#                gateway's era bridge;
#   conformance  the conformance_server fixture served without its layer (MCP_PLAIN=1,
#                2026-07-28): the gateway passes requests through.
# Each run lists tools, resources and prompts, reads a resource, gets a prompt, calls a
# tool with progress, and answers an elicitation and a sampling request through the
# client's handlers; the client checks every message against its 2026-07-28 schemas.
# The everything run then runs scripts/interop/gateway-research.mjs too: the SDK v2
# requester with @modelcontextprotocol/ext-tasks follows server-everything's own task
# (simulate-research-query, which asks a clarification) as a 2026-07-28 task.
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

OUT="$ROOT/target/interop-gateway"
mkdir -p "$OUT"
# SIGTERM drains the servers; they get 10.0 s before SIGKILL.
STOP_GRACE_TENTHS=100
. "$ROOT/scripts/interop/lib.sh"
ensure_node

trap stop_all EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

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
    MCP_PRINCIPAL=header MCP_PRINCIPAL_HEADER=authorization \
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

# The upstream's own task through the gateway (server-everything only).
research() {
  MCP_URL="$url" "$NODE" "$ROOT/scripts/interop/gateway-research.mjs" &
  pids+=("$!")
  wait "$!"
}

run_everything() {
  start_everything upstream || return 1
  start_gateway everything || return 1
  client everything || return 1
  log "everything: the upstream's own task (gateway-research.mjs)"
  research
}

run_conformance() {
  start_conformance || return 1
  start_gateway conformance || return 1
  client conformance
}

# The executables of the gateway and the example, built in one cargo run.
log "building the gateway and the conformance_server example"
built="$(cargo build --quiet -p mcp-tasks-gateway --bin mcp-tasks-gateway -p mcp-tasks --example conformance_server \
  --message-format=json-render-diagnostics | "$NODE" -e '
    const exes = {};
    require("readline").createInterface({ input: process.stdin }).on("line", (line) => {
      const m = JSON.parse(line);
      if (m.reason === "compiler-artifact" && m.executable) exes[m.target?.name] = m.executable;
    }).on("close", () => {
      if (!exes["mcp-tasks-gateway"] || !exes.conformance_server) process.exit(1);
      console.log(exes["mcp-tasks-gateway"]);
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
