package check

import (
	"context"
	"fmt"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// Release removes the finalizers of every object left in the namespaces,
// whatever its kind (listed as metadata through discovery), so that a
// deletion a test saw fail can still end and the next test start clean.
// It is what every check run does at its end; harnesses with their own
// runs (finale's scenarios) use it too. Only for a throwaway cluster: it
// forgets whatever those finalizers were guarding.
func Release(ctx context.Context, cfg *rest.Config, namespaces ...string) error {
	quiet := rest.CopyConfig(cfg)
	quiet.WarningHandler = rest.NoWarnings{} // listing every kind touches deprecated ones
	meta, err := metadata.NewForConfig(quiet)
	if err != nil {
		return fmt.Errorf("check: release: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(quiet)
	if err != nil {
		return fmt.Errorf("check: release: %w", err)
	}
	st := &stack{meta: meta, disc: disc}
	return st.release(ctx, namespaces...)
}
