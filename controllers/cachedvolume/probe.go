package cachedvolume

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"time"
)

// A server whose JSON-RPC does not answer may still serve its hosts: its
// RPC port flooded, its control connection cut while the data network
// works. Promoting its mirror then would be a needless failover. So before
// fencing a lost owner the operator asks its NVMe/TCP portal for an
// Initialize Connection exchange: a dataplane that answers it is alive
// and serving, and the mirror waits.

// probeTimeout bounds one data-path probe.
const probeTimeout = 2 * time.Second

// NVMe/TCP PDU types and the size of the initialize-connection PDUs
// (NVMe/TCP transport specification, "ICReq" and "ICResp").
const (
	pduICReq  = 0x00
	pduICResp = 0x01
	icPDULen  = 128
)

// dataPathAnswers: an ICReq to address:port gets an ICResp within
// probeTimeout. The connection is closed right after, before any Fabrics
// Connect: the target tears such a queue down without a controller.
func dataPathAnswers(ctx context.Context, address string, port int32) bool {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(address, strconv.Itoa(int(port))))
	if err != nil {
		return false
	}
	defer func() { _ = conn.Close() }()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	req := make([]byte, icPDULen)
	req[0] = pduICReq
	req[2] = icPDULen // HLEN
	binary.LittleEndian.PutUint32(req[4:8], icPDULen)
	// PFV 0, HPDA 0, no digests, MAXR2T 0 (one R2T).
	if _, err := conn.Write(req); err != nil {
		return false
	}
	resp := make([]byte, icPDULen)
	if _, err := io.ReadFull(conn, resp); err != nil {
		return false
	}
	return resp[0] == pduICResp && binary.LittleEndian.Uint32(resp[4:8]) == icPDULen
}

func (r *Reconciler) probeDataPath(ctx context.Context, address string, port int32) bool {
	if r.ProbeDataPath != nil {
		return r.ProbeDataPath(ctx, address, port)
	}
	return dataPathAnswers(ctx, address, port)
}
