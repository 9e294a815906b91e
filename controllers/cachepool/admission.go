package cachepool

import (
	"fmt"
	"path/filepath"
	"strings"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// Admission limits what a CachePool can make the operator run on every
// node its selector picks: a privileged root container of the pool's
// image, with the pool's device paths mounted from the host. Without it,
// whoever may write CachePools is root on those nodes; with it, only
// images from trusted registries and only cache devices (or files in the
// pool's own directory) are used. A pool outside it gets no DaemonSet
// change and says why in its Ready condition (reason NotAllowed).
type Admission struct {
	// DevicePrefixes: a device path must start with one of them, or lie in
	// the pool's own directory (/var/lib/rackcache/<pool>/).
	DevicePrefixes []string
	// ImagePrefixes: the dataplane image reference must start with one.
	ImagePrefixes []string
}

// DefaultAdmission: NVMe devices by id or by kernel name, the project's
// own images.
func DefaultAdmission() Admission {
	return Admission{
		DevicePrefixes: []string{"/dev/disk/by-id/", "/dev/nvme"},
		ImagePrefixes:  []string{"ghcr.io/rackcache/"},
	}
}

// Check lists every device path and the image of pool that the admission
// refuses; nil when it admits the pool.
func (a Admission) Check(pool *rcv1.CachePool) error {
	var refused []string
	own := persistPath(pool.Name) + "/"
	for _, d := range pool.Spec.Devices {
		p := filepath.Clean(d.Path)
		if !hasPrefix(p, a.DevicePrefixes) && !strings.HasPrefix(p, own) {
			refused = append(refused, fmt.Sprintf("device %s is outside the allowed prefixes %v and the pool's directory %s", d.Path, a.DevicePrefixes, own))
		}
	}
	if !hasPrefix(pool.Spec.Image, a.ImagePrefixes) {
		refused = append(refused, fmt.Sprintf("image %s is outside the allowed registries %v", pool.Spec.Image, a.ImagePrefixes))
	}
	if len(refused) == 0 {
		return nil
	}
	return fmt.Errorf("%s (the operator's --allowed-device-prefixes and --allowed-image-prefixes)", strings.Join(refused, "; "))
}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if p != "" && strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
