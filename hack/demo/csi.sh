# The demo's CSI half, sourced by hack/demo.sh: the CSI controller
# (rackcache-csi --mode controller) against the demo's apiserver, and in the
# qemu guest the node plugin (rackcache-csi --mode node) with a workload
# that does what the kubelet and the sidecars do for one pod: create a
# volume from StorageClass parameters in the guest's rack, publish it to the
# guest, stage it (nvme connect, mkfs, mount) and publish it, then write a
# file and read it back with cold page caches.

csi_port="${RACKCACHE_DEMO_CSI_PORT:-19000}"
# The application's file, written once and read back three times.
csi_file_mib=32

csi_step() {
  say "7/7 the CSI driver: a volume from StorageClass parameters, attached by the node plugin in the guest's kernel, an application on it"
  local bin="$demo_dir/bin" started=$SECONDS
  (cd "$REPO_ROOT" && go build -o "$bin/rackcache-csi" ./cmd/rackcache-csi \
    && CGO_ENABLED=0 go build -o "$bin/rackcache-csi-node" ./cmd/rackcache-csi \
    && CGO_ENABLED=0 go build -o "$bin/democsi" ./hack/democsi)
  start_bg csi-controller "$bin/rackcache-csi" --mode controller --endpoint "tcp://127.0.0.1:$csi_port" \
    --kubeconfig "$kubeconfig" --probe-listen "127.0.0.1:$((csi_port + 1))"
  wait_until 60 "the CSI controller's /healthz" curl -sf "http://127.0.0.1:$((csi_port + 1))/healthz" \
    || fail "$kube_dir/csi-controller.log"
  echo "    rackcache-csi --mode controller pid $(cat "$kube_dir/csi-controller.pid") on 127.0.0.1:$csi_port, log $kube_dir/csi-controller.log"
  # The kubelet's part in the host keys: it reads the Secret the
  # StorageClass names (rackcache-keys-<PV name>) and hands it to the node
  # plugin. The guest's stand-in reads it through kubectl proxy, opened to
  # that GET alone.
  local proxy_port=$((csi_port + 2))
  # The binary, not the kubectl function: start_bg's PID must be the proxy's.
  start_bg kube-proxy "$REPO_ROOT/bin/kubectl" proxy --address 127.0.0.1 --port "$proxy_port" \
    --accept-hosts "^${guest_target//./\\.}\$" --reject-methods '^(POST|PUT|PATCH|DELETE)$' \
    --accept-paths "^/api/v1/namespaces/$ns/secrets/rackcache-keys-[a-z0-9.-]+\$"
  wait_until 30 "kubectl proxy" curl -s -o /dev/null "http://127.0.0.1:$proxy_port/" || fail "$kube_dir/kube-proxy.log"

  # The StorageClass's parameters (no Ceph secrets: the pool's own Ceph
  # user; the host keys Secret, as csi.storage.k8s.io/node-stage-secret-name
  # rackcache-keys-${pv.name} gives it, comes through the proxy).
  local params
  params="{\"cachePool\":\"$pool\",\"pool\":\"$RACKCACHE_CEPH_POOL\",\"writeMode\":\"WriteBack\",\"cacheSize\":\"64Mi\"}"
  local job="$demo_dir/csi-job.sh"
  cat >"$job" <<JOB
echo 1 >/proc/sys/kernel/printk
modprobe ext4
mkdir -p /tmp/csi
rackcache-csi --mode node --endpoint unix:///tmp/csi/node.sock --node-name demo-compute --rack $rack \
  --registration-dir "" --probe-listen "" --portal-map 127.0.0.1:$nvmf_port=$guest_target:$guest_port >/tmp/node.log 2>&1 &
i=0; while [ ! -S /tmp/csi/node.sock ] && [ \$i -lt 300 ]; do sleep 0.1; i=\$((i + 1)); done
democsi -controller $guest_target:9000 -name pvc-demo-app -file-mib $csi_file_mib -params '$params' \\
  -secrets-url http://$guest_target:8001/api/v1/namespaces/$ns/secrets/
echo "DEMO-VAL democsi=\$?"
JOB
  local tools=() t
  for t in blkid mkfs.ext4 mount umount; do tools+=(--bin "$(command -v "$t")"); done
  tools+=(--bin "$(command -v e2fsck):/usr/local/sbin/fsck")
  console="$demo_dir/csi-console.log"
  rm -f "$console"
  "$REPO_ROOT/hack/guest/run.sh" --script "$job" \
    --bin "$bin/rackcache-csi-node:/usr/local/bin/rackcache-csi" --bin "$bin/democsi" "${tools[@]}" \
    --guestfwd "9000:$csi_port" --guestfwd "$guest_port:$nvmf_port" --guestfwd "8001:$proxy_port" \
    --timeout 600 --log "$console" --quiet 2>/dev/null || die "the CSI guest job failed (console: $console)"
  tr -d '\r' <"$console" | grep '^DEMO: ' | sed 's/^DEMO: /    /'
  [ "$(val democsi)" = 0 ] && [ "$(val verified)" = true ] || die "the CSI workload failed (console: $console)"
  local vol cv
  vol="$(val volume-id)"
  cv="csi-vol-${vol: -36}"
  echo "    CreateVolume answered in $(val create-ms) ms: volume $vol in $(val topology),"
  echo "    CachedVolume $cv, subsystem $(val subnqn)"
  echo "    the application wrote $csi_file_mib MiB in $(val write-ms) ms and read it back 3 times with cold page caches:" \
    "$(val read-1-ms), $(val read-2-ms), $(val read-3-ms) ms; every byte verified"
  dp_call bdev_adacache_get_stats "{\"name\": \"cv-$cv\"}" | "$REPO_ROOT/bin/venv/bin/python3" -c '
import json, sys
s = json.load(sys.stdin)
hits, reads, dirty = s["requests"]["rd_hits"], s["requests"]["rd_total"], s["dirty_bytes"] >> 20
ratio = hits / reads if reads else 0
print(f"    its cache on the server: read hit ratio {ratio:.3f} ({hits} of {reads} reads), dirty {dirty} MiB (write-back)")
'
  kubectl get cachedvolume "$cv" -o wide | sed 's/^/    /'
  echo "    (took $((SECONDS - started)) s; node plugin log and console: $console)"
}
