package keyclient_test

import (
	"context"
	"fmt"
	"os"

	"github.com/finale-dev/finale/examples/keys/keyclient"
	"github.com/finale-dev/finale/examples/keys/service"
)

// Create a key carrying an ownership tag, list by the tag, delete.
func Example() {
	dir, _ := os.MkdirTemp("", "keys-example")
	defer os.RemoveAll(dir)
	srv, err := service.Start("", service.Options{Token: "example-token-0123456789", Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	ctx := context.Background()
	c, err := keyclient.New(srv.URL, "example-token-0123456789", keyclient.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	k, err := c.Create(ctx, "team-a", service.KeySpec{Name: "ci", Scopes: []string{"write", "read"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	keys, _ := c.List(ctx, "team-a")
	fmt.Println(len(keys), keys[0].Name, keys[0].Scopes)
	_ = c.Delete(ctx, k.ID, "team-b") // another tag: the key stays
	_ = c.Delete(ctx, k.ID, "team-a")
	keys, _ = c.List(ctx, "team-a")
	fmt.Println(len(keys))
	// Output:
	// 1 ci [read write]
	// 0
}
