#!/usr/bin/env bash
# Installs redis-server from Debian's packages for the Redlock row of the
# benchmark (go run ./bench -cases redlock). The benchmark starts and stops
# its own redis-server processes on free loopback ports; it needs only the
# binary. Idempotent: does nothing when redis-server is already on PATH.
# Runs as root, or through sudo when it is available.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
	echo "install-redis: already installed: $(command -v redis-server) ($(redis-server --version))"
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-redis: apt-get not found; install redis-server with your system's package manager" >&2
	exit 1
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO="sudo"
	else
		echo "install-redis: not root and no sudo: run as root" >&2
		exit 1
	fi
fi

echo "install-redis: apt-get update"
$SUDO apt-get update -qq
echo "install-redis: apt-get install redis-server"
# The package's service is not needed (the benchmark runs its own servers);
# where there is no init system its start fails harmlessly.
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null

# The Debian package may start a system redis on port 6379 where an init
# system runs; the benchmark does not use it. Stop it so that it does not
# keep a core busy on a benchmark machine.
if command -v service >/dev/null 2>&1; then
	$SUDO service redis-server stop >/dev/null 2>&1 && echo "install-redis: stopped the system redis-server service (the benchmark starts its own)" || true
fi

echo "install-redis: installed $(command -v redis-server) ($(redis-server --version))"
