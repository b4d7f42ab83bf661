package pgserver

import (
	"net"
	"testing"

	"github.com/finale-dev/finale/internal/freeport"
)

// A port picked as free and bound by another process before postgres binds
// it costs one more attempt on a fresh port, not the server's start.
func TestStartTriesAgainWhenThePortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	picks := 0
	pickPort = func(n int) ([]int, error) {
		picks++
		if picks == 1 {
			return []int{taken.Addr().(*net.TCPAddr).Port}, nil
		}
		return freeport.Ports(n)
	}
	defer func() { pickPort = freeport.Ports }()

	s, err := Start(t.Context(), Options{Install: true})
	if err != nil {
		t.Fatalf("Start with a taken port: %v", err)
	}
	defer func() { _ = s.Stop() }()
	if picks != 2 {
		t.Errorf("ports picked %d times, want 2 (the taken one, then a fresh one)", picks)
	}
	if s.Port == taken.Addr().(*net.TCPAddr).Port {
		t.Errorf("the server says it listens on the taken port %d", s.Port)
	}
}
