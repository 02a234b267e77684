#!/usr/bin/env bash
# Offline validation of the Helm chart in helm/hero:
#   1. helm (v3) from PATH, else built with `go install` into $(go env GOPATH)/bin;
#   2. helm lint --strict with the chart's defaults and with every ci/*.yaml;
#   3. helm template of every ci/*.yaml scenario, with and without the
#      ServiceMonitor API (--api-versions), into a temporary directory;
#   4. the Go tests of helm/chart-test on that output: strict decoding into the
#      Kubernetes and prometheus-operator types, cross-object checks, scenario
#      expectations, schema freshness, and helm rejecting misspelt values.
# Exits non-zero on the first failing step. Needs Go and the Go module proxy
# (for the first helm build and the test module's dependencies), nothing else.
#
# Environment: HELM_VERSION (default below), KUBE_VERSION (rendering target),
# KEEP_RENDERED=1 keeps the rendered manifests and prints where.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
KUBE_VERSION="${KUBE_VERSION:-1.31.0}"
RELEASE=hero
NAMESPACE=hero

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHART="$ROOT/helm/hero"
TESTMOD="$ROOT/helm/chart-test"
START=$SECONDS

step() { printf '\n==> %s\n' "$*"; }
die() {
	printf '\nhelm-check: FAILED: %s\n' "$*" >&2
	exit 1
}

command -v go >/dev/null || die "go is not on PATH"

# --- 1. helm -------------------------------------------------------------
is_helm3() { "$1" version --template '{{.Version}}' 2>/dev/null | grep -q '^v3\.'; }

step "helm"
HELM=""
if command -v helm >/dev/null && is_helm3 "$(command -v helm)"; then
	HELM="$(command -v helm)"
else
	GOBIN_DIR="$(go env GOBIN)"
	[ -n "$GOBIN_DIR" ] || GOBIN_DIR="$(go env GOPATH)/bin"
	if [ -x "$GOBIN_DIR/helm" ] && is_helm3 "$GOBIN_DIR/helm"; then
		HELM="$GOBIN_DIR/helm"
	else
		echo "helm v3 not found: building helm.sh/helm/v3/cmd/helm@$HELM_VERSION (a few minutes, once)"
		(cd "$ROOT" && GOWORK=off GOFLAGS=-mod=mod go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION") ||
			die "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed"
		HELM="$GOBIN_DIR/helm"
	fi
fi
echo "using $HELM ($("$HELM" version --template '{{.Version}}'))"

# --- 2. lint -------------------------------------------------------------
step "helm lint --strict"
shopt -s nullglob
SCENARIOS=("$CHART"/ci/*.yaml)
[ "${#SCENARIOS[@]}" -gt 0 ] || die "no scenario values in $CHART/ci"

"$HELM" lint --strict "$CHART" --kube-version "$KUBE_VERSION" >/dev/null ||
	{ "$HELM" lint --strict "$CHART" --kube-version "$KUBE_VERSION"; die "helm lint --strict with the chart's defaults"; }
echo "ok  (chart defaults)"
for f in "${SCENARIOS[@]}"; do
	name="$(basename "$f")"
	if ! out="$("$HELM" lint --strict "$CHART" --kube-version "$KUBE_VERSION" -f "$f" 2>&1)"; then
		printf '%s\n' "$out"
		die "helm lint --strict -f ci/$name"
	fi
	echo "ok  ci/$name"
done

# --- 3. template ----------------------------------------------------------
step "helm template"
RENDERED="$(mktemp -d "${TMPDIR:-/tmp}/hero-helm.XXXXXX")"
if [ "${KEEP_RENDERED:-}" = 1 ]; then
	echo "rendered manifests kept in $RENDERED"
else
	trap 'rm -rf "$RENDERED"' EXIT
fi
for f in "${SCENARIOS[@]}"; do
	name="$(basename "$f" .yaml)"
	for variant in "" "+monitoring"; do
		extra=()
		[ -z "$variant" ] || extra=(--api-versions monitoring.coreos.com/v1/ServiceMonitor)
		if ! "$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" \
			--kube-version "$KUBE_VERSION" -f "$f" "${extra[@]}" \
			>"$RENDERED/$name$variant.yaml" 2>"$RENDERED/$name$variant.err"; then
			cat "$RENDERED/$name$variant.err" >&2
			die "helm template -f ci/$name.yaml ${extra[*]}"
		fi
		rm -f "$RENDERED/$name$variant.err"
		printf 'ok  ci/%s.yaml%s: %d documents\n' "$name" "${variant:+ (with the ServiceMonitor API)}" \
			"$(grep -c '^kind:' "$RENDERED/$name$variant.yaml")"
	done
done

# --- 4. Go tests -----------------------------------------------------------
step "go test (helm/chart-test)"
cd "$TESTMOD"
# The module stands alone (its own go.mod) whether or not go.work lists it.
export GOWORK=off
go vet ./... || die "go vet in helm/chart-test"
unformatted="$(gofmt -l .)"
[ -z "$unformatted" ] || die "gofmt needed in helm/chart-test: $unformatted"
# HELM_CHECK_REQUIRE=1: a test that would skip for want of helm or rendered
# manifests fails instead.
HELM_RENDERED_DIR="$RENDERED" HELM_BIN="$HELM" HELM_CHECK_REQUIRE=1 go test -count=1 ./... ||
	die "go test in helm/chart-test (see the failures above)"

printf '\nhelm-check: OK (%ds)\n' "$((SECONDS - START))"
