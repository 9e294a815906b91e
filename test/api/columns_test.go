package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

var _ = Describe("kubectl get columns", func() {
	It("shows a pool's servers, capacity, allocation, volumes and write mode", func(ctx context.Context) {
		pool := validPool("columns")
		pool.Spec.WriteMode = rcv1.WriteBack
		create(ctx, pool)
		pool.Status = rcv1.CachePoolStatus{
			ReadyServers: 2, TotalServers: 3, Volumes: 12,
			Capacity: ptr.To(resource.MustParse("3Ti")), Allocated: ptr.To(resource.MustParse("750Gi")),
		}
		Expect(k8s.Status().Update(ctx, pool)).To(Succeed())
		Expect(tableRow(ctx, "cachepools", "columns")).To(HaveKeyWithValues(map[string]string{
			"Ready": "2", "Servers": "3", "Capacity": "3Ti", "Allocated": "750Gi", "Volumes": "12", "Write Mode": "WriteBack",
		}))
	})

	It("shows a volume's pool, server, phase, sizes, hit ratio, dirty bytes, and with -o wide its write mode and rack", func(ctx context.Context) {
		vol := validVolume("columns")
		vol.Spec.CacheSize = "25%"
		create(ctx, vol)
		vol.Status = rcv1.CachedVolumeStatus{
			Phase: rcv1.VolumeReady, Server: "node-7", Rack: "r12", WriteMode: rcv1.WriteThrough,
			Stats: rcv1.VolumeStats{HitRatio: "93.5%", Dirty: ptr.To(resource.MustParse("12Mi"))},
		}
		Expect(k8s.Status().Update(ctx, vol)).To(Succeed())
		Expect(tableRow(ctx, "cachedvolumes", "columns")).To(HaveKeyWithValues(map[string]string{
			"Pool": "fast", "Server": "node-7", "Phase": "Ready", "Size": "100Gi", "Cache": "25%",
			"Hit Ratio": "93.5%", "Dirty": "12Mi", "Write Mode": "WriteThrough", "Rack": "r12",
		}))
	})
})

// HaveKeyWithValues matches a map holding every key of want with its value.
func HaveKeyWithValues(want map[string]string) OmegaMatcher {
	var all []OmegaMatcher
	for k, v := range want {
		all = append(all, HaveKeyWithValue(k, v))
	}
	return SatisfyAll(all...)
}

// tableRow asks the apiserver for the table `kubectl get` prints and
// returns the named row's cells under their column names.
func tableRow(ctx context.Context, resource, name string) map[string]string {
	GinkgoHelper()
	hc, err := rest.HTTPClientFor(restConfig)
	Expect(err).NotTo(HaveOccurred())
	url := strings.TrimSuffix(restConfig.Host, "/") + "/apis/rackcache.io/v1alpha1/" + resource
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	Expect(err).NotTo(HaveOccurred(), "get %s as a table", resource)
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	Expect(resp.StatusCode).To(Equal(http.StatusOK), "get %s as a table: %s", url, body)
	var table metav1.Table
	Expect(json.Unmarshal(body, &table)).To(Succeed())
	for _, r := range table.Rows {
		if len(r.Cells) > 0 && r.Cells[0] == name {
			out := map[string]string{}
			for i, col := range table.ColumnDefinitions {
				out[col.Name] = fmt.Sprint(r.Cells[i])
			}
			return out
		}
	}
	Fail(fmt.Sprintf("no row %q in the %s table", name, resource))
	return nil
}
