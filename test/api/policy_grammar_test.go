package api

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// policyRow is one line of test/testdata/policy-strings.tsv.
type policyRow struct {
	field, value string
	accept       bool
}

// policyRows reads the table the dataplane's parser is tested against too
// (dataplane/engine/tests/policy_grammar.rs).
func policyRows() []policyRow {
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "policy-strings.tsv"))
	if err != nil {
		panic(fmt.Sprintf("the shared policy table: %v", err))
	}
	var rows []policyRow
	for _, line := range strings.Split(string(raw), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 3 || (cols[2] != "accept" && cols[2] != "refuse") {
			panic(fmt.Sprintf("not field<TAB>value<TAB>accept|refuse: %q", line))
		}
		rows = append(rows, policyRow{field: cols[0], value: cols[1], accept: cols[2] == "accept"})
	}
	return rows
}

var _ = Describe("the policy grammar shared with the dataplane", func() {
	// Every row: a CachePool with that admission or eviction string is
	// taken exactly when the dataplane's parser takes the string, so
	// nothing the apiserver accepts fails on every cache server, and
	// nothing the servers run is refused here.
	It("the apiserver agrees with every row of test/testdata/policy-strings.tsv", func(ctx context.Context) {
		rows := policyRows()
		Expect(len(rows)).To(BeNumerically(">", 50))
		var disagreements []string
		for i, r := range rows {
			p := validPool(fmt.Sprintf("policy-grammar-%d", i))
			switch r.field {
			case "admission":
				p.Spec.Policies = rcv1.CachePolicy{Admission: r.value}
			case "eviction":
				p.Spec.Policies = rcv1.CachePolicy{Eviction: r.value}
			default:
				Fail("unknown field " + r.field)
			}
			err := k8s.Create(ctx, p)
			if err == nil {
				Expect(k8s.Delete(ctx, p)).To(Succeed())
			}
			if (err == nil) != r.accept {
				disagreements = append(disagreements, fmt.Sprintf("%s %q: table says accept=%v, apiserver: %v", r.field, r.value, r.accept, err))
			}
		}
		Expect(disagreements).To(BeEmpty())
	})
})
