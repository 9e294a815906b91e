// Command kubectl is the upstream kubectl command built from the Go module
// proxy (no prebuilt download is reachable here). hack/deps.sh go-tools
// builds it into the tools cache and links it as bin/kubectl for the demo and
// the commands docs/operator.md shows.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	kubectl := cmd.NewDefaultKubectlCommand()
	// RunNoErrOutput leaves printing the error to CheckErr, which formats
	// apiserver errors the way kubectl users expect and sets the exit code.
	if err := cli.RunNoErrOutput(kubectl); err != nil {
		util.CheckErr(err)
	}
}
