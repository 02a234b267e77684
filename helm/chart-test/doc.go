// Package charttest checks the Hero Helm chart (helm/hero) offline.
//
// The tests decode every document that `helm template` rendered for the chart's
// ci/ scenarios strictly into the Kubernetes API types (unknown fields, unknown
// kinds and duplicate keys fail), check that the objects fit together (Service
// selectors and ports, probes, env and Secret references, HPA/PDB/NetworkPolicy/
// ServiceMonitor targets) and what each scenario must render, and that
// values.schema.json is up to date and rejects misspelt values.
//
// scripts/helm-check.sh renders the scenarios and runs them:
//
//	bash scripts/helm-check.sh
//
// Without HELM_RENDERED_DIR the manifest tests skip, and without helm (HELM_BIN or
// on PATH) the tests that run helm skip, so `go test ./...` needs no helm.
package charttest
