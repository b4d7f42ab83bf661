package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/ledger"
)

// externalID is how a role or database is recorded: its name and its
// ownership tag. A sweeper that knows only the ID then deletes exactly that
// object, and only while it still carries the tag (a name alone could have
// been reused by someone else since).
func externalID(name, tag string) string { return name + "@" + tag }

func externalIDs(names []string, tag string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = externalID(n, tag)
	}
	return out
}

// parseID splits an external ID; names never contain '@' (the CRDs allow
// lower-case letters, digits, '_' and '$').
func parseID(id string) (name, tag string, err error) {
	name, tag, ok := strings.Cut(id, "@")
	if !ok || name == "" || !strings.HasPrefix(tag, ledger.TagPrefix) {
		return "", "", fmt.Errorf("external ID %q is not <name>@%s<kind>:<uid>", id, ledger.TagPrefix)
	}
	return name, tag, nil
}

// dropRole drops the role an ID names: name while it carries tag. A role of
// that name with another tag (or none) is not that role: it is left alone,
// as catalog.DropRole does, and the ID's role counts as gone, because it
// does not exist. A recorded ID whose create never succeeded (the Role
// adapter declares IDs before creating, and the name may be taken) must not
// hold a deletion or the sweeper forever; the ledger's final look by tag
// still confirms that nothing carrying the tag remains.
func dropRole(ctx context.Context, c *Conn, name, tag string) error {
	err := catalog.DropRole(ctx, c, name, tag)
	if ce, ok := errors.AsType[*catalog.Error](err); ok && ce.Reason == catalog.ReasonNotOwned {
		return nil
	}
	return err
}

// Tag kinds: ledger.Tag lower-cases the owner's kind.
const (
	roleTagPrefix     = ledger.TagPrefix + "role:"
	databaseTagPrefix = ledger.TagPrefix + "database:"
)

// sweepTarget is one Server's connection as the sweeper sees it: any record
// whose deployment it proves, Role's or Database's, through the pool.
type sweepTarget struct {
	pool *Pool
	key  Key
}

var _ ledger.Target = sweepTarget{}

func (t sweepTarget) Identify(ctx context.Context) (ledger.Identity, error) {
	var id ledger.Identity
	err := t.pool.Do(ctx, t.key, func(ctx context.Context, c *Conn) error {
		var err error
		id, err = c.Identify(ctx)
		return err
	})
	return id, err
}

func (t sweepTarget) FindByTag(ctx context.Context, tag string) ([]string, error) {
	var names []string
	err := t.pool.Do(ctx, t.key, func(ctx context.Context, c *Conn) error {
		var err error
		switch {
		case strings.HasPrefix(tag, roleTagPrefix):
			names, err = catalog.FindRolesByTag(ctx, c, tag)
		case strings.HasPrefix(tag, databaseTagPrefix):
			names, err = catalog.FindDatabasesByTag(ctx, c, tag)
		default:
			err = fmt.Errorf("tag %q is not a Role's or a Database's", tag)
		}
		return err
	})
	return externalIDs(names, tag), err
}

func (t sweepTarget) Delete(ctx context.Context, id string) error {
	name, tag, err := parseID(id)
	if err != nil {
		return err
	}
	return t.pool.Do(ctx, t.key, func(ctx context.Context, c *Conn) error {
		switch {
		case strings.HasPrefix(tag, roleTagPrefix):
			return dropRole(ctx, c, name, tag)
		case strings.HasPrefix(tag, databaseTagPrefix):
			return catalog.DropDatabase(ctx, c, name, tag)
		}
		return fmt.Errorf("tag %q is not a Role's or a Database's", tag)
	})
}

// sweepTargets offers the sweeper every Server the operator knows, in any
// namespace; the sweeper uses one only for records whose deployment it
// proves (system_identifier and sentinel token).
func sweepTargets(r client.Reader, srvs servers, pool *Pool) func(ctx context.Context) ([]ledger.Target, error) {
	return func(ctx context.Context) ([]ledger.Target, error) {
		var list v1alpha1.ServerList
		if err := r.List(ctx, &list); err != nil {
			return nil, fmt.Errorf("list Servers for the sweeper: %w", err)
		}
		var out []ledger.Target
		for i := range list.Items {
			key, err := srvs.key(ctx, &list.Items[i])
			if err != nil {
				continue // no credentials, no target; the record waits
			}
			out = append(out, sweepTarget{pool: pool, key: key})
		}
		return out, nil
	}
}
