package freeport_test

import (
	"fmt"
	"os"

	"github.com/finale-dev/finale/internal/freeport"
)

// A caller starts its server on picked ports; a start whose server's log
// says another process took a port first is tried again on fresh ones.
func ExampleRetry() {
	tries := 0
	err := freeport.Retry(os.Stdout, freeport.Ports, 2, func(ports []int) error {
		tries++
		log := "listen tcp: bind: address already in use" // the server's log tail
		if tries == 1 && freeport.Taken(log) {
			return fmt.Errorf("demo: server exited (%w)", freeport.ErrTaken)
		}
		return nil
	})
	fmt.Println(tries, "tries:", err)
	// Output:
	// demo: server exited (a port picked as free was taken before the server bound it); starting again on other ports
	// 2 tries: <nil>
}
