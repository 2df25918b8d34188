#!/usr/bin/env bash
# Install what the scripts need and a fresh Debian machine may lack. Idempotent and quiet.
set -euo pipefail

missing=()
command -v curl >/dev/null || missing+=(curl)
command -v openssl >/dev/null || missing+=(openssl)
# Debian's kubectl is 1.20, the test apiserver's own version.
command -v kubectl >/dev/null || missing+=(kubernetes-client)
if [ "${1:-}" = --tests ]; then
  # The page test loads the control plane's page in a real browser; the store suite runs on PostgreSQL.
  command -v chromium >/dev/null || missing+=(chromium)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
  # A real TLS-terminating reverse proxy in front of the control plane (--public-url).
  [ -x /usr/sbin/nginx ] || command -v nginx >/dev/null || missing+=(nginx-light)
  # A real OpenID Provider (npm's oidc-provider, pinned by tests/support/oidc_provider's lock)
  # signs people in; Debian's nodejs runs it. A node that came with its own npm keeps it.
  # `wsync workspaces ssh` runs OpenSSH's client, to a workspace's own sshd.
  command -v ssh >/dev/null || missing+=(openssh-client)
  command -v node >/dev/null || missing+=(nodejs)
  command -v npm >/dev/null || missing+=(npm)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO=sudo; fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "error: cargo (rustup) is required" >&2; exit 1; }
command -v rustfmt >/dev/null || rustup component add rustfmt
cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
if [ "${1:-}" = --tests ] && [ ! -d "$(dirname "$0")/../tests/support/oidc_provider/node_modules/oidc-provider" ]; then
  (cd "$(dirname "$0")/../tests/support/oidc_provider" && npm ci --no-audit --no-fund --loglevel=error)
fi
