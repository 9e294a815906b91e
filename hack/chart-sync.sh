#!/usr/bin/env bash
# Copies what the Helm chart shares with config/ into charts/rackcache:
# the CRDs (crds/) and the RBAC, CSIDriver and ServiceMonitor manifests
# (files/), which the
# chart's templates include with the release's namespace. config/ stays the
# one source; `make manifests` runs this and `make verify` fails on drift.
set -euo pipefail
cd "$(dirname "$0")/.."
chart=charts/rackcache
rm -f "$chart"/crds/*.yaml "$chart"/files/*.yaml
cp config/crd/bases/*.yaml "$chart/crds/"
for f in config/rbac/service_account.yaml config/rbac/role.yaml config/rbac/role_binding.yaml \
  config/rbac/leader_election_role.yaml config/rbac/leader_election_role_binding.yaml \
  config/rbac/metrics_reader_role.yaml config/rbac/dataplane_service_account.yaml \
  config/csi/controller_rbac.yaml config/csi/node_rbac.yaml config/csi/csidriver.yaml \
  config/prometheus/operator_monitor.yaml config/prometheus/dataplane_service.yaml \
  config/prometheus/dataplane_monitor.yaml; do
  cp "$f" "$chart/files/$(basename "$(dirname "$f")")-$(basename "$f")"
done
