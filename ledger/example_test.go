package ledger_test

import (
	"context"
	"errors"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/ledger"
)

// A reconciler's create step: the record is written first, the create runs
// only if that worked, and the IDs are recorded afterwards.
func ExampleLedger_Create() {
	run := func(ctx context.Context, c client.Client, conn ledger.Conn, owner ledger.Owner,
		createInService func(ctx context.Context, tag string) (string, error)) error {
		store, err := ledger.NewConfigMapStore(c, "") // $POD_NAMESPACE
		if err != nil {
			return err
		}
		l := ledger.New(store, ledger.Options{})
		rec, err := l.Create(ctx, owner, conn, func(ctx context.Context, tag string) ([]string, error) {
			id, err := createInService(ctx, tag) // put tag on the resource
			return []string{id}, err
		})
		if errors.Is(err, ledger.ErrRecordWrite) {
			return err // nothing was created; requeue
		}
		if err != nil {
			return err
		}
		fmt.Println("recorded", rec.ExternalIDs)
		return nil
	}
	_ = run
}

func ExampleTag() {
	fmt.Println(ledger.Tag(ledger.Owner{Kind: "Role", UID: "6b1f0c2e-0000-4000-8000-000000000001"}))
	// Output: finale:role:6b1f0c2e-0000-4000-8000-000000000001
}

// A create whose ID is known in advance (a name the caller chooses, carrying
// the tag): the ID goes into the record written before the create, and no
// write follows a create that returns it.
func ExampleLedger_CreateDeclared() {
	run := func(ctx context.Context, l *ledger.Ledger, conn ledger.Conn, owner ledger.Owner, name string,
		createInService func(ctx context.Context, name, tag string) error) error {
		id := name + "@" + ledger.Tag(owner) // what the create will return
		_, err := l.CreateDeclared(ctx, owner, conn, []string{id}, func(ctx context.Context, tag string) ([]string, error) {
			return []string{id}, createInService(ctx, name, tag)
		})
		return err
	}
	_ = run
}
