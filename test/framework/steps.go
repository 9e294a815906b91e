package framework

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// GuestStepPort is the port a guest job reaches the host's step server at
// (10.0.3.100:GuestStepPort through guestfwd), see RunGuestWithSteps.
const GuestStepPort = 8080

// GuestStepFunctions is a busybox-sh library for guest jobs run by
// RunGuestWithSteps: `step NAME` asks the host to run its handler for NAME
// and returns once the handler has finished (0 when it succeeded), printing
// the handler's answer (busybox 1.35's wget waits up to 900 s by default;
// its -T option crashes). Run it in the background (`step NAME &`) to let the
// host act while the job goes on, then `wait` for it.
const GuestStepFunctions = `
step() {
	wget -q -O - "http://10.0.3.100:8080/$1"
}
`

type guestStep struct {
	name  string
	reply chan error
}

// RunGuestWithSteps is RunGuest for jobs that need the host to act between
// (or during) their phases: each `step NAME` the job runs calls handle(NAME)
// on the calling goroutine (so handle may use t.Fatalf), one at a time, in
// the order they arrive. A handler error fails the test and makes the
// guest's step fail. When handle stops the test, the guest is stopped too.
//
// t may be a ginkgo GinkgoTB(): a failure of the guest (which runs on a
// goroutine of its own) is raised again on the caller's goroutine, where
// ginkgo's Fail can panic safely.
func RunGuestWithSteps(t testing.TB, opts GuestOptions, handle func(step string) error) GuestResult {
	t.Helper()
	steps := make(chan guestStep)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen for guest steps: %v", err)
	}
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s := guestStep{name: strings.TrimPrefix(r.URL.Path, "/"), reply: make(chan error, 1)}
			select {
			case steps <- s:
			case <-r.Context().Done():
				return
			}
			if err := <-s.reply; err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_, _ = fmt.Fprintf(w, "step %s done\n", s.name)
		}),
	}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()

	fwd := map[int]int{GuestStepPort: ln.Addr().(*net.TCPAddr).Port}
	for g, h := range opts.GuestForwards {
		fwd[g] = h
	}
	opts.GuestForwards = fwd
	stop := make(chan struct{})
	opts.Stop = stop
	done := make(chan struct{})
	var res GuestResult
	var guestPanic any
	go func() {
		defer close(done)
		// A ginkgo failure panics; on this goroutine nothing would recover
		// it, so it is kept and raised again by the caller.
		defer func() { guestPanic = recover() }()
		res = RunGuest(t, opts)
	}()
	// Should handle stop the test (t.Fatalf), the guest is stopped and
	// waited for before the test's clean-up runs.
	defer func() {
		close(stop)
		<-done
	}()
	for {
		select {
		case s := <-steps:
			if err := runStep(s, handle); err != nil {
				t.Errorf("guest step %s: %v", s.name, err)
			}
		case <-done:
			if guestPanic != nil {
				panic(guestPanic)
			}
			return res
		}
	}
}

// runStep calls handle and answers the guest, also when handle stops the
// test (t.Fatalf ends this goroutine through runtime.Goexit).
func runStep(s guestStep, handle func(string) error) (err error) {
	err = errors.New("the host's handler stopped the test")
	defer func() { s.reply <- err }()
	err = handle(s.name)
	return err
}
