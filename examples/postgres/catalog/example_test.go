package catalog_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/finale-dev/finale/examples/postgres/catalog"
)

// The calls a reconciler makes for one Role: create with the ownership tag,
// find it again by the tag, and drop it, telling a conflict the user must
// resolve from other failures.
func Example() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, "postgres://operator@127.0.0.1:5432/postgres")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)

	const tag = "finale.dev/owner=7c9e6679-7425-40de-944b-e07fc1f90ae7"
	spec := catalog.RoleSpec{Name: "app", Login: true, ConnectionLimit: -1, Password: "from-the-secret"}
	if err := catalog.CreateRole(ctx, conn, spec, tag); err != nil {
		fmt.Println(err)
		return
	}
	names, _ := catalog.FindRolesByTag(ctx, conn, tag)
	fmt.Println(names)

	err = catalog.DropRole(ctx, conn, "app", tag)
	var refused *catalog.Error
	switch {
	case errors.As(err, &refused) && errors.Is(err, catalog.ErrConflict):
		// Put refused.Reason and err.Error() in the condition; retry later.
		fmt.Println(refused.Reason, err)
	case err != nil:
		fmt.Println(err)
	}
}

// A Password prints redacted, whatever the verb.
func ExamplePassword() {
	spec := catalog.RoleSpec{Name: "app", Password: "hunter2"}
	fmt.Printf("%+v\n", spec)
	// Output: {Name:app Login:false ConnectionLimit:0 Password:[redacted]}
}
