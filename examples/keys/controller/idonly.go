package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/finale-dev/finale/examples/keys/api/v1alpha1"
	"github.com/finale-dev/finale/examples/keys/keyclient"
	"github.com/finale-dev/finale/examples/keys/service"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
)

// IDOnlySalt is the salt every deployment of a service in
// service.ModeIDOnly answers with: such a service keeps no sentinel, so
// there is none of its own to name, and the record's deployment ID is all
// a proof compares.
const IDOnlySalt = "keys-id-only/v1"

// AuthIDOnly is what authenticates a connection to a service in
// service.ModeIDOnly: nothing, so Authentication is "" and the sweeper
// never uses one (sweep.Unverified).
const AuthIDOnly = ""

// idOnlyAdapter is the adapter for a key service in service.ModeIDOnly,
// the G2 seed's shape: the service proves nothing and deletes by ID alone.
//
// It cannot prove the deployment. The ledger still asks its question
// before every create and around every delete, and Prove answers it in
// the operator: with the deployment ID the service claims (GET
// /v1/identity), the keys it lists with the tag (a second request) and a
// response computed with the operator's own key over them. The ledger's
// check therefore says only "the service claimed the record's deployment
// ID and listed these keys": what the seed checked (/buildinfo's
// deployment_id). A copy of the service's data, or anything relaying its
// identity (a splicing proxy), passes it. Hence Authentication is
// AuthIDOnly (""), so the sweeper keeps and reports every record whose
// owner went without its delete instead of acting on such an answer,
// while an owner's own deletion, which the user asked for through the
// KeyServer the user named, still goes through.
//
// Delete is keyclient's ReadThenDelete: a read to check the key still
// carries the tag, then a delete by ID, two requests with a window
// between them.
type idOnlyAdapter struct {
	adapter
	key ledger.Key
}

// Prove answers q in the operator over what the service claims; see
// idOnlyAdapter.
func (a idOnlyAdapter) Prove(ctx context.Context, c *keyclient.Client, q ledger.Question) (ledger.Answer, error) {
	dep, err := c.Identity(ctx)
	if err != nil {
		return ledger.Answer{}, err
	}
	tagged := []string{}
	if q.Tag != "" {
		keys, err := c.List(ctx, q.Tag)
		if err != nil {
			return ledger.Answer{}, err
		}
		for _, k := range keys {
			tagged = append(tagged, k.ID)
		}
	}
	return ledger.Answer{
		Deployment: dep, Salt: IDOnlySalt, Tagged: tagged,
		Response: ledger.Respond(a.key.Token(IDOnlySalt), q, dep, IDOnlySalt, tagged),
	}, nil
}

func (idOnlyAdapter) Delete(ctx context.Context, c *keyclient.Client, id, tag string) error {
	return c.ReadThenDelete(ctx, id, tag)
}

// Authentication is AuthIDOnly whatever the KeyServer: over https too the
// certificate names a host, and a copy of the data behind that host
// answers as the deployment does.
func (idOnlyAdapter) Authentication(Key) string { return AuthIDOnly }

// ErrServiceMode is returned by Setup for an unknown Options.ServiceMode.
var ErrServiceMode = errors.New("controller: unknown Options.ServiceMode")

// kindAdapter is what lifecycle.Setup is given: the adapter of either
// mode, with the extensions both have.
type kindAdapter interface {
	lifecycle.Adapter[*v1alpha1.APIKey, Key, *keyclient.Client]
	lifecycle.ParentConnector[Key]
	lifecycle.Retagger[*keyclient.Client]
	lifecycle.Authenticator[Key]
}

// adapter returns the adapter of o.ServiceMode. The id-only one answers
// proofs itself, so it needs the operator key: read (or created) here as
// lifecycle.Setup reads it, from the same Secret.
func (o Options) adapter(ctx context.Context, mgr ctrl.Manager, a adapter) (kindAdapter, error) {
	switch o.ServiceMode {
	case "", service.ModeChallenge:
		return a, nil
	case service.ModeIDOnly:
		ns := cmp.Or(o.RecordsNamespace, os.Getenv(ledger.NamespaceEnv))
		key, err := ledger.LoadKey(ctx, ledger.ReadWriter{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient()}, ns, o.KeySecret)
		if err != nil {
			return nil, fmt.Errorf("controller: the operator key for the id-only adapter: %w", err)
		}
		return idOnlyAdapter{adapter: a, key: key}, nil
	}
	return nil, fmt.Errorf("%w: %q, want one of %q", ErrServiceMode, o.ServiceMode, modes)
}

// modes are the service modes Setup accepts.
var modes = []service.Mode{service.ModeChallenge, service.ModeIDOnly}
