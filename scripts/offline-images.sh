#!/usr/bin/env bash
# offline-images.sh — seed the local Docker image store so that the project's
# docker-compose.yml and deploy/docker/Dockerfile build and run WITHOUT any
# container registry (no `docker pull`). Everything is made from Debian's
# packages (debootstrap + apt on the host), the host's Go toolchain and the Go
# module proxy. See docs/containers.md.
#
# Images it provides (all single-arch, the host's):
#   debian:bookworm-slim           minbase Debian rootfs (runtime base of every service image)
#   golang:<go-minor>-bookworm     that rootfs + gcc/git/ca-certificates + the host's /usr/local/go,
#                                  with this repo's Go modules pre-downloaded into /go/pkg/mod
#   hero-runtime-python:bookworm   debian:bookworm-slim + python3 + bubblewrap (runner base when containers
#                                  cannot reach a Debian mirror: build arg RUNNER_BASE)
#   redis:7-bookworm               Debian's redis-server, official-image conventions
#   prom/prometheus:v2.42.0        Debian's prometheus + promtool, official-image conventions
# and, when missing, the Docker CLI plugins `docker compose` (v2) and `docker buildx`,
# built from the Go module proxy.
#
# Idempotent: an image that is present is left alone (an image of the same name that this
# script did not make is never touched); --force rebuilds the ones this script makes.
# The debootstrap result is cached (see --cache-dir), so a forced rebuild does not
# debootstrap again (use --refresh for that); so are the plugins, by version, and the
# compiled packages of their build (an interrupted build resumes where it was).
# Every step prints its elapsed time; a long one (debootstrap, apt, a plugin's build)
# prints a line of progress every $HERO_OFFLINE_HEARTBEAT seconds (default 15).
set -euo pipefail

usage() {
	cat <<'EOF'
usage: scripts/offline-images.sh [options]

  --force            rebuild every image this script makes, even if present
  --refresh          also re-run debootstrap (newer Debian packages); implies --force
  --no-plugins       do not build/install the docker compose / docker buildx CLI plugins
  --no-buildx        do not build/install the docker buildx plugin
  --skip-gomod       do not (re)seed the Go module cache in the golang image
  --cache-dir DIR    cache directory (default: $HERO_OFFLINE_CACHE, else /var/cache/hero-offline
                     as root, else ${XDG_CACHE_HOME:-~/.cache}/hero-offline)
  --list             print the image names this script provides and exit
  -h, --help         this help

environment: HERO_DEBIAN_MIRROR, HERO_DEBIAN_SECURITY_MIRROR (default: read from
/etc/apt/sources.list*), HERO_GOROOT (default: `go env GOROOT`),
COMPOSE_VERSION (v2.40.3), BUILDX_VERSION (v0.29.1).
Needs root (debootstrap, chroot) — run with sudo if not root.
EOF
}

# ---------------------------------------------------------------- settings
SUITE=bookworm
COMPOSE_VERSION=${COMPOSE_VERSION:-v2.40.3}   # last github.com/docker/compose/v2 release; v5 needs engine API >= 1.44
BUILDX_VERSION=${BUILDX_VERSION:-v0.29.1}     # the buildx compose v2.40.3 is built against; >= v0.30 needs API >= 1.44
PROMETHEUS_TAG=v2.42.0                        # the version Debian bookworm ships
LABEL=org.hero-coordinator.offline            # value: recipe id; marks images this script made
GOMOD_LABEL=org.hero-coordinator.gomod        # value: hash of the repo's go.work/go.mod/go.sum files

# Bump a recipe's version when its recipe changes: images with an older value are rebuilt.
R_DEBIAN=debian-slim-1
R_PYTHON=runtime-python-2
R_REDIS=redis-1
R_PROM=prometheus-2
R_GOLANG=golang-1   # + the Go version, appended below

