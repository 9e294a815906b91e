package dashboard

// ring is a fixed-size buffer keeping the newest values: the history must
// stay bounded however long the operator runs.
type ring[T any] struct {
	buf  []T
	next int
	full bool
}

func newRing[T any](size int) *ring[T] {
	return &ring[T]{buf: make([]T, size)}
}

// push adds v, dropping the oldest value when the buffer is full.
func (r *ring[T]) push(v T) {
	r.buf[r.next] = v
	r.next++
	if r.next == len(r.buf) {
		r.next = 0
		r.full = true
	}
}

// items returns a copy of the values, oldest first, so that callers may
// keep it after the lock is released.
func (r *ring[T]) items() []T {
	if !r.full {
		return append([]T(nil), r.buf[:r.next]...)
	}
	out := make([]T, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}
