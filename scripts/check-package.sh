#!/usr/bin/env bash
# Checks what `cargo publish` would ship, and that CI builds at the declared MSRV.
#
# 1. `cargo package --list --allow-dirty` must not list the conformance harness
#    (package.json, package-lock.json, scripts/, node_modules/, conformance-results/),
#    CI files (.ci/), tests/, benches/, target/, or the repository's own notes
#    (public-api.txt, ARCHITECTURE.md, CONFORMANCE.md), and must list LICENSE-MIT and
#    LICENSE-APACHE (the manifest says `MIT OR Apache-2.0`).
# 2. The manifest's `rust-version` must be the running compiler's major.minor: this
#    machine has one toolchain, so CI builds at the MSRV and the declared MSRV is true
#    only while the two agree.
#
# Exit status: 0 when both hold, 1 otherwise (the offending lines are printed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

status=0

# --- 1. packaged files -------------------------------------------------------------
err="$(mktemp)"
trap 'rm -f "$err"' EXIT
# --offline keeps this off the network; retry online only if cargo needs the index.
if ! listing="$(cargo package --list --allow-dirty --offline -p mcp-tasks 2>"$err")" &&
  ! listing="$(cargo package --list --allow-dirty -p mcp-tasks 2>"$err")"; then
  cat "$err" >&2
  echo "check-package: cargo package --list failed" >&2
  exit 1
fi

count="$(printf '%s\n' "$listing" | grep -c . || true)"
echo "cargo package --list: $count files"
printf '%s\n' "$listing" | sed 's/^/  /'

forbidden='^(package-lock\.json|package\.json|scripts/|\.ci/|tests/|benches/|target/|conformance-results/|node_modules/|public-api\.txt|ARCHITECTURE\.md|CONFORMANCE\.md)'
if offending="$(printf '%s\n' "$listing" | grep -E "$forbidden")"; then
  echo "check-package: the package ships files it must not:" >&2
  printf '%s\n' "$offending" | sed 's/^/  /' >&2
  status=1
fi
for license in LICENSE-MIT LICENSE-APACHE; do
  if ! printf '%s\n' "$listing" | grep -qx "$license"; then
    echo "check-package: the package does not ship $license" >&2
    status=1
  fi
done

# --- 2. rust-version against the compiler ------------------------------------------
declared="$(cargo metadata --no-deps --format-version 1 --offline | python3 -c '
import json, sys
meta = json.load(sys.stdin)
pkg = next(p for p in meta["packages"] if p["name"] == "mcp-tasks")
print(pkg.get("rust_version") or "")
')"
compiler="$(rustc --version)"
running="$(printf '%s\n' "$compiler" | sed -nE 's/^rustc ([0-9]+\.[0-9]+)\.[0-9]+.*/\1/p')"
echo "rust-version (Cargo.toml): ${declared:-<none>}"
echo "compiler: $compiler"
if [[ -z "$declared" ]]; then
  echo "check-package: Cargo.toml declares no rust-version" >&2
  status=1
elif [[ -z "$running" ]]; then
  echo "check-package: cannot read a version from: $compiler" >&2
  status=1
else
  declared_mm="$(printf '%s\n' "$declared" | cut -d. -f1,2)"
  if [[ "$declared_mm" != "$running" ]]; then
    echo "check-package: rust-version $declared is not the CI compiler's $running;" \
      "CI must build at the declared MSRV (update rust-version or the toolchain)" >&2
    status=1
  else
    echo "rust-version $declared_mm = compiler $running"
  fi
fi

exit "$status"
