package clientpool

import (
	"context"
	"testing"
	"time"
)

// TestAbandonAfterLastReleaseCloses: a bounded call whose fn returns as
// its bound and grace run out can drop its reference (finish) after the
// abandon has won the call but before it evicts the client. The evicted
// client has then no reference left, and the abandon must close it:
// nothing else will.
func TestAbandonAfterLastReleaseCloses(t *testing.T) {
	closed := make(chan int, 1)
	p, err := New(Options[string, int]{
		Name:  "abandon-after-release",
		Dial:  DialFn[string, int](func(context.Context, string) (int, error) { return 1, nil }),
		Close: CloseFn[int](func(c int) error { closed <- c; return nil }),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	e, err := p.acquire(t.Context(), "k", p.dial)
	if err != nil {
		t.Fatal(err)
	}
	p.release(e)            // the abandoned fn returned and finished first
	p.abandon("k", e, true) // then the abandon evicts the client
	if n := p.Len(); n != 0 {
		t.Fatalf("Len after the abandon: %d, want 0 (evicted)", n)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the evicted client was not closed within 10 s")
	}
}
