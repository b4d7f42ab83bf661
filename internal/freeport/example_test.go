package freeport_test

import (
	"fmt"

	"github.com/finale-dev/finale/internal/freeport"
)

// A caller starts its server on picked ports and picks again when the
// server's log says another process took one first.
func Example() {
	for range freeport.Attempts {
		ports, err := freeport.Ports(2)
		if err != nil {
			fmt.Println(err)
			return
		}
		log := "listen tcp: bind: address already in use" // the server's log tail
		if freeport.Taken(log) {
			continue
		}
		_ = ports
	}
	fmt.Println("gave up after", freeport.Attempts, "attempts")
	// Output: gave up after 3 attempts
}
