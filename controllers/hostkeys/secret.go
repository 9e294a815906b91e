// Package hostkeys holds the DH-HMAC-CHAP keys of a volume's hosts: how a
// secret is generated (the DHHC-1 interchange format of NVMe Base 2.x and
// nvme-cli's gen-dhchap-key) and how the pairs are laid out in the
// volume's Secret, which the operator writes and the CSI node plugin
// receives from the kubelet (node-stage and node-publish secrets).
package hostkeys

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
)

// keyBytes: 32 random bytes, the length of the SHA-256 transformation
// ("01") both ends apply to the key with the host's NQN.
const keyBytes = 32

// NewSecret returns a fresh secret: DHHC-1:01:<base64(key || crc32(key))>:
// (the CRC little-endian, as the format says).
func NewSecret() (string, error) {
	buf := make([]byte, keyBytes, keyBytes+4)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("generate a DH-HMAC-CHAP key: %w", err)
	}
	buf = binary.LittleEndian.AppendUint32(buf, crc32.ChecksumIEEE(buf))
	return "DHHC-1:01:" + base64.StdEncoding.EncodeToString(buf) + ":", nil
}

// CheckSecret tells whether s is a well-formed DHHC-1 secret (length and
// CRC), without saying anything of its value.
func CheckSecret(s string) error {
	parts := strings.Split(s, ":")
	if len(parts) != 4 || parts[0] != "DHHC-1" || parts[3] != "" {
		return fmt.Errorf("not a DHHC-1:<hash>:<base64>: secret")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil {
		return fmt.Errorf("DHHC-1 secret: the key is not base64")
	}
	n := len(raw) - 4
	if n != 32 && n != 48 && n != 64 {
		return fmt.Errorf("DHHC-1 secret: a key of %d bytes (32, 48 or 64)", max(n, 0))
	}
	if crc32.ChecksumIEEE(raw[:n]) != binary.LittleEndian.Uint32(raw[n:]) {
		return fmt.Errorf("DHHC-1 secret: CRC mismatch")
	}
	return nil
}
