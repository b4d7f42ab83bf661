package v1alpha1_test

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	pgv1 "github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
)

// A Role whose password the operator generates into a Secret it owns.
func ExampleRole() {
	s := runtime.NewScheme()
	if err := pgv1.AddToScheme(s); err != nil {
		panic(err)
	}
	r := &pgv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app"},
		Spec: pgv1.RoleSpec{
			ServerRef: pgv1.ServerReference{Name: "main"},
			RoleName:  "app",
			Login:     true,
			Password:  &pgv1.RolePassword{Generate: &pgv1.GeneratedPassword{}},
		},
	}
	gvks, _, err := s.ObjectKinds(r)
	if err != nil {
		panic(err)
	}
	fmt.Println(gvks[0])
	fmt.Println(r.GeneratedSecretName())
	// Output:
	// postgres.finale.dev/v1alpha1, Kind=Role
	// app-password
}
