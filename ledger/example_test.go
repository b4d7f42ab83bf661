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
	run := func(ctx context.Context, c client.Client, conn ledger.Prover, owner ledger.Owner,
		createInService func(ctx context.Context, tag string) (string, error)) error {
		store, err := ledger.NewConfigMapStore(c, "") // $POD_NAMESPACE
		if err != nil {
			return err
		}
		key, err := ledger.LoadKey(ctx, c, store.Namespace(), "") // created on first use
		if err != nil {
			return err
		}
		l, err := ledger.New(store, ledger.Options{Key: key})
		if err != nil {
			return err
		}
		rec, err := l.Create(ctx, ledger.Plan{Owner: owner, Policy: ledger.PolicyDelete}, conn, func(ctx context.Context, tag string) ([]string, error) {
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

// What a service computes for a question, wherever it stores its token: in
// SQL, in its own code behind an identity endpoint, or here.
func ExampleRespond() {
	key := ledger.GenerateKey()
	q := ledger.Question{KeyID: key.ID(), Challenge: "5f3a", Tag: "finale:key:6b1f0c2e"}
	token := key.Token("salt") // stored by the service at enrolment
	answer := ledger.Answer{Deployment: "keys-1", Salt: "salt", Tagged: []string{"k-2"}}
	answer.Response = ledger.Respond(token, q, answer.Deployment, answer.Salt, answer.Tagged)
	fmt.Println(len(answer.Response))
	// Output: 64
}
