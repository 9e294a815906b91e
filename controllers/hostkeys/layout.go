package hostkeys

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// A volume's Secret holds one entry per allowed host, its data keys
// prefixed with the host's entry id (Secret keys cannot hold an NQN's
// colons):
//
//	<id>.hostnqn             the host NQN
//	<id>.dhchap-secret       the host's key (proves the host)
//	<id>.dhchap-ctrl-secret  the controller's key (proves the target)
//	<id>.tls-psk             the TLS PSK (pools with dataPath.tls only)
//	<id>.generation          1, then +1 at each rotation
//	<id>.created             when this generation was made (RFC 3339)
const (
	fieldHostNQN    = "hostnqn"
	fieldHost       = "dhchap-secret"
	fieldCtrl       = "dhchap-ctrl-secret"
	fieldPSK        = "tls-psk"
	fieldGeneration = "generation"
	fieldCreated    = "created"
)

// Pair is one host's keys.
type Pair struct {
	HostNQN    string
	Host, Ctrl string
	// PSK is the TLS pre-shared key; "" when the pool does not use TLS.
	PSK        string
	Generation int64
	Created    time.Time
}

// EntryID is the prefix of hostNQN's entry: 16 hex digits of its SHA-256.
func EntryID(hostNQN string) string {
	sum := sha256.Sum256([]byte(hostNQN))
	return hex.EncodeToString(sum[:8])
}

func key(id, field string) string { return id + "." + field }

// NewPair makes generation gen of hostNQN's keys, with a TLS PSK when
// withPSK.
func NewPair(hostNQN string, gen int64, now time.Time, withPSK bool) (Pair, error) {
	h, err := NewSecret()
	if err != nil {
		return Pair{}, err
	}
	c, err := NewSecret()
	if err != nil {
		return Pair{}, err
	}
	p := Pair{HostNQN: hostNQN, Host: h, Ctrl: c, Generation: gen, Created: now.UTC().Truncate(time.Second)}
	if withPSK {
		if p.PSK, err = NewPSK(); err != nil {
			return Pair{}, err
		}
	}
	return p, nil
}

// Put writes p into a Secret's data.
func Put(data map[string][]byte, p Pair) {
	id := EntryID(p.HostNQN)
	data[key(id, fieldHostNQN)] = []byte(p.HostNQN)
	data[key(id, fieldHost)] = []byte(p.Host)
	data[key(id, fieldCtrl)] = []byte(p.Ctrl)
	if p.PSK != "" {
		data[key(id, fieldPSK)] = []byte(p.PSK)
	}
	data[key(id, fieldGeneration)] = []byte(strconv.FormatInt(p.Generation, 10))
	data[key(id, fieldCreated)] = []byte(p.Created.Format(time.RFC3339))
}

// Remove deletes hostNQN's entry.
func Remove(data map[string][]byte, hostNQN string) {
	id := EntryID(hostNQN)
	for _, f := range []string{fieldHostNQN, fieldHost, fieldCtrl, fieldPSK, fieldGeneration, fieldCreated} {
		delete(data, key(id, f))
	}
}

// Pairs reads every well-formed entry of a Secret's data, by host NQN;
// a malformed one is left out (the operator then makes it anew).
func Pairs(data map[string][]byte) map[string]Pair {
	out := map[string]Pair{}
	for k, v := range data {
		id, ok := strings.CutSuffix(k, "."+fieldHostNQN)
		if !ok || EntryID(string(v)) != id {
			continue
		}
		if p, err := read(func(f string) (string, bool) {
			b, ok := data[key(id, f)]
			return string(b), ok
		}, string(v)); err == nil {
			out[p.HostNQN] = p
		}
	}
	return out
}

// ForHost reads hostNQN's pair from the secrets a CSI call carries; found
// is false when the map has no entry for it.
func ForHost(secrets map[string]string, hostNQN string) (p Pair, found bool, err error) {
	id := EntryID(hostNQN)
	if _, ok := secrets[key(id, fieldHostNQN)]; !ok {
		return Pair{}, false, nil
	}
	p, err = read(func(f string) (string, bool) {
		v, ok := secrets[key(id, f)]
		return v, ok
	}, hostNQN)
	return p, true, err
}

func read(get func(field string) (string, bool), hostNQN string) (Pair, error) {
	p := Pair{HostNQN: hostNQN}
	var ok bool
	if p.Host, ok = get(fieldHost); !ok {
		return p, fmt.Errorf("host %s: no %s", hostNQN, fieldHost)
	}
	if p.Ctrl, ok = get(fieldCtrl); !ok {
		return p, fmt.Errorf("host %s: no %s", hostNQN, fieldCtrl)
	}
	for _, s := range []string{p.Host, p.Ctrl} {
		if err := CheckSecret(s); err != nil {
			return p, fmt.Errorf("host %s: %w", hostNQN, err)
		}
	}
	if psk, ok := get(fieldPSK); ok {
		if err := CheckPSK(psk); err != nil {
			return p, fmt.Errorf("host %s: %w", hostNQN, err)
		}
		p.PSK = psk
	}
	g, _ := get(fieldGeneration)
	gen, err := strconv.ParseInt(g, 10, 64)
	if err != nil || gen < 1 {
		return p, fmt.Errorf("host %s: generation %q is not a positive number", hostNQN, g)
	}
	p.Generation = gen
	c, _ := get(fieldCreated)
	if p.Created, err = time.Parse(time.RFC3339, c); err != nil {
		return p, fmt.Errorf("host %s: created %q: %w", hostNQN, c, err)
	}
	return p, nil
}

// PVSecretPrefix starts the name of a CSI volume's host-keys Secret; the
// StorageClass names it with the template rackcache-keys-${pv.name}.
const PVSecretPrefix = "rackcache-keys-"

// SecretNameForPV is the host-keys Secret of the CSI volume whose PV is
// named pv; "" when that is no valid Secret name (a PV name always gives
// one; a CSI caller other than the kubelet's provisioner may not: the
// operator's default name is used then, and the StorageClass template
// cannot reach it).
func SecretNameForPV(pv string) string {
	if name := PVSecretPrefix + pv; len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	return ""
}
