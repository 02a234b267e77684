#!/usr/bin/env bash
# Builds the five service images as the Helm chart names them, and optionally pushes them
# to a registry or loads them into a local cluster. No image of Hero is published: a
# Kubernetes install starts here.
#
#   scripts/build-images.sh [--registry R] [--tag T] [--push | --kind CLUSTER | --k3s]
#
#   --registry R   the chart's defaults.image.registry (default ghcr.io); the images are
#                  R/hero-coordinator/<service>:T
#   --tag T        default: the chart's appVersion (helm/hero/Chart.yaml)
#   --push         docker push each image (log in to R first)
#   --kind C       kind load docker-image into the kind cluster C
#   --k3s          import into k3s's containerd (k3s ctr images import), on a k3s node
#
# Build settings pass through: HERO_RUNNER_BASE (the runner's base image, default
# debian:bookworm-slim, python3 from apt) and GOPROXY. Without registry access run
# scripts/offline-images.sh first and set HERO_RUNNER_BASE=hero-runtime-python:bookworm.
set -euo pipefail
cd "$(dirname "$0")/.."

REGISTRY=ghcr.io
TAG=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' helm/hero/Chart.yaml)
MODE=
KIND_CLUSTER=
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --registry) REGISTRY=${2:?--registry needs a value}; shift 2 ;;
    --tag) TAG=${2:?--tag needs a value}; shift 2 ;;
    --push) MODE=push; shift ;;
    --kind) MODE=kind; KIND_CLUSTER=${2:?--kind needs a cluster name}; shift 2 ;;
    --k3s) MODE=k3s; shift ;;
    -h|--help) usage ;;
    *) echo "build-images: unknown argument $1" >&2; usage ;;
  esac
done
[ -n "$TAG" ] || { echo "build-images: no tag (helm/hero/Chart.yaml has no appVersion?)" >&2; exit 2; }
command -v docker >/dev/null || { echo "build-images: docker is not installed" >&2; exit 1; }

# heroctl version in the images: the revision and the build's date (one value for all
# five, so that they share the build's layer)
REVISION=$(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
BUILD_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
images=()
for svc in supervisor-daemon scheduler router runner mycelium-gateway; do
  img="$REGISTRY/hero-coordinator/$svc:$TAG"
  echo "== $img"
  docker build -q -f deploy/docker/Dockerfile \
    --build-arg SERVICE="$svc" \
    --build-arg RUNNER_BASE="${HERO_RUNNER_BASE:-debian:bookworm-slim}" \
    ${GOPROXY:+--build-arg GOPROXY="$GOPROXY"} \
    --build-arg HERO_REVISION="$REVISION" --build-arg HERO_BUILD_DATE="$BUILD_DATE" \
    -t "$img" . >/dev/null
  images+=("$img")
done

case "$MODE" in
  push) for img in "${images[@]}"; do docker push "$img"; done ;;
  kind) for img in "${images[@]}"; do kind load docker-image "$img" --name "$KIND_CLUSTER"; done ;;
  k3s) docker save "${images[@]}" | k3s ctr images import - ;;
esac
echo "built: ${images[*]}"
echo "install: helm install hero ./helm/hero --set defaults.image.registry=$REGISTRY --set defaults.image.tag=$TAG"