FORCE=0 REFRESH=0 PLUGINS=1 BUILDX=1 GOMOD=1 LIST=0 CACHE_DIR=${HERO_OFFLINE_CACHE:-}
while [ $# -gt 0 ]; do
	case "$1" in
	--force) FORCE=1 ;;
	--refresh) FORCE=1 REFRESH=1 ;;
	--no-plugins) PLUGINS=0 ;;
	--no-buildx) BUILDX=0 ;;
	--skip-gomod) GOMOD=0 ;;
	--cache-dir) CACHE_DIR=$2; shift ;;
	--cache-dir=*) CACHE_DIR=${1#*=} ;;
	--list) LIST=1 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
	esac
	shift
done

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# sudo's secure_path usually lacks Go
if ! command -v go >/dev/null; then
	for d in "${HERO_GOROOT:-}" /usr/local/go; do
		if [ -n "$d" ] && [ -x "$d/bin/go" ]; then PATH=$d/bin:$PATH; break; fi
	done
fi
GOROOT_HOST=${HERO_GOROOT:-$(go env GOROOT 2>/dev/null || echo /usr/local/go)}
GO_FULL=$(head -n1 "$GOROOT_HOST/VERSION" 2>/dev/null || true) # e.g. go1.26.8
GO_FULL=${GO_FULL#go}
GO_MINOR=$(echo "$GO_FULL" | cut -d. -f1,2)                     # e.g. 1.26

IMG_DEBIAN=debian:$SUITE-slim
IMG_GOLANG=golang:$GO_MINOR-$SUITE
IMG_GOLANG_BASE=hero-offline/golang-base:$GO_MINOR-$SUITE        # golang image without the module layer
IMG_PYTHON=hero-runtime-python:$SUITE
IMG_REDIS=redis:7-$SUITE
IMG_PROM=prom/prometheus:$PROMETHEUS_TAG
R_GOLANG=$R_GOLANG-go$GO_FULL

if [ "$LIST" = 1 ]; then
	printf '%s\n' "$IMG_DEBIAN" "$IMG_GOLANG" "$IMG_PYTHON" "$IMG_REDIS" "$IMG_PROM"
	exit 0
fi

if [ -z "$CACHE_DIR" ]; then
	if [ "$(id -u)" = 0 ]; then CACHE_DIR=/var/cache/hero-offline; else CACHE_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/hero-offline; fi
fi

T0=$(date +%s)
HEARTBEAT=${HERO_OFFLINE_HEARTBEAT:-15}
log() { printf '[offline-images %4ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
die() { printf 'offline-images: error: %s\n' "$*" >&2; exit 1; }
SUMMARY=()
REPLACED=() # ids of images being rebuilt: removed at the end if nothing uses them any more
did() { SUMMARY+=("$*"); log "$*"; }
# begin DESC: a step starts (took says how long it has run since).
STEP_T0=$T0
begin() { STEP_T0=$(date +%s); log "--> $*"; }
took() { echo "$(($(date +%s) - STEP_T0))s"; }

# run_watched DESC LOG COUNTER CMD...: runs CMD with its output in LOG and, while it runs,
# prints a line every $HEARTBEAT s: DESC, its elapsed time, what the function COUNTER
# says of LOG (or nothing for -) and LOG's last line. Returns CMD's status.
WATCHED=
run_watched() {
	local desc=$1 logf=$2 counter=$3 t0 n=0 rc=0 last count
	shift 3
	t0=$(date +%s)
	"$@" >"$logf" 2>&1 &
	WATCHED=$!
	while kill -0 "$WATCHED" 2>/dev/null; do
		sleep 1
		n=$((n + 1))
		if [ $((n % HEARTBEAT)) = 0 ] && kill -0 "$WATCHED" 2>/dev/null; then
			count=
			[ "$counter" = - ] || count=", $("$counter" "$logf")"
			last=$(tail -n 1 "$logf" 2>/dev/null | tr -d '\r' | cut -c1-60)
			log "       $desc: $(($(date +%s) - t0))s$count${last:+ (last: $last)}"
		fi
	done
	wait "$WATCHED" || rc=$?
	WATCHED=
	return "$rc"
}
# stop_watched ends a watched command the script leaves (interrupted): a background
# command of a script ignores the terminal's Ctrl-C.
stop_watched() { if [ -n "$WATCHED" ]; then kill "$WATCHED" 2>/dev/null || true; fi; }
trap stop_watched EXIT

# ---------------------------------------------------------------- preflight
[ -n "$GO_FULL" ] || die "no Go toolchain found (set HERO_GOROOT); need Go at $GOROOT_HOST"
command -v docker >/dev/null || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "cannot talk to the Docker daemon (is it running? are you in the docker group?)"
[ "$(id -u)" = 0 ] || die "must run as root (debootstrap and chroot need it): sudo $0 $*"
mkdir -p "$CACHE_DIR"

# Debian mirrors: what the host's apt uses (deb822 *.sources and one-line sources.list).
detect_mirrors() {
	local uris
	uris=$(
		{
			cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs:[[:space:]]*//p' | tr ' ' '\n'
			cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
				sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\).*/\2/p'
		} | grep -E '^(https?|ftp)://' || true
	)
	MIRROR=${HERO_DEBIAN_MIRROR:-$(echo "$uris" | grep -v security | grep -E 'debian/?$' | head -n1)}
	SECURITY_MIRROR=${HERO_DEBIAN_SECURITY_MIRROR:-$(echo "$uris" | grep -E 'debian-security/?$' | head -n1)}
	MIRROR=${MIRROR:-http://deb.debian.org/debian}
	SECURITY_MIRROR=${SECURITY_MIRROR:-http://deb.debian.org/debian-security}
	MIRROR=${MIRROR%/} SECURITY_MIRROR=${SECURITY_MIRROR%/}
}
detect_mirrors

# image helpers
img_exists() { docker image inspect "$1" >/dev/null 2>&1; }
img_label() { docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true; }
img_id() { docker image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }
# need_build IMAGE RECIPE -> 0 when the image must be (re)built
need_build() {
	local img=$1 recipe=$2 have
	if ! img_exists "$img"; then return 0; fi
	REPLACED+=("$(img_id "$img")")
	have=$(img_label "$img" "$LABEL")
	if [ -z "$have" ] || [ "$have" = "<no value>" ]; then
		did "keep   $img (present, not made by this script)"
		return 1
	fi
	if [ "$FORCE" = 1 ]; then return 0; fi
	if [ "$have" != "$recipe" ]; then
		log "       $img has recipe $have, want $recipe: rebuilding"
		return 0
	fi
	did "keep   $img (present)"
	return 1
}

# ---------------------------------------------------------------- CLI plugins
if [ "$(id -u)" = 0 ]; then PLUGIN_DIR=/usr/local/lib/docker/cli-plugins; else PLUGIN_DIR=$HOME/.docker/cli-plugins; fi

# The plugins' builds: the Go build cache of their compiled packages lives in the cache
# directory (whatever HOME sudo gives), so that a build interrupted half way resumes.
PLUGIN_GOCACHE=$CACHE_DIR/go-build

# plugin_go SRC PKG OUT LDFLAGS: go build -v of PKG in the module copy SRC (-v names
# each package as it is compiled: the progress lines count them).
plugin_go() {
	(cd "$1" && GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local GOCACHE=$PLUGIN_GOCACHE \
		go build -v -trimpath -ldflags "-s -w $4" -o "$3" "$2")
}

# compiled LOG: how many packages go build -v has compiled so far, of PLUGIN_PKGS.
compiled() { echo "$(grep -c . "$1" || true) of $PLUGIN_PKGS packages compiled (those compiled by an earlier run are not)"; }

# build_plugin NAME MODULE VERSION PKG LDFLAGS: the plugin from the cache (by name and
# version), else built from the Go module proxy into the cache.
build_plugin() {
	local name=$1 mod=$2 ver=$3 pkg=$4 ldflags=$5 cached=$CACHE_DIR/bin/docker-$1-$3 dir src
	mkdir -p "$PLUGIN_DIR" "$CACHE_DIR/bin" "$PLUGIN_GOCACHE"
	if [ -x "$cached" ]; then
		did "plugin docker-$name $ver from the cache ($cached)"
	else
		begin "docker-$name $ver: download its module (go mod download)"
		# `go install mod/pkg@ver` refuses modules whose go.mod has replace/exclude
		# directives (both do), so build inside a copy of the module.
		dir=$(go mod download -json "$mod@$ver" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		[ -d "$dir" ] || die "go mod download $mod@$ver failed"
		src=$(mktemp -d)
		cp -r "$dir/." "$src/" && chmod -R u+w "$src"
		PLUGIN_PKGS=$(cd "$src" && GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local go list -deps "$pkg" 2>/dev/null | grep -c . || true)
		log "       downloaded in $(took); $PLUGIN_PKGS packages to build"
		begin "docker-$name $ver: go build (about 2-5 minutes on 2 cores the first time; log: $cached.log)"
		run_watched "docker-$name" "$cached.log" compiled plugin_go "$src" "$pkg" "$cached.tmp" "$ldflags" ||
			{ rm -rf "$src"; tail -n 30 "$cached.log" >&2; die "building docker-$name failed (log: $cached.log)"; }
		rm -rf "$src"
		mv "$cached.tmp" "$cached"
		did "built  docker-$name $ver in $(took) ($(grep -c . "$cached.log" || true) packages compiled; cached: $cached)"
		built_plugins=$((built_plugins + 1))
	fi
	install -m 0755 "$cached" "$PLUGIN_DIR/docker-$name"
	did "plugin docker-$name $ver -> $PLUGIN_DIR/docker-$name"
}

if [ "$PLUGINS" = 1 ]; then
	built_plugins=0
	if docker compose version >/dev/null 2>&1; then
		did "keep   docker compose ($(docker compose version --short 2>/dev/null))"
	else
		build_plugin compose github.com/docker/compose/v2 "$COMPOSE_VERSION" ./cmd \
			"-X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION"
	fi
	if [ "$BUILDX" = 1 ]; then
		if docker buildx version >/dev/null 2>&1; then
			did "keep   docker buildx ($(docker buildx version 2>/dev/null | awk '{print $2}'))"
		else
			build_plugin buildx github.com/docker/buildx "$BUILDX_VERSION" ./cmd/buildx \
				"-X github.com/docker/buildx/version.Version=$BUILDX_VERSION -X github.com/docker/buildx/version.Package=github.com/docker/buildx"
		fi
	fi
	# Both built: their compiled packages (1.5 GB) served only to resume an interrupted build.
	if [ -d "$PLUGIN_GOCACHE" ]; then
		rm -rf "$PLUGIN_GOCACHE"
		[ "$built_plugins" = 0 ] || log "       removed the plugins' Go build cache ($PLUGIN_GOCACHE)"
	fi
fi

# ---------------------------------------------------------------- rootfs work
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hero-offline.XXXXXX")
MOUNTS=()
cleanup() {
	local m i
	stop_watched
	for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
		m=${MOUNTS[$i]}
		umount -l "$m" 2>/dev/null || true
	done
	rm -rf --one-file-system "$WORK" 2>/dev/null || true
}
trap cleanup EXIT

BASE_TAR=$CACHE_DIR/rootfs/$SUITE-minbase.tar
APT_CACHE=$CACHE_DIR/apt-archives

# The slim conventions of the official debian:*-slim images.
slim_config() {
	local r=$1
	mkdir -p "$r/etc/dpkg/dpkg.cfg.d" "$r/etc/apt/apt.conf.d" "$r/etc/apt/sources.list.d"
	cat >"$r/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
# as in the official debian:*-slim images
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/man/*
EOF
	cat >"$r/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
	echo 'Acquire::Languages "none";' >"$r/etc/apt/apt.conf.d/docker-no-languages"
	echo 'Acquire::GzipIndexes "true";' >"$r/etc/apt/apt.conf.d/docker-gzip-indexes"
	printf 'APT::AutoRemove::SuggestsImportant "false";\n' >"$r/etc/apt/apt.conf.d/docker-autoremove-suggests"
	rm -f "$r/etc/apt/sources.list"
	cat >"$r/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
}

# Remove what the slim images do not carry, and host leftovers.
slim_clean() {
	local r=$1
	find "$r/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
	find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
	rm -rf "$r"/usr/share/{groff,info,linda,lintian,man}/* 2>/dev/null || true
	find "$r/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} + 2>/dev/null || true
	rm -rf "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/*.bin "$r"/var/cache/apt/archives/*.deb \
		"$r"/var/cache/debconf/*-old "$r"/var/lib/dpkg/*-old "$r"/tmp/* "$r"/var/tmp/* "$r"/root/.cache 2>/dev/null || true
	find "$r/var/log" -type f -exec truncate -s0 {} + 2>/dev/null || true
	: >"$r/etc/resolv.conf"
	: >"$r/etc/hostname"
	printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$r/etc/hosts"
	rm -f "$r/usr/sbin/policy-rc.d"
}

ensure_base_tar() {
	if [ -f "$BASE_TAR" ] && [ "$REFRESH" = 0 ]; then
		return 0
	fi
	if ! command -v debootstrap >/dev/null; then
		log "       installing debootstrap (apt-get)"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null ||
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; } ||
			die "cannot install debootstrap"
	fi
	local r=$WORK/debootstrap
	begin "debootstrap --variant=minbase $SUITE from $MIRROR (about 1-2 minutes)"
	mkdir -p "$CACHE_DIR/debootstrap-debs" "$(dirname "$BASE_TAR")"
	run_watched debootstrap "$WORK/debootstrap.log" - debootstrap --variant=minbase --cache-dir="$CACHE_DIR/debootstrap-debs" \
		"$SUITE" "$r" "$MIRROR" ||
		{ tail -n 30 "$WORK/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
	slim_config "$r"
	slim_clean "$r"
	tar -C "$r" --numeric-owner -cf "$BASE_TAR.tmp" .
	mv "$BASE_TAR.tmp" "$BASE_TAR"
	rm -rf --one-file-system "$r"
	did "cache  $BASE_TAR ($(du -h "$BASE_TAR" | cut -f1)) in $(took)"
}

# new_rootfs NAME -> prints a fresh directory holding the cached base rootfs
new_rootfs() {
	local r=$WORK/$1
	rm -rf --one-file-system "$r"
	mkdir -p "$r"
	tar -C "$r" --numeric-owner -xpf "$BASE_TAR"
	echo "$r"
}

# in_chroot ROOTFS CMD... (proc, the host's resolv.conf and the apt .deb cache mounted)
in_chroot() {
	local r=$1
	shift
	if ! mountpoint -q "$r/proc"; then
		mount -t proc proc "$r/proc" && MOUNTS+=("$r/proc")
		mkdir -p "$APT_CACHE/partial" "$r/var/cache/apt/archives"
		mount --bind "$APT_CACHE" "$r/var/cache/apt/archives" && MOUNTS+=("$r/var/cache/apt/archives")
		cp /etc/resolv.conf "$r/etc/resolv.conf"
		printf '#!/bin/sh\nexit 101\n' >"$r/usr/sbin/policy-rc.d" && chmod +x "$r/usr/sbin/policy-rc.d"
		# keep the downloaded .debs (the docker-clean hook would delete them from our cache)
		[ -f "$r/etc/apt/apt.conf.d/docker-clean" ] && mv "$r/etc/apt/apt.conf.d/docker-clean" "$r/docker-clean.hold"
	fi
	env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
		DEBIAN_FRONTEND=noninteractive chroot "$r" "$@"
}

apt_install() {
	local r=$1
	shift
	in_chroot "$r" apt-get update -qq >/dev/null
	run_watched "apt-get install $*" "$WORK/apt.log" - in_chroot "$r" apt-get install -y --no-install-recommends "$@" ||
		{ tail -n 30 "$WORK/apt.log" >&2; die "apt-get install $* failed in chroot"; }
}

# finish_rootfs ROOTFS: undo in_chroot and clean
finish_rootfs() {
	local r=$1 i
	for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
		case "${MOUNTS[$i]}" in "$r"/*) umount "${MOUNTS[$i]}" && unset 'MOUNTS[i]' ;; esac
	done
	MOUNTS=("${MOUNTS[@]}")
	[ -f "$r/docker-clean.hold" ] && mv "$r/docker-clean.hold" "$r/etc/apt/apt.conf.d/docker-clean"
	slim_clean "$r"
}

# import_rootfs ROOTFS IMAGE RECIPE [--change ...]
import_rootfs() {
	local r=$1 img=$2 recipe=$3
	shift 3
	tar -C "$r" --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -cf - . |
		docker import --change "LABEL $LABEL=$recipe" \
			--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
			"$@" - "$img" >/dev/null
	rm -rf --one-file-system "$r"
	did "built  $img ($(docker image inspect --format '{{.Size}}' "$img" | awk '{printf "%d MB", $1/1000000}')) in $(took)"
}

# ---------------------------------------------------------------- debian:bookworm-slim
if need_build "$IMG_DEBIAN" "$R_DEBIAN"; then
	begin "$IMG_DEBIAN (the minbase rootfs)"
	ensure_base_tar
	r=$(new_rootfs debian)
	import_rootfs "$r" "$IMG_DEBIAN" "$R_DEBIAN" --change 'CMD ["bash"]'
fi

# ---------------------------------------------------------------- hero-runtime-python:bookworm
if need_build "$IMG_PYTHON" "$R_PYTHON"; then
	begin "$IMG_PYTHON (+ python3, bubblewrap)"
	ensure_base_tar
	r=$(new_rootfs python)
	apt_install "$r" python3 bubblewrap
	finish_rootfs "$r"
	import_rootfs "$r" "$IMG_PYTHON" "$R_PYTHON" --change 'CMD ["python3"]'
fi

# ---------------------------------------------------------------- redis:7-bookworm
if need_build "$IMG_REDIS" "$R_REDIS"; then
	begin "$IMG_REDIS (+ redis-server)"
	ensure_base_tar
	r=$(new_rootfs redis)
	# uid/gid 999 as in the official image (the package's postinst keeps an existing user)
	in_chroot "$r" groupadd --system --gid 999 redis
	in_chroot "$r" useradd --system --uid 999 --gid redis --home-dir /var/lib/redis --shell /usr/sbin/nologin redis
	apt_install "$r" redis-server
	mkdir -p "$r/data" && chown 999:999 "$r/data" && chmod 0755 "$r/data"
	cat >"$r/usr/local/bin/docker-entrypoint.sh" <<'EOF'
#!/bin/sh
# Entry point with the conventions of the official redis image: `redis-server ARGS`,
# `--option ...` and `file.conf ...` all start redis-server; as root it chowns /data and
# drops to the redis user; without an explicit protected-mode setting, protected mode is
# off (the official image is compiled that way) so other containers can connect.
set -e
if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then
	set -- redis-server "$@"
fi
if [ "$1" = redis-server ] && [ "$(id -u)" = 0 ]; then
	find . \! -user redis -exec chown redis '{}' + 2>/dev/null || true
	exec setpriv --reuid=redis --regid=redis --init-groups "$0" "$@"
fi
if [ "$1" = redis-server ]; then
	case " $* " in
	*" --protected-mode "* | *" --protected-mode="*) ;;
	*)
		if [ -n "$2" ] && [ "${2#-}" = "$2" ] && [ -r "$2" ] && grep -qE '^[[:space:]]*protected-mode' "$2"; then
			:
		else
			set -- "$@" --protected-mode no
		fi
		;;
	esac
fi
umask 0077
exec "$@"
EOF
	chmod 0755 "$r/usr/local/bin/docker-entrypoint.sh"
	finish_rootfs "$r"
	import_rootfs "$r" "$IMG_REDIS" "$R_REDIS" \
		--change 'WORKDIR /data' --change 'VOLUME /data' --change 'EXPOSE 6379' \
		--change 'ENTRYPOINT ["docker-entrypoint.sh"]' --change 'CMD ["redis-server"]'
fi

# ---------------------------------------------------------------- prom/prometheus:v2.42.0
if need_build "$IMG_PROM" "$R_PROM"; then
	begin "$IMG_PROM (+ prometheus, busybox)"
	ensure_base_tar
	r=$(new_rootfs prometheus)
	# busybox for `wget` (the official image is busybox-based; healthchecks use wget)
	apt_install "$r" prometheus busybox
	ln -s /bin/busybox "$r/usr/local/bin/wget"
	# libjs-moment-timezone's 210 MB of per-zone JSON: the web UI uses the bundled *-with-data.js
	rm -rf "$r/usr/share/javascript/moment-timezone/data"
	# official layout: /bin/prometheus, /bin/promtool (merged /usr: /bin -> usr/bin),
	# /etc/prometheus/prometheus.yml, /usr/share/prometheus/{consoles,console_libraries},
	# data in /prometheus owned by nobody.
	mkdir -p "$r/usr/share/prometheus" "$r/prometheus" "$r/etc/prometheus"
	for d in consoles console_libraries; do
		if [ ! -e "$r/usr/share/prometheus/$d" ]; then
			if [ -d "$r/etc/prometheus/$d" ]; then
				ln -s "/etc/prometheus/$d" "$r/usr/share/prometheus/$d"
			else
				mkdir -p "$r/usr/share/prometheus/$d"
			fi
		fi
	done
	cat >"$r/etc/prometheus/prometheus.yml" <<'EOF'
# my global config
global:
  scrape_interval: 15s
  evaluation_interval: 15s

scrape_configs:
  - job_name: "prometheus"
    static_configs:
      - targets: ["localhost:9090"]
EOF
	chown -R 65534:65534 "$r/prometheus" "$r/etc/prometheus"
	finish_rootfs "$r"
	import_rootfs "$r" "$IMG_PROM" "$R_PROM" \
		--change 'USER nobody' --change 'EXPOSE 9090' --change 'VOLUME ["/prometheus"]' --change 'WORKDIR /prometheus' \
		--change 'ENTRYPOINT ["/bin/prometheus"]' \
		--change 'CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus", "--web.console.libraries=/usr/share/prometheus/console_libraries", "--web.console.templates=/usr/share/prometheus/consoles"]'
fi

# ---------------------------------------------------------------- golang:<minor>-bookworm
# Two steps: IMG_GOLANG_BASE = rootfs + toolchain (one layer); IMG_GOLANG = that + a layer with
# this repo's Go modules in /go/pkg/mod, so the Dockerfile's `go mod download` finds them all
# and needs no network. The module layer is redone whenever a go.mod/go.sum/go.work changes.
golang_built=0
if [ "$FORCE" = 1 ] || ! img_exists "$IMG_GOLANG_BASE" || [ "$(img_label "$IMG_GOLANG_BASE" "$LABEL")" != "$R_GOLANG" ]; then
	if img_exists "$IMG_GOLANG" && { [ -z "$(img_label "$IMG_GOLANG" "$LABEL")" ] || [ "$(img_label "$IMG_GOLANG" "$LABEL")" = "<no value>" ]; }; then
		:
	else
		REPLACED+=("$(img_id "$IMG_GOLANG_BASE")")
		begin "$IMG_GOLANG_BASE (gcc, git, the host's Go)"
		ensure_base_tar
		r=$(new_rootfs golang)
		apt_install "$r" ca-certificates curl git gcc libc6-dev make pkg-config
		finish_rootfs "$r"
		log "       copying the host's Go $GO_FULL from $GOROOT_HOST"
		mkdir -p "$r/usr/local/go" "$r/go/bin" "$r/go/src"
		tar -C "$GOROOT_HOST" --owner=0 --group=0 --exclude=./pkg/obj -cf - . | tar -C "$r/usr/local/go" -xf -
		chmod -R 1777 "$r/go"
		import_rootfs "$r" "$IMG_GOLANG_BASE" "$R_GOLANG" \
			--change "ENV GOLANG_VERSION=$GO_FULL" --change 'ENV GOTOOLCHAIN=local' --change 'ENV GOPATH=/go' \
			--change 'ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
			--change 'WORKDIR /go' --change 'CMD ["bash"]'
		golang_built=1
	fi
fi

# The Go module files of the repo, as the Dockerfile's gomod-files stage collects them.
gomod_files() {
	(cd "$REPO_ROOT" && find . \( -name .git -o -name vendor -o -name node_modules \) -prune -o \
		\( -name go.mod -o -name go.sum -o -name go.work -o -name go.work.sum \) -type f -print | LC_ALL=C sort)
}
gomod_hash() { (cd "$REPO_ROOT" && gomod_files | xargs sha256sum | sha256sum | cut -c1-16); }

if ! img_exists "$IMG_GOLANG_BASE"; then
	did "keep   $IMG_GOLANG (present, not made by this script; Go modules not seeded)"
else
	want=$R_GOLANG
	[ "$GOMOD" = 1 ] && [ -f "$REPO_ROOT/go.work" ] && want_mod=dl1-$(gomod_hash) || want_mod=none
	have=$(img_label "$IMG_GOLANG" "$LABEL")
	have_mod=$(img_label "$IMG_GOLANG" "$GOMOD_LABEL")
	if [ "$golang_built" = 0 ] && img_exists "$IMG_GOLANG" && [ "$have" = "$want" ] &&
		{ [ "$have_mod" = "$want_mod" ] || [ "$GOMOD" = 0 ]; }; then
		did "keep   $IMG_GOLANG (present, modules $have_mod)"
	else
		begin "$IMG_GOLANG (the workspace's Go modules)"
		modroot=$WORK/gomod
		mkdir -p "$modroot/go/pkg/mod"
		if [ "$want_mod" != none ]; then
			log "       downloading the workspace's Go modules (go mod download, as the Dockerfile does)"
			# In a copy of just the go.mod/go.sum/go.work files: the same module set the Dockerfile's
			# `go mod download` asks for, and nothing is written into the repository.
			src=$WORK/gomod-src
			mkdir -p "$src"
			(cd "$REPO_ROOT" && gomod_files | tar -cf - -T -) | tar -C "$src" -xf -
			host_cache=$(go env GOMODCACHE)
			# the host's module cache first (no network when it has them), then its GOPROXY
			(cd "$src" && GOWORK="$src/go.work" GOMODCACHE="$modroot/go/pkg/mod" GOFLAGS=-modcacherw \
				GOPROXY="file://$host_cache/cache/download,$(go env GOPROXY)" GOTOOLCHAIN=local go mod download) ||
				die "go mod download failed (module files of $REPO_ROOT)"
		fi
		REPLACED+=("$(img_id "$IMG_GOLANG")")
		cid=$(docker create "$IMG_GOLANG_BASE" true)
		# only the download cache (zips, .mod, .info): go extracts from it without any network,
		# and the image is ~190 MB smaller than with the extracted trees
		mkdir -p "$modroot/go/pkg/mod/cache/download"
		tar -C "$modroot" --owner=0 --group=0 -cf - go/pkg/mod/cache/download | docker cp - "$cid:/"
		docker commit --change "LABEL $GOMOD_LABEL=$want_mod" --change 'CMD ["bash"]' "$cid" "$IMG_GOLANG" >/dev/null
		docker rm "$cid" >/dev/null
		nmods=$(find "$modroot/go/pkg/mod/cache/download" -name '*.zip' 2>/dev/null | wc -l)
		rm -rf "$modroot"
		did "built  $IMG_GOLANG (Go $GO_FULL + $nmods Go modules, set $want_mod) in $(took)"
	fi
fi

# remove the images that rebuilds replaced, when they are left untagged and unused
for id in "${REPLACED[@]}"; do
	[ -n "$id" ] || continue
	if [ -z "$(docker image inspect --format '{{join .RepoTags ""}}' "$id" 2>/dev/null)" ]; then
		docker rmi "$id" >/dev/null 2>&1 || true
	fi
done

echo
echo "offline images ready in $(($(date +%s) - T0))s (cache: $CACHE_DIR):"
for s in "${SUMMARY[@]}"; do echo "  $s"; done
echo
docker images --format '  {{.Repository}}:{{.Tag}}\t{{.Size}}' |
	grep -E "^  ($IMG_DEBIAN|$IMG_GOLANG|$IMG_PYTHON|$IMG_REDIS|${IMG_PROM//\//\\/})	" || true
