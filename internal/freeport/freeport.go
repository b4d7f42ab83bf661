package freeport

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
)

// attempts is how many times Retry starts a server on fresh ports before
// it gives up: a port is only free when it is picked, and another process
// on the machine (a parallel test package, say) can bind it before the
// server does.
const attempts = 3

// ErrTaken marks a start that failed because its port was bound by another
// process between the pick and the server's bind; Retry picks again.
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

// Retry calls start with n ports from pick, and again with fresh ones
// while it fails with ErrTaken, at most three times in all; each retry is
// said on log (nil: not said). Any other error, or the last attempt's,
// is returned as it is.
func Retry(log io.Writer, pick func(n int) ([]int, error), n int, start func(ports []int) error) error {
	for attempt := 1; ; attempt++ {
		ports, err := pick(n)
		if err != nil {
			return err
		}
		err = start(ports)
		if err == nil || !errors.Is(err, ErrTaken) || attempt == attempts {
			return err
		}
		if log != nil {
			first, _, _ := strings.Cut(err.Error(), "\n")
			_, _ = fmt.Fprintf(log, "%s; starting again on other ports\n", first)
		}
	}
}
