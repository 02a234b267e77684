#!/usr/bin/env bash
# Installs a tool the build or tests need when it is missing: with apt-get when running
# as root, otherwise one line that says what to install.
set -euo pipefail
need() { # command package
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "deps: installing $2 (apt-get)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq "$2" >/dev/null
    command -v "$1" >/dev/null 2>&1 && return 0
  fi
  echo "deps: $1 is missing: install the Debian package $2 (apt-get install $2)" >&2
  exit 1
}
# has_cryptography: a python3 that imports cryptography (Debian's python3-cryptography
# serves /usr/bin/python3, which another python3 earlier on PATH may not share).
has_cryptography() {
  local py
  for py in python3 /usr/bin/python3; do
    command -v "$py" >/dev/null 2>&1 && "$py" -c 'import cryptography' >/dev/null 2>&1 && return 0
  done
  return 1
}
need_cryptography() {
  has_cryptography && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "deps: installing python3-cryptography (apt-get)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq python3-cryptography >/dev/null
    has_cryptography && return 0
  fi
  echo "deps: python3's cryptography module is missing (the Python SDK signs with it): install the Debian package python3-cryptography (apt-get install python3-cryptography)" >&2
  exit 1
}
for tool in "$@"; do
  case "$tool" in
    redis-server) need redis-server redis-server ;;
    redis-sentinel) need redis-sentinel redis-sentinel ;;
    protoc) need protoc protobuf-compiler ;;
    bwrap) need bwrap bubblewrap ;;
    slirp4netns) need slirp4netns slirp4netns ;;
    ip) need ip iproute2 ;;
    chromium) need chromium chromium ;;
    python3-cryptography) need python3 python3; need_cryptography ;;
    *) echo "deps: unknown tool $tool" >&2; exit 2 ;;
  esac
done
