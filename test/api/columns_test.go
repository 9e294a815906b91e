package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// getTable asks the apiserver for the table `kubectl get` prints.
func getTable(t *testing.T, cfg *rest.Config, resource string) metav1.Table {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatalf("http client: %v", err)
	}
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/apis/rackcache.io/v1alpha1/"+resource, nil)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("get %s as table: %v", resource, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("get %s as table (%s): status %d, err %v: %s", resource, req.URL, resp.StatusCode, err, body)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatalf("decode table: %v", err)
	}
	return table
}

// row renders the named row's cells under their column names.
func row(t *testing.T, table metav1.Table, name string) map[string]string {
	t.Helper()
	for _, r := range table.Rows {
		if len(r.Cells) > 0 && r.Cells[0] == name {
			out := map[string]string{}
			for i, col := range table.ColumnDefinitions {
				out[col.Name] = fmt.Sprint(r.Cells[i])
			}
			return out
		}
	}
	t.Fatalf("no row %q in table", name)
	return nil
}

func expectCells(t *testing.T, got map[string]string, want map[string]string) {
	t.Helper()
	for col, v := range want {
		if got[col] != v {
			t.Errorf("column %q = %q, want %q (row %v)", col, got[col], v, got)
		}
	}
}

func testPrinterColumns(t *testing.T, c client.Client, cfg *rest.Config) {
	ctx := context.Background()
	pool := validPool("columns")
	pool.Spec.WriteMode = rcv1.WriteBack
	if err := c.Create(ctx, pool); err != nil {
		t.Fatalf("create pool: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, pool) })
	pool.Status = rcv1.CachePoolStatus{
		ReadyServers: 2, TotalServers: 3, Volumes: 12,
		Capacity: ptr.To(resource.MustParse("3Ti")), Allocated: ptr.To(resource.MustParse("750Gi")),
	}
	if err := c.Status().Update(ctx, pool); err != nil {
		t.Fatalf("update pool status: %v", err)
	}
	expectCells(t, row(t, getTable(t, cfg, "cachepools"), "columns"), map[string]string{
		"Ready": "2", "Servers": "3", "Capacity": "3Ti", "Allocated": "750Gi", "Volumes": "12", "Write Mode": "WriteBack",
	})

	vol := validVolume("columns")
	vol.Spec.CacheSize = "25%"
	if err := c.Create(ctx, vol); err != nil {
		t.Fatalf("create volume: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, vol) })
	vol.Status = rcv1.CachedVolumeStatus{
		Phase: rcv1.VolumeReady, Server: "node-7", Rack: "r12", WriteMode: rcv1.WriteThrough,
		Stats: rcv1.VolumeStats{HitRatio: "93.5%", Dirty: ptr.To(resource.MustParse("12Mi"))},
	}
	if err := c.Status().Update(ctx, vol); err != nil {
		t.Fatalf("update volume status: %v", err)
	}
	expectCells(t, row(t, getTable(t, cfg, "cachedvolumes"), "columns"), map[string]string{
		"Pool": "fast", "Server": "node-7", "Phase": "Ready", "Size": "100Gi", "Cache": "25%",
		"Hit Ratio": "93.5%", "Dirty": "12Mi", "Write Mode": "WriteThrough", "Rack": "r12",
	})
}
