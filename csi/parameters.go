package csi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// StorageClass parameters (docs/csi.md lists them with examples).
const (
	paramCachePool     = "cachePool"
	paramRBDPool       = "pool"
	paramCacheSize     = "cacheSize"
	paramWriteMode     = "writeMode"
	paramAllocation    = "allocationMode"
	paramPolicies      = "policies"
	paramImageFeatures = "imageFeatures"
	// The NVMe/TCP connect options, also carried in the volume context.
	paramCtrlLossTmo    = "ctrlLossTmo"
	paramReconnectDelay = "reconnectDelay"
	paramKeepAliveTmo   = "keepAliveTmo"
	paramNrIOQueues     = "nrIOQueues"
	// Keys under this prefix belong to the sidecars (fstype, secrets,
	// PVC/PV names with --extra-create-metadata); the driver ignores them.
	sidecarParamPrefix = "csi.storage.k8s.io/"
)

// Volume context keys (CreateVolume's answer, NodeStage's input).
const (
	ctxAddress   = "address"
	ctxPort      = "port"
	ctxSubNQN    = "subnqn"
	ctxNSUUID    = "nsUUID"
	ctxCachePool = "cachePool"
)

// Publish context keys: the host NQN the volume was published to, and the
// portal serving it at publish time (ctxAddress, ctxPort). The portal in
// the volume context is the one at creation and never changes with the
// PV; a volume re-placed since (its server was lost) is served elsewhere,
// and every new attachment learns where from its publish context.
const publishHostNQN = "hostNQN"

// ctxPaths (publish context) lists every portal exporting the volume at
// publish time, the owner's first: "address:port,address:port". The node
// connects to all of them; a mirror promoted later is one of them, so a
// failover needs no new publish.
const ctxPaths = "paths"

// defaultImageFeatures are what the kernel-free path needs: layering for
// clones. (The dataplane reads the image through librbd, so any feature
// librbd supports is usable.)
var defaultImageFeatures = []string{"layering"}

// knownImageFeatures are the features imageFeatures may list.
var knownImageFeatures = []string{"layering", "exclusive-lock", "object-map", "fast-diff", "deep-flatten"}

// ConnectDefaults are the nvme connect options used when a StorageClass
// does not set them: ride out a cache server restart (ctrl-loss-tmo well
// above a dataplane restart), retry every 2 s, notice a dead target within
// 5 s of keep-alive.
type ConnectDefaults struct {
	CtrlLossTmo    int
	ReconnectDelay int
	KeepAliveTmo   int
	NrIOQueues     int
}

// DefaultConnect are the documented defaults (docs/csi.md).
var DefaultConnect = ConnectDefaults{CtrlLossTmo: 600, ReconnectDelay: 2, KeepAliveTmo: 5, NrIOQueues: 0}

// volumeParams are a CreateVolume request's parameters, validated.
type volumeParams struct {
	CachePool      string
	RBDPool        string
	CacheSize      rcv1.CacheSize
	WriteMode      rcv1.WriteMode
	AllocationMode rcv1.AllocationMode
	Policies       rcv1.CachePolicy
	ImageFeatures  []string
	// Connect holds the connect options given, as strings for the volume
	// context (only those set; the node applies its defaults to the rest).
	Connect map[string]string
}

