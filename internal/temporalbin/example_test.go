package temporalbin_test

import (
	"context"
	"fmt"
	"os"

	"github.com/finale-dev/finale/internal/temporalbin"
)

// A Temporal server for a test binary: built once into the cache, started
// as a child process, stopped at the end. (Not run as a test: the
// package's tests start the real server already.)
func ExampleStart() {
	s, err := temporalbin.Start(context.Background(), temporalbin.Options{Log: os.Stderr})
	if err != nil {
		panic(err)
	}
	defer func() { _ = s.Stop() }()
	fmt.Println("frontend", s.HostPort, "namespace", s.Namespace)
}
