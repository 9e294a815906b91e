package csi

import "sync"

// volumeLocks serialises the calls on one volume (or snapshot) id. A call
// that finds the id held returns Aborted at once rather than waiting: the
// sidecars retry, and a hung call never piles up others behind it.
type volumeLocks struct {
	mu   sync.Mutex
	held map[string]struct{}
}

func newVolumeLocks() *volumeLocks {
	return &volumeLocks{held: map[string]struct{}{}}
}

// tryAcquire takes the lock of id; false when another call holds it.
func (l *volumeLocks) tryAcquire(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, busy := l.held[id]; busy {
		return false
	}
	l.held[id] = struct{}{}
	return true
}

// release gives the lock of id back.
func (l *volumeLocks) release(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.held, id)
}

// lock takes the lock of id or returns ErrBusy; call the returned function
// to release it.
func (l *volumeLocks) lock(id string) (func(), error) {
	if !l.tryAcquire(id) {
		return nil, errorf(ErrBusy, "%s", id)
	}
	return func() { l.release(id) }, nil
}

// lockVolume parses a volume id and takes its lock (Aborted when another
// call holds it); call the returned function to release it.
func (d *Driver) lockVolume(raw string) (volumeID, func(), error) {
	id, err := parseVolumeID(raw)
	if err != nil {
		return id, nil, err
	}
	unlock, err := d.locks.lock(id.String())
	if err != nil {
		return id, nil, err
	}
	return id, unlock, nil
}
