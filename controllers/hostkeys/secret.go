// Package hostkeys holds the DH-HMAC-CHAP keys (and TLS PSKs) of a
// volume's hosts: how a secret is generated (the DHHC-1 interchange
// format of NVMe Base 2.x and nvme-cli's gen-dhchap-key; the NVMeTLSkey-1
// format of NVMe/TCP and nvme-cli's gen-tls-key) and how they are laid out in the
// volume's Secret, which the operator writes and the CSI node plugin
// receives from the kubelet (node-stage and node-publish secrets).
package hostkeys

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
)

// keyBytes: 32 random bytes, the length of the SHA-256 transformation
// ("01") both ends apply to the key with the host's NQN.
const keyBytes = 32

// NewSecret returns a fresh secret: DHHC-1:01:<base64(key || crc32(key))>:
// (the CRC little-endian, as the format says).
func NewSecret() (string, error) { return newKey("DHHC-1") }

// NewPSK returns a fresh TLS PSK: NVMeTLSkey-1:01:<base64(key || crc32)>:
// (hash 01, SHA-256: the one the dataplane serves).
func NewPSK() (string, error) { return newKey("NVMeTLSkey-1") }

func newKey(format string) (string, error) {
	buf := make([]byte, keyBytes, keyBytes+4)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("generate a %s key: %w", format, err)
	}
	buf = binary.LittleEndian.AppendUint32(buf, crc32.ChecksumIEEE(buf))
	return format + ":01:" + base64.StdEncoding.EncodeToString(buf) + ":", nil
}

// CheckSecret tells whether s is a well-formed DHHC-1 secret (length and
// CRC), without saying anything of its value.
func CheckSecret(s string) error { return checkKey(s, "DHHC-1", []int{32, 48, 64}) }

// CheckPSK tells whether s is a well-formed SHA-256 TLS PSK.
func CheckPSK(s string) error { return checkKey(s, "NVMeTLSkey-1", []int{32}) }

func checkKey(s, format string, sizes []int) error {
	parts := strings.Split(s, ":")
	if len(parts) != 4 || parts[0] != format || parts[3] != "" {
		return fmt.Errorf("not a %s:<hash>:<base64>: key", format)
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil {
		return fmt.Errorf("%s key: not base64", format)
	}
	n := len(raw) - 4
	if !slices.Contains(sizes, n) {
		return fmt.Errorf("%s key: %d bytes (%v expected)", format, max(n, 0), sizes)
	}
	if crc32.ChecksumIEEE(raw[:n]) != binary.LittleEndian.Uint32(raw[n:]) {
		return fmt.Errorf("%s key: CRC mismatch", format)
	}
	return nil
}
