package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/faultinject"
)

// Options say how to run the operator.
type Options struct {
	// Config reaches the API server; Scheme knows the operator's kinds.
	Config *rest.Config
	Scheme *runtime.Scheme
	// Script, when set, wraps the manager's client: its faults apply and
	// its calls are recorded. A Crash fault stops the operator.
	Script *faultinject.Script
	// Namespaces, when set, limits the manager's cache to them.
	Namespaces []string
	// CacheConfig, when set, is the apiserver the manager's cache lists
	// and watches through (every cached read); WriteConfig, when set, the
	// one its client writes through. Config stays the one live reads
	// (GetAPIReader) go to. A lagging apiserver behind CacheConfig makes
	// the operator decide on the stale views that apiserver serves.
	CacheConfig, WriteConfig *rest.Config
	// Operator configures the operator itself; SkipNameValidation is
	// always set, as several managers run in one process.
	Operator controller.Options
}

// Running is an operator running in this process.
type Running struct {
	*controller.Operator
	// Cache is the manager's informer cache: reading it costs the API
	// server nothing.
	Cache cache.Cache

	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
	conns  *conns
}

// own returns a copy of cfg whose connections are dialled by cs and whose
// transport is its own. client-go shares one transport, and so one
// connection pool, among every config with the same TLS settings: an
// operator started again in this process would inherit the pooled
// connections of the one it replaces, which a restarted process never
// does. A Proxy function makes the config uncacheable; this one is
// client-go's default, so nothing else changes.
func own(cfg *rest.Config, cs *conns) *rest.Config {
	c := rest.CopyConfig(cfg)
	if c.Proxy == nil {
		c.Proxy = utilnet.NewProxierWithNoProxyCIDR(http.ProxyFromEnvironment)
	}
	c.Dial = cs.DialContext
	return c
}

// Start sets the operator up and starts it; it runs until ctx is done or
// Stop is called.
func Start(ctx context.Context, o Options) (_ *Running, err error) {
	if o.Config == nil {
		return nil, errors.New("operator: Options.Config is nil")
	}
	cs := newConns()
	defer func() {
		if err != nil {
			cs.closeAll()
		}
	}()
	cfg := own(o.Config, cs)
	opts := manager.Options{
		Scheme:                 o.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if len(o.Namespaces) > 0 {
		nss := map[string]cache.Config{}
		for _, ns := range o.Namespaces {
			nss[ns] = cache.Config{}
		}
		opts.Cache = cache.Options{DefaultNamespaces: nss}
	}
	if o.CacheConfig != nil {
		cacheCfg := own(o.CacheConfig, cs)
		opts.NewCache = func(_ *rest.Config, co cache.Options) (cache.Cache, error) {
			co.HTTPClient = nil // one for CacheConfig's apiserver
			return cache.New(cacheCfg, co)
		}
	}
	newClient := client.New
	if o.WriteConfig != nil {
		writeCfg := own(o.WriteConfig, cs)
		newClient = func(_ *rest.Config, co client.Options) (client.Client, error) {
			co.HTTPClient = nil // one for WriteConfig's apiserver
			return client.New(writeCfg, co)
		}
	}
	opts.NewClient = newClient
	if o.Script != nil {
		opts.NewClient = func(cfg *rest.Config, co client.Options) (client.Client, error) {
			c, err := newClient(cfg, co)
			if err != nil {
				return nil, err
			}
			return faultinject.WrapClient(c, o.Script), nil
		}
	}
	mgr, err := manager.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("operator: manager: %w", err)
	}
	o.Operator.SkipNameValidation = true
	op, err := controller.Setup(mgr, o.Operator)
	if err != nil {
		return nil, fmt.Errorf("operator: setup: %w", err)
	}
	mctx, cancel := context.WithCancel(ctx)
	r := &Running{Operator: op, Cache: mgr.GetCache(), cancel: cancel, done: make(chan error, 1), conns: cs}
	go func() { r.done <- mgr.Start(mctx) }()
	if o.Script != nil {
		o.Script.OnCrash = cancel
	}
	return r, nil
}

// WaitForCacheSync waits until the cache has listed what it watches, so
// that reads of it mean something.
func (r *Running) WaitForCacheSync(ctx context.Context) error {
	if r.Cache.WaitForCacheSync(ctx) {
		return nil
	}
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("operator: the cache did not sync: %w", err)
	}
	return errors.New("operator: the cache stopped before it synced")
}

// Stop stops the operator, waits until it has, and closes its connections
// (to the apiservers and PostgreSQL), as the process's exit would; it
// returns the manager's error, if any. Later calls return the same.
func (r *Running) Stop() error {
	r.once.Do(func() {
		r.cancel()
		r.err = <-r.done
		_ = r.Pool.Close() // what a late close fails on is gone with the process's state
		r.conns.closeAll()
	})
	return r.err
}

// Crash stops the operator's manager without waiting, as a Script's Crash
// fault does: callable from a reconcile goroutine. Stop still waits.
func (r *Running) Crash() { r.cancel() }
