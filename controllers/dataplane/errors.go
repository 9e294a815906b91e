package dataplane

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// JSON-RPC error codes the dataplane uses (SPDK's).
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// Failures of the operation itself come back as a negative errno, as SPDK
// reports them (Linux numbering; see dataplane/daemon/src/rpc/error.rs).
const (
	CodeNotPermitted = -1   // EPERM
	CodeNoEntry      = -2   // ENOENT: no such cluster, subsystem of a config
	CodeIO           = -5   // EIO: the device or a flush failed
	CodeBusy         = -16  // EBUSY: in use (claimed bdev, cluster with bdevs)
	CodeExists       = -17  // EEXIST: name already taken
	CodeNoDevice     = -19  // ENODEV: no such bdev
	CodeInvalid      = -22  // EINVAL: bad argument for the operation
	CodeNoSpace      = -28  // ENOSPC: the cache device is full
	CodeNotEmpty     = -39  // ENOTEMPTY: a cache device holds another signature
	CodeNotSupported = -95  // ENOTSUP
	CodeCorrupt      = -117 // EUCLEAN: damaged cache metadata, refused
	CodeNoKey        = -126 // ENOKEY: no such key in the keyring
)

// RPCError is an error answer from the dataplane: Code is the JSON-RPC or
// negated errno code, Message the dataplane's text (secrets cut out).
type RPCError struct {
	Method  string
	Code    int
	Message string
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("dataplane %s: %s (code %d)", e.Method, e.Message, e.Code)
}

// IsCode reports whether err is a dataplane answer with one of codes.
func IsCode(err error, codes ...int) bool {
	var e *RPCError
	if !errors.As(err, &e) {
		return false
	}
	for _, c := range codes {
		if e.Code == c {
			return true
		}
	}
	return false
}

// IsNotFound: the object named does not exist (bdevs answer ENODEV,
// clusters ENOENT). The nvmf methods answer unknown subsystems, namespaces
// and hosts as SPDK does, with CodeInvalidParams, which this does not match:
// read the subsystem (Subsystems) to tell.
func IsNotFound(err error) bool { return IsCode(err, CodeNoDevice, CodeNoEntry, CodeNoKey) }

// IsExists: the name is taken (bdevs, clusters, cached volumes). As with
// IsNotFound, the nvmf methods answer duplicates with CodeInvalidParams.
func IsExists(err error) bool { return IsCode(err, CodeExists) }

// IsBusy: the object is in use (a claimed bdev, a cluster with bdevs, a
// cached bdev in the middle of a flush); remove the user first or retry.
func IsBusy(err error) bool { return IsCode(err, CodeBusy) }

// IsNoSpace: the cache device has no room for the volume.
func IsNoSpace(err error) bool { return IsCode(err, CodeNoSpace) }

// IsNotBlank: the cache device holds a signature (a filesystem, a
// partition table, ...) and was not formatted; force_format erases it.
func IsNotBlank(err error) bool { return IsCode(err, CodeNotEmpty) }

// IsCorrupt: cache metadata is damaged where it may hold the newest
// version; the device or volume was refused, nothing changed.
func IsCorrupt(err error) bool { return IsCode(err, CodeCorrupt) }

// IsInvalid: the request was refused as malformed or not applicable
// (JSON-RPC invalid params, or EINVAL from the operation).
func IsInvalid(err error) bool { return IsCode(err, CodeInvalidParams, CodeInvalid) }

// IsMethodNotFound: the dataplane does not know the method (an older
// version).
func IsMethodNotFound(err error) bool { return IsCode(err, CodeMethodNotFound) }

// Secret is a credential (a cephx key). It prints, logs, formats and
// JSON-encodes as "<redacted>", so a request struct may be logged whole by
// any logger; the client sends the value itself as a plain string.
type Secret string

const redacted = "<redacted>"

func (Secret) String() string               { return redacted }
func (Secret) GoString() string             { return redacted }
func (Secret) LogValue() slog.Value         { return slog.StringValue(redacted) }
func (s Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// MarshalJSON keeps JSON loggers from writing the value.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// redactedError is an error whose text had secrets cut out; the chain
// below stays reachable for errors.Is/As.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redact cuts token and secrets out of err's text.
func redact(err error, token string, secrets []Secret) error {
	words := make([]string, 0, len(secrets)+1)
	if token != "" {
		words = append(words, token)
	}
	for _, s := range secrets {
		if s != "" {
			words = append(words, string(s))
		}
	}
	clean := func(s string) string {
		for _, w := range words {
			s = strings.ReplaceAll(s, w, redacted)
		}
		return s
	}
	var e *RPCError
	// do returns an *RPCError bare, so rebuilding it loses nothing.
	if errors.As(err, &e) {
		return &RPCError{Method: e.Method, Code: e.Code, Message: clean(e.Message)}
	}
	if msg := err.Error(); clean(msg) != msg {
		return &redactedError{msg: clean(msg), err: err}
	}
	return err
}
