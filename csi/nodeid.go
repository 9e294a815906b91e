package csi

import (
	"regexp"
	"strings"
)

// A node id is "<node name>/<host NQN>": the node's name for topology and
// logs, its host NQN for the target's allow list.
var hostNQNPattern = regexp.MustCompile(`^nqn\.[0-9]{4}-[0-9]{2}\.[a-z0-9.-]+(:[\x21-\x7e]+)?$`)

// maxNodeIDLength is the CSI spec's limit.
const maxNodeIDLength = 256

func nodeIDOf(nodeName, hostNQN string) string { return nodeName + "/" + hostNQN }

// parseNodeID splits a node id; an id not of this driver is ErrNotFound
// (the spec's answer for an unknown node).
func parseNodeID(id string) (nodeName, hostNQN string, err error) {
	name, nqn, ok := strings.Cut(id, "/")
	if !ok || name == "" || len(nqn) > 223 || !hostNQNPattern.MatchString(nqn) {
		return "", "", errorf(ErrNotFound, "node id %q is not <node name>/<host NQN>", id)
	}
	return name, nqn, nil
}
