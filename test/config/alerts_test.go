package config

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rackcache/rackcache/test/framework"
)

// TestAlertRules checks the chart's alerting rules with promtool (Debian's
// prometheus package) and runs their unit tests: each alert fires on its
// series, with its labels and annotations, and not on healthy ones.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		framework.MissingDependency(t, "promtool is missing (hack/deps.sh apt installs Debian's prometheus): %v", err)
	}
	rules := filepath.Join(chartDir(), "rules")
	for _, args := range [][]string{
		{"check", "rules", "alerts.yaml"},
		{"test", "rules", "alerts_test.yaml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = rules
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Every alert has a unit test.
	alerts, err := os.ReadFile(filepath.Join(rules, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(rules, "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(alerts), "\n") {
		name, ok := strings.CutPrefix(strings.TrimSpace(line), "- alert: ")
		if ok && !strings.Contains(string(tests), "alertname: "+name+"\n") {
			t.Errorf("alert %s has no test in alerts_test.yaml", name)
		}
	}
}
