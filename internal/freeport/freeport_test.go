package freeport

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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

// Retry picks fresh ports for each attempt, only while the start lost its
// port, and gives up after three attempts with the last error.
func TestRetry(t *testing.T) {
	errOther := errors.New("bad flag")
	taken := fmt.Errorf("etcd exited\nlast lines: bind: %w", ErrTaken)
	for name, tc := range map[string]struct {
		errs      []error // start's answers, in order
		wantTries int
		wantErr   error
		wantLog   string
	}{
		"started":               {errs: []error{nil}, wantTries: 1},
		"taken, then started":   {errs: []error{taken, nil}, wantTries: 2, wantLog: "etcd exited; starting again on other ports\n"},
		"another error at once": {errs: []error{errOther}, wantTries: 1, wantErr: errOther},
		"taken every time":      {errs: []error{taken, taken, taken, nil}, wantTries: 3, wantErr: ErrTaken, wantLog: strings.Repeat("etcd exited; starting again on other ports\n", 2)},
	} {
		t.Run(name, func(t *testing.T) {
			var log strings.Builder
			var picked [][]int
			pick := func(n int) ([]int, error) {
				picked = append(picked, []int{len(picked)})
				return picked[len(picked)-1], nil
			}
			tries := 0
			err := Retry(&log, pick, 1, func(ports []int) error {
				if diff := cmp.Diff([]int{tries}, ports); diff != "" {
					t.Errorf("attempt %d's ports (-want +got):\n%s", tries+1, diff)
				}
				tries++
				return tc.errs[tries-1]
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("Retry = %v, want %v", err, tc.wantErr)
			}
			if tries != tc.wantTries {
				t.Errorf("%d attempts, want %d", tries, tc.wantTries)
			}
			if diff := cmp.Diff(tc.wantLog, log.String()); diff != "" {
				t.Errorf("log (-want +got):\n%s", diff)
			}
		})
	}
}
