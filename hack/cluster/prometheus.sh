# Sourced by hack/cluster.sh: Prometheus (Debian's package) as the local
# cluster's monitoring, scraping the operator's and the dataplanes' metrics
# and evaluating the chart's alerting rules. Debian builds Prometheus
# without Kubernetes service discovery, so the targets come from a file:
# every rackcache pod uses its node's host network, so they are the
# nodes' metrics ports (the operator's 8443 on the control node, the
# dataplanes' 9560 on both cache servers), labelled as the
# chart's ServiceMonitors label them.
# The dataplanes answer only with the operator's scrape token: their job
# reads it from $dir/prometheus/dataplane-token, which the e2e suite fills
# from the Secret (RACKCACHE_E2E_PROMETHEUS_TOKEN_FILE), as the Prometheus
# Operator would from the ServiceMonitor's reference. The operator's job
# scrapes HTTPS (a self-signed certificate) with the token of a
# ServiceAccount the suite binds to rackcache-metrics-reader, written to
# $dir/prometheus/operator-token, as a Prometheus in the cluster would
# present its own ServiceAccount token.
# It runs in the cluster's network namespace; the host reaches its API at
# 127.0.0.1:$PROMETHEUS_HOST_PORT through a bridge like the apiserver's
# (not 9090: Debian's package runs a Prometheus of its own there on
# machines with systemd).

PROMETHEUS_PORT=9090
PROMETHEUS_HOST_PORT=19090

prometheus_up() {
  command -v prometheus >/dev/null || die "prometheus not found: run hack/deps.sh apt"
  local p="$dir/prometheus"
  mkdir -p "$p/data"
  cat >"$p/operator.json" <<EOF2
[{"targets": ["$NODE3_IP:8443"], "labels": {"job": "rackcache-operator", "node": "$CONTROL_NODE"}}]
EOF2
  cat >"$p/dataplane.json" <<EOF2
[{"targets": ["$NODE_IP:9560"], "labels": {"job": "rackcache-dataplane", "node": "$HOST_NODE"}},
 {"targets": ["$NODE2_IP:9560"], "labels": {"job": "rackcache-dataplane", "node": "$HOST2_NODE"}}]
EOF2
  local f
  for f in dataplane-token operator-token; do
    [[ -e "$p/$f" ]] || install -m 0600 /dev/null "$p/$f"
  done
  cat >"$p/prometheus.yml" <<EOF2
global:
  scrape_interval: 5s
  evaluation_interval: 5s
rule_files:
  - $REPO_ROOT/charts/rackcache/rules/alerts.yaml
scrape_configs:
  - job_name: rackcache-operator
    scheme: https
    tls_config:
      insecure_skip_verify: true
    authorization:
      credentials_file: $p/operator-token
    file_sd_configs:
      - files: [$p/operator.json]
  - job_name: rackcache-dataplane
    authorization:
      credentials_file: $p/dataplane-token
    file_sd_configs:
      - files: [$p/dataplane.json]
EOF2
  start prometheus prometheus --config.file "$p/prometheus.yml" --storage.tsdb.path "$p/data" \
    --web.listen-address "127.0.0.1:$PROMETHEUS_PORT" --log.level warn
  bridge prometheus-bridge "$PROMETHEUS_HOST_PORT" "$PROMETHEUS_PORT"
  wait_for prometheus 60 curl -fsS "http://127.0.0.1:$PROMETHEUS_HOST_PORT/-/ready"
}
