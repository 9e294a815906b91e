package operator

import (
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The metrics name every CachedVolume and pool (rackcache_volume_*), so
// by default they are served as controller-runtime serves them securely:
// HTTPS, and only to callers whose bearer token the API server accepts
// (TokenReview) and who may `get` the non-resource URL /metrics
// (SubjectAccessReview; the ClusterRole rackcache-metrics-reader grants it).
//
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// MetricsOptions is the manager's metrics server on addr ("0": off).
// secure serves HTTPS with authentication and authorization in front of
// /metrics; its certificate is tls.crt/tls.key in certDir, or one
// controller-runtime generates (self-signed) when certDir is empty.
// Without secure, /metrics is plain HTTP for anyone who can reach it.
func MetricsOptions(addr string, secure bool, certDir string) metricsserver.Options {
	o := metricsserver.Options{BindAddress: addr}
	if secure {
		o.SecureServing = true
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
		o.CertDir = certDir
	}
	return o
}
