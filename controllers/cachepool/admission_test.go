package cachepool

import (
	"strings"
	"testing"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

func TestAdmission(t *testing.T) {
	a := DefaultAdmission()
	ok := testPool("p")
	ok.Spec.Devices = append(ok.Spec.Devices, rcv1.CacheDevice{Path: "/var/lib/rackcache/p/cache.img"})
	if err := a.Check(ok); err != nil {
		t.Errorf("NVMe devices, the pool's own file and the project's image: %v", err)
	}
	for _, c := range []struct {
		name, device, image, want string
	}{
		{"a host directory", "/etc", "", "device /etc"},
		{"another pool's file", "/var/lib/rackcache/q/cache.img", "", "device /var/lib/rackcache/q/cache.img"},
		{"a way out of the pool's directory", "/var/lib/rackcache/p/../q/x", "", "device /var/lib/rackcache/p/../q/x"},
		{"a look-alike of a prefix", "/dev/disk/by-idx/nvme", "", "device /dev/disk/by-idx/nvme"},
		{"another registry", "", "ghcr.io/rackcache-evil/dataplane:1", "image ghcr.io/rackcache-evil/dataplane:1"},
	} {
		p := testPool("p")
		if c.device != "" {
			p.Spec.Devices = []rcv1.CacheDevice{{Path: c.device}}
		}
		if c.image != "" {
			p.Spec.Image = c.image
		}
		err := a.Check(p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
}
