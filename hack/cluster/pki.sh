# Sourced by hack/cluster.sh: the local cluster's certificates, tokens and
# kubeconfigs, all under $dir/pki. One CA signs the apiserver's serving
# certificate and its client certificate towards the kubelets; clients
# authenticate with static tokens (--token-auth-file), each its own user so
# that RBAC and the Node authorizer see who calls.

# pki_make writes everything once; a second `up` reuses it.
pki_make() {
  local p="$dir/pki"
  # .complete-3: made with the identities of all three host nodes.
  [ -f "$p/.complete-3" ] && return 0
  mkdir -p "$p" && chmod 0700 "$p"
  command -v openssl >/dev/null || die "openssl not found"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=rackcache-local-ca" \
    -keyout "$p/ca.key" -out "$p/ca.crt" 2>/dev/null
  # The apiserver is reached at 127.0.0.1 on the host and in host-network
  # pods, at 10.0.3.100 from the guest (qemu's guestfwd), and by its
  # in-cluster names.
  pki_sign apiserver "/CN=kube-apiserver" \
    "subjectAltName=IP:127.0.0.1,IP:10.0.3.100,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  # The kubelets authorize the apiserver's calls (logs, exec) by this
  # certificate's group.
  pki_sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "extendedKeyUsage=clientAuth"
  openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
  openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
  # token,user,uid,"groups"
  {
    echo "$(pki_token),admin,admin,\"system:masters\""
    echo "$(pki_token),system:kube-controller-manager,kcm,\"\""
    echo "$(pki_token),system:kube-scheduler,scheduler,\"\""
    echo "$(pki_token),system:node:$HOST_NODE,node-host,\"system:nodes\""
    echo "$(pki_token),system:node:$HOST2_NODE,node-host2,\"system:nodes\""
    echo "$(pki_token),system:node:$CONTROL_NODE,node-host3,\"system:nodes\""
    echo "$(pki_token),system:node:$GUEST_NODE,node-guest,\"system:nodes\""
  } >"$p/tokens.csv"
  pki_kubeconfig admin "https://127.0.0.1:$APISERVER_PORT" >"$dir/kubeconfig"
  pki_kubeconfig system:kube-controller-manager "https://127.0.0.1:$APISERVER_PORT" >"$p/controller-manager.kubeconfig"
  pki_kubeconfig system:kube-scheduler "https://127.0.0.1:$APISERVER_PORT" >"$p/scheduler.kubeconfig"
  pki_kubeconfig "system:node:$HOST_NODE" "https://127.0.0.1:$APISERVER_PORT" >"$p/host-kubelet.kubeconfig"
  pki_kubeconfig "system:node:$HOST2_NODE" "https://127.0.0.1:$APISERVER_PORT" >"$p/host2-kubelet.kubeconfig"
  pki_kubeconfig "system:node:$CONTROL_NODE" "https://127.0.0.1:$APISERVER_PORT" >"$p/host3-kubelet.kubeconfig"
  # The guest's kubelet dials its own 127.0.0.1:6443, which guest-init
  # forwards to the host's apiserver.
  pki_kubeconfig "system:node:$GUEST_NODE" "https://127.0.0.1:$APISERVER_PORT" >"$p/guest-kubelet.kubeconfig"
  chmod 0600 "$dir/kubeconfig" "$p"/*.kubeconfig "$p"/*.key "$p/tokens.csv"
  touch "$p/.complete-3"
}

pki_token() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }

# pki_sign NAME SUBJECT EXTENSION: NAME.key and NAME.crt signed by the CA.
pki_sign() {
  local p="$dir/pki" name="$1" subject="$2" ext="$3"
  openssl req -newkey rsa:2048 -nodes -subj "$subject" -keyout "$p/$name.key" -out "$p/$name.csr" 2>/dev/null
  openssl x509 -req -in "$p/$name.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial -days 30 \
    -extfile <(echo "$ext") -out "$p/$name.crt" 2>/dev/null
  rm -f "$p/$name.csr"
}

# pki_kubeconfig USER SERVER: a kubeconfig authenticating USER by its token.
pki_kubeconfig() {
  local user="$1" server="$2" token
  token="$(awk -F, -v u="$user" '$2 == u { print $1 }' "$dir/pki/tokens.csv")"
  [ -n "$token" ] || die "no token for $user"
  cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rackcache-local
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 "$dir/pki/ca.crt")
users:
- name: $user
  user:
    token: $token
contexts:
- name: rackcache-local
  context: {cluster: rackcache-local, user: $user}
current-context: rackcache-local
EOF
}