// parseVolumeParams validates a StorageClass's parameters. Unknown keys
// are refused so that a typo never silently falls back to a default.
func parseVolumeParams(params map[string]string) (volumeParams, error) {
	p := volumeParams{ImageFeatures: defaultImageFeatures, Connect: map[string]string{}}
	for k, v := range params {
		switch k {
		case paramCachePool:
			p.CachePool = v
		case paramRBDPool:
			p.RBDPool = v
		case paramCacheSize:
			if err := validateCacheSize(v); err != nil {
				return p, err
			}
			p.CacheSize = rcv1.CacheSize(v)
		case paramWriteMode:
			m := rcv1.WriteMode(v)
			if m != rcv1.WriteBack && m != rcv1.WriteThrough && m != rcv1.WriteAround {
				return p, errorf(ErrInvalidArgument, "parameter %s=%q: want WriteBack, WriteThrough or WriteAround", k, v)
			}
			p.WriteMode = m
		case paramAllocation:
			m := rcv1.AllocationMode(v)
			if m != rcv1.Adaptive && m != rcv1.Fixed {
				return p, errorf(ErrInvalidArgument, "parameter %s=%q: want Adaptive or Fixed", k, v)
			}
			p.AllocationMode = m
		case paramPolicies:
			dec := json.NewDecoder(bytes.NewReader([]byte(v)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&p.Policies); err != nil {
				return p, errorf(ErrInvalidArgument, "parameter %s: not a JSON cache policy (docs/csi.md): %v", k, err)
			}
		case paramImageFeatures:
			f, err := parseImageFeatures(v)
			if err != nil {
				return p, err
			}
			p.ImageFeatures = f
		case paramCtrlLossTmo, paramReconnectDelay, paramKeepAliveTmo, paramNrIOQueues:
			if _, err := parseConnectOption(k, v); err != nil {
				return p, err
			}
			p.Connect[k] = v
		default:
			if strings.HasPrefix(k, sidecarParamPrefix) {
				continue
			}
			return p, errorf(ErrInvalidArgument, "unknown parameter %q (docs/csi.md lists them)", k)
		}
	}
	if p.CachePool == "" {
		return p, errorf(ErrInvalidArgument, "parameter %s (the CachePool) is required", paramCachePool)
	}
	if p.RBDPool == "" {
		return p, errorf(ErrInvalidArgument, "parameter %s (the RBD pool) is required", paramRBDPool)
	}
	return p, nil
}

// validateCacheSize accepts what CachedVolume's cacheSize accepts: a
// positive byte quantity or 1% to 100%.
func validateCacheSize(v string) error {
	if pct, ok := strings.CutSuffix(v, "%"); ok {
		n, err := strconv.Atoi(pct)
		if err != nil || n < 1 || n > 100 {
			return errorf(ErrInvalidArgument, "parameter %s=%q: a percentage must be 1%% to 100%%", paramCacheSize, v)
		}
		return nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() <= 0 {
		return errorf(ErrInvalidArgument, "parameter %s=%q: want a positive byte quantity (10Gi) or a percentage (25%%)", paramCacheSize, v)
	}
	return nil
}

// parseImageFeatures reads a comma-separated feature list.
func parseImageFeatures(v string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !slices.Contains(knownImageFeatures, f) {
			return nil, errorf(ErrInvalidArgument, "parameter %s: unknown feature %q (known: %s)", paramImageFeatures, f, strings.Join(knownImageFeatures, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if !slices.Contains(out, "layering") {
		return nil, errorf(ErrInvalidArgument, "parameter %s=%q: layering is required (snapshots restore through clones)", paramImageFeatures, v)
	}
	return out, nil
}

// parseConnectOption reads one nvme connect option (seconds or a count).
func parseConnectOption(key, v string) (int, error) {
	n, err := strconv.Atoi(v)
	min := 0
	if key == paramCtrlLossTmo {
		min = -1 // nvme-cli: -1 retries forever
	}
	if err != nil || n < min || n > 1<<20 {
		return 0, errorf(ErrInvalidArgument, "parameter %s=%q: want a whole number from %d", key, v, min)
	}
	return n, nil
}

// connectOptions resolves the connect options of a volume context against
// the node's defaults.
func connectOptions(volCtx map[string]string, d ConnectDefaults) (ConnectDefaults, error) {
	out := d
	for key, dst := range map[string]*int{
		paramCtrlLossTmo: &out.CtrlLossTmo, paramReconnectDelay: &out.ReconnectDelay,
		paramKeepAliveTmo: &out.KeepAliveTmo, paramNrIOQueues: &out.NrIOQueues,
	} {
		v, ok := volCtx[key]
		if !ok {
			continue
		}
		n, err := parseConnectOption(key, v)
		if err != nil {
			return out, fmt.Errorf("volume context: %w", err)
		}
		*dst = n
	}
	return out, nil
}
