package service_test

import (
	"fmt"
	"os"

	"github.com/finale-dev/finale/examples/keys/service"
)

// Start the service on loopback, in a data directory of its own: a new
// directory is a new deployment, with an ID of its own.
func ExampleStart() {
	dir, _ := os.MkdirTemp("", "keys-example")
	defer os.RemoveAll(dir)
	srv, err := service.Start("127.0.0.1:0", service.Options{Token: "example-token-0123456789", Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	fmt.Println(len(srv.Deployment()) > 0, len(srv.Keys()))

	_, err = service.Start("0.0.0.0:8080", service.Options{Token: "example-token-0123456789", Dir: dir})
	fmt.Println(err)
	// Output:
	// true 0
	// service: the key service listens on loopback only: "0.0.0.0:8080" is not 127.0.0.1, ::1 or localhost
}
