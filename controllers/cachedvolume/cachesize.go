package cachedvolume

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

const mib = 1 << 20

// defaultCacheSize is the API's default, for objects stored before it.
const defaultCacheSize = rcv1.CacheSize("10%")

// ResolveCacheSize is a volume's cache size in bytes: spec.cacheSize as a
// byte quantity or a percentage of spec.size, rounded up to whole MiB (the
// dataplane's unit), so 1% of a small volume is never zero.
func ResolveCacheSize(spec *rcv1.CachedVolumeSpec) (int64, error) {
	cs := spec.CacheSize
	if cs == "" {
		cs = defaultCacheSize
	}
	var bytes *big.Int
	if pct, ok := strings.CutSuffix(string(cs), "%"); ok {
		p, err := strconv.ParseInt(pct, 10, 64)
		if err != nil || p < 1 || p > 100 {
			return 0, fmt.Errorf("cacheSize %q: a percentage must be 1%% to 100%%", cs)
		}
		// Value() rounds a fractional byte count up; big.Int keeps a huge
		// size times the percentage from overflowing.
		bytes = ceilDiv(new(big.Int).Mul(big.NewInt(spec.Size.Value()), big.NewInt(p)), big.NewInt(100))
	} else {
		q, err := resource.ParseQuantity(string(cs))
		if err != nil {
			return 0, fmt.Errorf("cacheSize %q is neither a byte quantity nor a percentage: %w", cs, err)
		}
		bytes = big.NewInt(q.Value())
	}
	if bytes.Sign() <= 0 {
		return 0, fmt.Errorf("cacheSize %q resolves to no bytes", cs)
	}
	mibs := ceilDiv(bytes, big.NewInt(mib))
	if !mibs.IsInt64() || mibs.Int64() > math.MaxInt64/mib {
		return 0, fmt.Errorf("cacheSize %q is too large", cs)
	}
	return mibs.Int64() * mib, nil
}

func ceilDiv(a, b *big.Int) *big.Int {
	q, m := new(big.Int).QuoRem(a, b, new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}
