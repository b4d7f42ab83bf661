package procstat

import (
	"os"
	"testing"
)

func TestRSSOfSelf(t *testing.T) {
	rss, err := RSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// A Go test binary with the race detector is at least a few MiB.
	if rss < 1<<20 {
		t.Fatalf("RSS of self = %d bytes, implausibly small", rss)
	}
	if _, err := RSS(-1); err == nil {
		t.Fatal("RSS(-1) succeeded")
	}
}
