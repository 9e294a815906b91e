package api

import (
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"
)

// testedMessages holds, per kind, the messages the rejection entries want;
// the entry helpers fill it while the spec tree is built.
var testedMessages = map[string][]string{}

var _ = Describe("CEL rules", func() {
	// A rule added to the types without an entry showing the apiserver
	// enforcing it fails here, naming the rule's message.
	It("each has an entry showing the apiserver rejects a violating object with its message", func() {
		files, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(files).NotTo(BeEmpty())
		rules := 0
		for _, f := range files {
			raw, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			var crd map[string]any
			Expect(yaml.Unmarshal(raw, &crd)).To(Succeed(), f)
			kind, _ := crd["spec"].(map[string]any)["names"].(map[string]any)["kind"].(string)
			for _, msg := range celMessages(crd) {
				rules++
				Expect(testedMessages[kind]).To(ContainElement(Satisfy(func(want string) bool { return strings.Contains(msg, want) })),
					"%s's CEL rule %q has no entry in the rejection tables", kind, msg)
			}
		}
		Expect(rules).To(BeNumerically(">", 0), "no CEL rule found under %s", crdDir)
	})
})

// celMessages collects the messages of every x-kubernetes-validations rule
// anywhere in a CRD's schema.
func celMessages(node any) []string {
	var out []string
	switch n := node.(type) {
	case map[string]any:
		for k, v := range n {
			if k == "x-kubernetes-validations" {
				for _, rule := range v.([]any) {
					if msg, ok := rule.(map[string]any)["message"].(string); ok {
						out = append(out, msg)
					}
				}
				continue
			}
			out = append(out, celMessages(v)...)
		}
	case []any:
		for _, v := range n {
			out = append(out, celMessages(v)...)
		}
	}
	return out
}
