package cachepool

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/servers"
)

// ConfigKey is the ConfigMap key holding the dataplane's start-up
// configuration; the DaemonSet passes it to --config.
const ConfigKey = "config.json"

// cacheBlockSize is the block size of the cache devices' aio bdevs: 4 KiB
// is what NVMe SSDs expose and the smallest cache block the pool allows.
const cacheBlockSize = 4096

// The start-up configuration in SPDK's save_config layout, which the
// dataplane's --config replays call by call.
type dataplaneConfig struct {
	Subsystems []configSubsystem `json:"subsystems"`
}

type configSubsystem struct {
	Subsystem string       `json:"subsystem"`
	Config    []configCall `json:"config"`
}

type configCall struct {
	Method string `json:"method"`
	Params any    `json:"params"`
}

// aioCreateParams are the bdev_aio_create parameters the operator sets
// (the dataplane refuses unknown ones).
type aioCreateParams struct {
	Name      string `json:"name"`
	Filename  string `json:"filename"`
	BlockSize uint32 `json:"block_size"`
}

// renderDataplaneConfig is the start-up configuration of pool's servers:
// one aio bdev per cache device, named servers.CacheBdevName(i). Volumes
// are not in it: each server persists its own (--config-persist), and the
// CachedVolume reconciler creates them.
func renderDataplaneConfig(pool *rcv1.CachePool) ([]byte, error) {
	calls := make([]configCall, 0, len(pool.Spec.Devices))
	for i, d := range pool.Spec.Devices {
		calls = append(calls, configCall{
			Method: "bdev_aio_create",
			Params: aioCreateParams{Name: servers.CacheBdevName(i), Filename: d.Path, BlockSize: cacheBlockSize},
		})
	}
	cfg := dataplaneConfig{Subsystems: []configSubsystem{{Subsystem: "bdev", Config: calls}}}
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the dataplane configuration of pool %s: %w", pool.Name, err)
	}
	return out, nil
}

// configHash names a configuration's content; the DaemonSet's pod template
// carries it so a device change rolls the pods.
func configHash(config []byte) string {
	sum := sha256.Sum256(config)
	return hex.EncodeToString(sum[:])[:16]
}

// desiredConfigMap is the ConfigMap holding pool's start-up configuration.
func desiredConfigMap(pool *rcv1.CachePool, namespace string, config []byte) *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap(servers.ConfigMapName(pool.Name), namespace).
		WithLabels(servers.Labels(pool.Name)).
		WithOwnerReferences(ownerReference(pool)).
		WithData(map[string]string{ConfigKey: string(config)})
}
