package freeport

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// Attempts is how many times a caller starts a server on fresh ports
// before it gives up: a port is only free when it is picked, and another
// process on the machine (a parallel test package, say) can bind it before
// the server does.
const Attempts = 3

// ErrTaken marks a start that failed because its port was bound by another
// process between the pick and the server's bind; the caller picks again.
var ErrTaken = errors.New("a port picked as free was taken before the server bound it")

// Ports returns n distinct loopback ports that were free when picked.
func Ports(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close() // only held to keep the ports distinct
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Taken reports whether a server's log says its bind failed because the
// address was in use: Go's servers (etcd, kube-apiserver) write "bind:
// address already in use", PostgreSQL "Address already in use".
func Taken(log string) bool {
	return strings.Contains(strings.ToLower(log), "address already in use")
}
