// Command keyservice runs the example key service (examples/keys/service)
// on a loopback address:
//
//	KEYSERVICE_TOKEN=$(head -c 24 /dev/urandom | base64) \
//	  go run ./examples/keys/cmd/keyservice -listen 127.0.0.1:8080 -dir /tmp/keys
//
// -mode id-only serves the G2 seed's shape (service.ModeIDOnly): no
// challenge, deletes by ID only.
//
// It prints the URL it serves once it listens, and stops on SIGINT or
// SIGTERM. The bearer token comes from $KEYSERVICE_TOKEN or -token-file.
//
// With -list it serves nothing: it prints every key the data directory
// holds, one "ID TAG" line each, and exits (an admin's view; the HTTP API
// lists by tag only). finale check runs it so as its probe
// (examples/keys/check/operator.yaml).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/finale-dev/finale/examples/keys/service"
)

// TokenEnv is the environment variable holding the bearer token.
const TokenEnv = "KEYSERVICE_TOKEN"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "keyservice:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("keyservice", flag.ContinueOnError)
	fs.SetOutput(out)
	listen := fs.String("listen", "127.0.0.1:8080", "loopback `host:port` to listen on (127.0.0.1, ::1 or localhost)")
	dir := fs.String("dir", "", "data `directory`: deployment ID and keys (required; a new one is a new deployment)")
	ids := fs.String("identity-dir", "", "`directory` of enrolled identities; empty is -dir")
	tokenFile := fs.String("token-file", "", "`file` holding the bearer token; empty reads $"+TokenEnv)
	mode := fs.String("mode", string(service.ModeChallenge), "API `shape`: "+string(service.ModeChallenge)+" (proves its deployment by a challenge, deletes by tag) or "+string(service.ModeIDOnly)+" (the G2 seed's shape: deployment ID only, delete by ID)")
	list := fs.Bool("list", false, "print every key in -dir (one \"ID TAG\" line each) and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *list {
		if *dir == "" {
			return errors.New("-list needs -dir")
		}
		keys, err := service.ReadKeys(*dir)
		if err != nil {
			return err
		}
		for _, k := range keys {
			fmt.Fprintf(out, "%s %s\n", k.ID, k.Tag)
		}
		return nil
	}
	token := getenv(TokenEnv)
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return err
		}
		token = string(b)
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return errors.New("no bearer token: set $" + TokenEnv + " or -token-file")
	}
	srv, err := service.Start(*listen, service.Options{Token: token, Dir: *dir, IdentityDir: *ids, Mode: service.Mode(*mode)})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "serving %s (deployment %s, mode %s)\n", srv.URL, srv.Deployment(), srv.Mode())
	<-ctx.Done()
	return srv.Close()
}
