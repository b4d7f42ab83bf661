package controlplane

import (
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/finale-dev/finale/internal/freeport"
)

// A port picked as free and bound by another process before etcd binds it
// (a parallel test package, as on CI) costs one more attempt on fresh
// ports, not the start of the control plane.
func TestStartTriesAgainWhenAPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port

	var mu sync.Mutex
	picks := 0
	pickPorts = func(n int) ([]int, error) {
		mu.Lock()
		defer mu.Unlock()
		picks++
		ps, err := freeport.Ports(n)
		if err == nil && picks == 1 {
			ps[1] = port // etcd's peer port, as in the CI run that failed
		}
		return ps, err
	}
	defer func() { pickPorts = freeport.Ports }()

	var log strings.Builder
	cp, err := Start(t.Context(), Options{Log: &lockedWriter{w: &log}})
	if err != nil {
		t.Fatalf("Start with a taken port: %v", err)
	}
	defer func() { _ = cp.Stop() }()
	if picks != 2 {
		t.Errorf("ports picked %d times, want 2 (the taken port, then fresh ones)", picks)
	}
	if !strings.Contains(log.String(), "starting again on other ports") {
		t.Errorf("the retry was not said; log:\n%s", log.String())
	}
}

// The same for a second kube-apiserver: its one port taken before it
// binds costs another attempt on a fresh one.
func TestAddAPIServerTriesAgainWhenThePortIsTaken(t *testing.T) {
	cp, err := Start(t.Context(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cp.Stop() }()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	picks := 0
	pickPorts = func(n int) ([]int, error) {
		picks++
		if picks == 1 {
			return []int{taken.Addr().(*net.TCPAddr).Port}, nil
		}
		return freeport.Ports(n)
	}
	defer func() { pickPorts = freeport.Ports }()
	if _, err := cp.AddAPIServer(t.Context()); err != nil {
		t.Fatalf("AddAPIServer with a taken port: %v", err)
	}
	if picks != 2 {
		t.Errorf("ports picked %d times, want 2 (the taken port, then a fresh one)", picks)
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
