#!/usr/bin/env bash
# Interop with the official TypeScript requester: @modelcontextprotocol/ext-tasks and
# @modelcontextprotocol/client (versions pinned in package.json) drive the quickstart
# example through scripts/interop/ext-tasks.mjs: a task tool followed by listen and by
# polling, a question answered, a cancel, a resume from a serialized reference.
#
# Usage: bash scripts/interop.sh [--url URL]   (default: build and start the quickstart)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
log() { printf '[interop] %s\n' "$*" >&2; }

url=""
case "${1:-}" in
  --url) url="${2:?--url needs a URL}" ;;
  "") ;;
  *) echo "usage: bash scripts/interop.sh [--url URL]" >&2; exit 2 ;;
esac

NODE="$ROOT/node_modules/node/bin/node"
stamp="$ROOT/node_modules/.package-lock.json"
if [[ ! -x "$NODE" || ! -f "$stamp" || "$ROOT/package-lock.json" -nt "$stamp" ]]; then
  log "installing the pinned packages and Node 22 (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error >&2
fi

pid=""
stop() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
}
trap stop EXIT

if [[ -z "$url" ]]; then
  log "building the quickstart example"
  cargo build --quiet --example quickstart >&2
  port="$("$NODE" -e '
    const s = require("net").createServer();
    s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });')"
  mkdir -p target/interop
  MCP_ADDR="127.0.0.1:${port}" RUST_LOG=warn cargo run --quiet --example quickstart \
    >target/interop/quickstart.log 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "interop.sh: the quickstart exited during startup; its log:" >&2
      tail -n 50 target/interop/quickstart.log >&2 || true
      exit 1
    fi
    (exec 3<>"/dev/tcp/127.0.0.1/${port}") 2>/dev/null && break
    sleep 0.2
  done
  url="http://127.0.0.1:${port}/mcp"
fi

log "ext-tasks $("$NODE" -p 'require("./node_modules/@modelcontextprotocol/ext-tasks/package.json").version'), client $("$NODE" -p 'require("./node_modules/@modelcontextprotocol/client/package.json").version') against $url"
MCP_URL="$url" "$NODE" scripts/interop/ext-tasks.mjs
