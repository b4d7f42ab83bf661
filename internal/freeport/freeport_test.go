package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPortsAreDistinctAndFree(t *testing.T) {
	ps, err := Ports(4)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ps {
		if seen[p] {
			t.Fatalf("port %d picked twice in %v", p, ps)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d is not free after the pick: %v", p, err)
		}
		_ = l.Close()
	}
}

func TestTaken(t *testing.T) {
	cases := map[string]bool{
		`{"msg":"creating peer listener failed","error":"listen tcp 127.0.0.1:39327: bind: address already in use"}`: true,
		`LOG:  could not bind IPv4 address "127.0.0.1": Address already in use`:                                      true,
		`FATAL:  could not create any TCP/IP sockets`:                                                                false,
		`etcd: start: permission denied`:                                                                             false,
	}
	for log, want := range cases {
		if got := Taken(log); got != want {
			t.Errorf("Taken(%q) = %v, want %v", log, got, want)
		}
	}
}
