package operator

// What the wiring itself needs, whatever the reconcilers add with their own
// markers (controller-gen merges them into config/rbac/role.yaml): both
// reconcilers' event recorders, the servers package's listing of dataplane
// pods and their Nodes, and the Secrets and ConfigMaps that the dataplane
// connector and the Ceph resolver read (the pool's CA; Rook's
// monitor ConfigMap and CSI Secrets, or the Secret a pool names).
//
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// Pods, Secrets and ConfigMaps are listed and watched in the operator's
// namespace only (CacheOptions); elsewhere a Secret or ConfigMap is only
// ever read by name (ClientOptions).
//
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=rackcache-system,resources=pods;secrets;configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets;configmaps,verbs=get

// The dataplane connector mints the servers' RPC tokens for the operator's
// own ServiceAccount, and only for it: creating tokens of any other would
// let the operator act as that ServiceAccount.
//
// +kubebuilder:rbac:groups="",namespace=rackcache-system,resources=serviceaccounts/token,verbs=create,resourceNames=rackcache-operator
