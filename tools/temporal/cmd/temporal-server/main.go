// Command temporal-server runs a single-process Temporal server on
// go.temporal.io/server's temporaltest package: SQLite in memory, the
// frontend on 127.0.0.1 and a free port, worker deployment versioning on.
//
// Once the frontend serves, it prints one line to stdout,
//
//	FINALE_TEMPORAL_READY {"frontend":"127.0.0.1:PORT","namespace":"NAME"}
//
// and runs until SIGTERM or SIGINT, when it stops the server and exits 0.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/temporal"
	"go.temporal.io/server/temporaltest"
)

// ReadyPrefix starts the one machine-readable line; internal/temporalbin
// parses what follows it as JSON.
const ReadyPrefix = "FINALE_TEMPORAL_READY "

type ready struct {
	Frontend  string `json:"frontend"`
	Namespace string `json:"namespace"`
}

func main() {
	pollerTTL := flag.Duration("poller-history-ttl", 5*time.Second,
		"how long the server remembers a poller (matching.PollerHistoryTTL); a worker deployment version can be deleted only once it has no pollers, and the server's default of 5 minutes would make every test wait that long")
	flag.Parse()
	if err := run(*pollerTTL); err != nil {
		fmt.Fprintln(os.Stderr, "temporal-server:", err)
		os.Exit(1)
	}
}

func run(pollerTTL time.Duration) error {
	if pollerTTL <= 0 {
		return fmt.Errorf("-poller-history-ttl must be positive, got %v", pollerTTL)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	// The whole set replaces temporaltest's own (a later dynamic config
	// client wins), so its one setting is repeated here.
	dc := dynamicconfig.StaticClient{
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key():    true,
		dynamicconfig.EnableDeploymentVersions.Key():                   true,
		dynamicconfig.FrontendEnableWorkerVersioningWorkflowAPIs.Key(): true,
		dynamicconfig.PollerHistoryTTL.Key():                           pollerTTL,
	}
	ts := temporaltest.NewServer(temporaltest.WithBaseServerOptions(temporal.WithDynamicConfigClient(dc)))
	defer stop(ts)

	if err := waitServing(ts.GetFrontendHostPort(), ts.GetDefaultNamespace()); err != nil {
		return err
	}
	line, err := json.Marshal(ready{Frontend: ts.GetFrontendHostPort(), Namespace: ts.GetDefaultNamespace()})
	if err != nil {
		return err
	}
	fmt.Println(ReadyPrefix + string(line))

	<-sigs
	return nil
}

// waitServing returns once the frontend answers a health check and the
// namespace can be described, so that "ready" means a client's first call
// succeeds.
func waitServing(hostPort, namespace string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		last = probe(ctx, hostPort, namespace)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("frontend %s not serving namespace %s within 60s: %w", hostPort, namespace, errors.Join(last, ctx.Err()))
}

func probe(ctx context.Context, hostPort, namespace string) error {
	c, err := client.DialContext(ctx, client.Options{HostPort: hostPort, Namespace: namespace, Logger: quiet{}})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = c.WorkflowService().DescribeNamespace(ctx, describeNamespace(namespace))
	return err
}

// stop recovers from temporaltest's Stop logging through a nil *testing.T
// when the server's own Stop fails; the process is exiting either way.
func stop(ts *temporaltest.TestServer) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintln(os.Stderr, "temporal-server: stop:", r)
		}
	}()
	ts.Stop()
}
