package operator

// The operator's metrics (gathered from controller-runtime's registry, which
// the manager serves on /metrics) and Events.

import (
	"context"
	"strings"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// gaugeValue is the value of gauge name with exactly labels; found is false
// when no such series exists.
func gaugeValue(g Gomega, name string, labels map[string]string) (value float64, found bool) {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelsEqual(m.GetLabel(), labels) && m.GetGauge() != nil {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// seriesWithLabel lists the names of the metric families that have a series
// with label key=value and whose names start with prefix.
func seriesWithLabel(g Gomega, prefix, key, value string) []string {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), prefix) {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabel(m.GetLabel(), key, value) {
				names = append(names, f.GetName())
				break
			}
		}
	}
	return names
}

func labelsEqual(pairs []*dto.LabelPair, want map[string]string) bool {
	if len(pairs) != len(want) {
		return false
	}
	for _, p := range pairs {
		if v, ok := want[p.GetName()]; !ok || v != p.GetValue() {
			return false
		}
	}
	return true
}

func hasLabel(pairs []*dto.LabelPair, key, value string) bool {
	for _, p := range pairs {
		if p.GetName() == key && p.GetValue() == value {
			return true
		}
	}
	return false
}

// eventsFor lists the Events recorded on the cluster-scoped object of kind
// and name (they live in the default namespace).
func eventsFor(g Gomega, ctx context.Context, kind, name string) []corev1.Event {
	var list corev1.EventList
	g.Expect(k8s.List(ctx, &list, client.InNamespace("default"))).To(Succeed())
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name {
			out = append(out, e)
		}
	}
	return out
}
