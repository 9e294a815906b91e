package operator

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CacheOptions keep the operator's informers to what it owns: Secrets,
// ConfigMaps, Pods and DaemonSets are watched in the operator's namespace
// only, so the operator neither lists nor holds the cluster's other Secrets
// in memory (nor needs RBAC to).
func CacheOptions(namespace string) cache.Options {
	own := cache.ByObject{Namespaces: map[string]cache.Config{namespace: {}}}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}:    own,
		&corev1.ConfigMap{}: own,
		&corev1.Pod{}:       own,
		&appsv1.DaemonSet{}: own,
	}}
}

// ClientOptions make reads of Secrets and ConfigMaps go to the apiserver:
// the Ceph backend's (a Rook CephCluster's namespace, or a CachePool's
// secretRef) live outside the operator's namespace, where nothing is
// cached, and are read with a plain get once per pass.
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}}}}
}
