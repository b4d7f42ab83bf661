// Command etcd runs a single-member etcd for finale's local control plane.
//
// It is a thin flag layer over go.etcd.io/etcd/server/v3/embed so that the
// version is the one Kubernetes v1.33.13 pins (v3.5.21) and the binary builds from the
// Go module proxy alone. It serves plain HTTP on loopback: the control plane
// is a throwaway for tests and the demo, never a production store.
package main

import (
	"flag"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "directory for etcd's data (required)")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "client URL to listen on and advertise")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "peer URL to listen on and advertise")
	noFsync := flag.Bool("unsafe-no-fsync", true, "skip fsync: faster, and safe enough for a throwaway store")
	flag.Parse()
	if *dataDir == "" {
		log.Fatal("etcd: --data-dir is required")
	}

	cfg := embed.NewConfig()
	cfg.Name = "finale"
	cfg.Dir = *dataDir
	cfg.UnsafeNoFsync = *noFsync
	cfg.LogLevel = "warn"
	cu := mustURL(*clientURL)
	pu := mustURL(*peerURL)
	cfg.ListenClientUrls = []url.URL{cu}
	cfg.AdvertiseClientUrls = []url.URL{cu}
	cfg.ListenPeerUrls = []url.URL{pu}
	cfg.AdvertisePeerUrls = []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("etcd: start: %v", err)
	}
	defer e.Close()
	<-e.Server.ReadyNotify()
	log.Printf("etcd: ready, serving %s", cu.String())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case s := <-sig:
		log.Printf("etcd: %v, stopping", s)
	case err := <-e.Err():
		log.Fatalf("etcd: %v", err)
	}
}

func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		log.Fatalf("etcd: bad URL %q: %v", s, err)
	}
	return *u
}
