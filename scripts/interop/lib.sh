# What the interop scripts share (sourced; the script sets ROOT, OUT and log()):
# the pinned Node 22 and packages, the processes they start (stopped by PID), a
# free loopback port, waiting for a server's "listening" line, and server-everything.

NODE="$ROOT/node_modules/node/bin/node"
EVERYTHING="$ROOT/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

# Installs the pinned packages and Node 22 when node_modules is missing or older
# than package-lock.json.
ensure_node() {
  local stamp="$ROOT/node_modules/.package-lock.json"
  if [[ ! -x "$NODE" || ! -f "$stamp" || "$ROOT/package-lock.json" -nt "$stamp" ]]; then
    log "installing the pinned packages and Node 22 (npm ci)"
    npm ci --no-audit --no-fund --loglevel=error >&2
  fi
}

# Processes started by the script, stopped at exit (and after each run) by PID:
# SIGTERM, up to STOP_GRACE_TENTHS tenths of a second to drain, then SIGKILL.
pids=()
STOP_GRACE_TENTHS="${STOP_GRACE_TENTHS:-100}"
stop() {
  local pid="$1"
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 "$STOP_GRACE_TENTHS"); do
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

# server-everything with streamableHttp on a free port (127.0.0.1 through the
# preload); sets the variable named $1 to its URL. (Not in a subshell: its PID
# must reach `pids`.)
start_everything() {
  local port logfile="$OUT/everything.log"
  port="$(free_port)"
  PORT="$port" "$NODE" --import "$ROOT/scripts/interop/loopback.mjs" "$EVERYTHING" streamableHttp \
    </dev/null >"$logfile" 2>&1 &
  pids+=("$!")
  await_line "$!" "$logfile" "listening on port $port" || return 1
  printf -v "$1" 'http://127.0.0.1:%s/mcp' "$port"
}
