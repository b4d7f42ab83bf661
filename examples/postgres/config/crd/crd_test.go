package crd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	pgv1 "github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/config/crd"
	"github.com/finale-dev/finale/internal/crdfile/crdfiletest"
	"github.com/finale-dev/finale/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestGeneratedFilesUpToDate fails when the deepcopy code or the CRD YAML
// no longer match what controller-gen makes of the types.
func TestGeneratedFilesUpToDate(t *testing.T) {
	names, err := crd.Files()
	if err != nil {
		t.Fatal(err)
	}
	crdfiletest.CheckGenerated(t, ".", names)
}

func scheme() *runtime.Scheme {
	s := testenv.Scheme()
	utilruntime.Must(pgv1.AddToScheme(s))
	return s
}

// setup installs the generated CRDs, decoded from the YAML files, on the
// shared control plane and returns a client and a fresh namespace.
func setup(t *testing.T) (client.Client, string) {
	t.Helper()
	c := testenv.Client(t, scheme())
	crds, err := crd.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != 3 {
		t.Fatalf("got %d CRDs, want 3 (Database, Role, Server)", len(crds))
	}
	if err := controlplane.InstallCRDs(t.Context(), c, crds...); err != nil {
		t.Fatal(err)
	}
	// Established does not mean the discovery cache of a fresh client knows
	// the kinds; wait until a list works.
	err = controlplane.WaitFor(t.Context(), 30*time.Second, "postgres.finale.dev kinds to be served", func(ctx context.Context) (bool, error) {
		for _, l := range []client.ObjectList{&pgv1.ServerList{}, &pgv1.RoleList{}, &pgv1.DatabaseList{}} {
			if err := c.List(ctx, l); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, testenv.Namespace(t, c)
}

func server(ns, name string) *pgv1.Server {
	return &pgv1.Server{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: pgv1.ServerSpec{
			Host:                 "db.example.com",
			CredentialsSecretRef: pgv1.CredentialsSecretReference{Name: "admin"},
		},
	}
}

func role(ns, name, roleName string) *pgv1.Role {
	return &pgv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: pgv1.RoleSpec{
			ServerRef: pgv1.ServerReference{Name: "main"},
			RoleName:  roleName,
			Login:     true,
			Password:  &pgv1.RolePassword{Generate: &pgv1.GeneratedPassword{}},
		},
	}
}

func database(ns, name, dbName string) *pgv1.Database {
	return &pgv1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: pgv1.DatabaseSpec{
			ServerRef:    pgv1.ServerReference{Name: "main"},
			DatabaseName: dbName,
			Owner:        "app",
		},
	}
}

// TestDefaults proves valid objects are accepted and that the schema fills
// in the defaults the operator relies on, notably Retain for databases.
func TestDefaults(t *testing.T) {
	c, ns := setup(t)

	s := server(ns, "main")
	if err := c.Create(t.Context(), s); err != nil {
		t.Fatalf("valid Server refused: %v", err)
	}
	wantServer := pgv1.ServerSpec{
		Host:     "db.example.com",
		Port:     5432,
		Database: "postgres",
		SSLMode:  pgv1.SSLModeVerifyFull,
		CredentialsSecretRef: pgv1.CredentialsSecretReference{
			Name: "admin", UsernameKey: pgv1.DefaultUsernameKey, PasswordKey: pgv1.DefaultPasswordKey, CAKey: pgv1.DefaultCAKey,
		},
	}
	if diff := cmp.Diff(wantServer, s.Spec); diff != "" {
		t.Errorf("Server spec after create (-want +got):\n%s", diff)
	}

	r := role(ns, "app", "app")
	if err := c.Create(t.Context(), r); err != nil {
		t.Fatalf("valid Role refused: %v", err)
	}
	wantRole := pgv1.RoleSpec{
		ServerRef:       pgv1.ServerReference{Name: "main"},
		RoleName:        "app",
		Login:           true,
		ConnectionLimit: ptr.To[int32](-1),
		Password:        &pgv1.RolePassword{Generate: &pgv1.GeneratedPassword{Length: pgv1.DefaultGeneratedPasswordLength}},
		DeletionPolicy:  pgv1.DeletionPolicyDelete,
	}
	if diff := cmp.Diff(wantRole, r.Spec); diff != "" {
		t.Errorf("Role spec after create (-want +got):\n%s", diff)
	}
	if got, want := r.GeneratedSecretName(), "app-password"; got != want {
		t.Errorf("GeneratedSecretName() = %q, want %q", got, want)
	}

	d := database(ns, "orders", "orders")
	if err := c.Create(t.Context(), d); err != nil {
		t.Fatalf("valid Database refused: %v", err)
	}
	if got, want := d.Spec.DeletionPolicy, pgv1.DeletionPolicyRetain; got != want {
		t.Errorf("Database deletionPolicy defaulted to %q, want %q", got, want)
	}

	// A Role whose password is read from a Secret, with connectionLimit 0
	// (which must survive: 0 is not "unset").
	r2 := role(ns, "reader", "reader")
	r2.Spec.Password = &pgv1.RolePassword{SecretKeyRef: &pgv1.SecretKeySelector{Name: "reader-pw"}}
	r2.Spec.ConnectionLimit = ptr.To[int32](0)
	if err := c.Create(t.Context(), r2); err != nil {
		t.Fatalf("valid Role refused: %v", err)
	}
	if diff := cmp.Diff(&pgv1.RolePassword{SecretKeyRef: &pgv1.SecretKeySelector{Name: "reader-pw", Key: pgv1.DefaultPasswordSecretKey}}, r2.Spec.Password); diff != "" {
		t.Errorf("Role password after create (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ptr.To[int32](0), r2.Spec.ConnectionLimit); diff != "" {
		t.Errorf("connectionLimit after create (-want +got):\n%s", diff)
	}
}

// TestCreateRefused proves each kind of bad spec is refused at admission
// with a message that says what is wrong and what to do.
func TestCreateRefused(t *testing.T) {
	c, ns := setup(t)
	cases := map[string]struct {
		obj  client.Object
		want string
	}{
		"role name with a space": {
			obj:  role(ns, "r1", "Bad Name"),
			want: "roleName must be a lowercase PostgreSQL identifier",
		},
		"role name with a quote": {
			obj:  role(ns, "r2", `x"; drop role y; --`),
			want: "roleName must be a lowercase PostgreSQL identifier",
		},
		"role name longer than 63": {
			obj:  role(ns, "r3", strings.Repeat("a", 64)),
			want: "spec.roleName: Too long: may not be more than 63",
		},
		"role name reserved prefix": {
			obj:  role(ns, "r4", "pg_admin"),
			want: "roleName must not start with pg_: PostgreSQL reserves those names",
		},
		"role name reserved word": {
			obj:  role(ns, "r5", "public"),
			want: "roleName must not be public, none, current_user",
		},
		"role deletion policy": {
			obj: func() client.Object {
				r := role(ns, "r6", "r6")
				r.Spec.DeletionPolicy = "Destroy"
				return r
			}(),
			want: `spec.deletionPolicy: Unsupported value: "Destroy": supported values: "Delete", "Retain"`,
		},
		"role both password sources": {
			obj: func() client.Object {
				r := role(ns, "r7", "r7")
				r.Spec.Password.SecretKeyRef = &pgv1.SecretKeySelector{Name: "pw"}
				return r
			}(),
			want: "password.secretKeyRef and password.generate are mutually exclusive",
		},
		"role empty password source": {
			obj: func() client.Object {
				r := role(ns, "r8", "r8")
				r.Spec.Password = &pgv1.RolePassword{}
				return r
			}(),
			want: "password needs a source: set password.secretKeyRef",
		},
		"role connection limit below -1": {
			obj: func() client.Object {
				r := role(ns, "r9", "r9")
				r.Spec.ConnectionLimit = ptr.To[int32](-2)
				return r
			}(),
			want: "spec.connectionLimit: Invalid value: -2: spec.connectionLimit in body should be greater than or equal to -1",
		},
		"server ssl mode": {
			obj: func() client.Object {
				s := server(ns, "s1")
				s.Spec.SSLMode = "verify"
				return s
			}(),
			want: `spec.sslMode: Unsupported value: "verify": supported values: "disable", "allow", "prefer", "require", "verify-ca", "verify-full"`,
		},
		"server host is a URL": {
			obj: func() client.Object {
				s := server(ns, "s2")
				s.Spec.Host = "postgres://db.example.com/app"
				return s
			}(),
			want: "host must be a DNS name or an IP address",
		},
		"server port": {
			obj: func() client.Object {
				s := server(ns, "s3")
				s.Spec.Port = 70000
				return s
			}(),
			want: "spec.port in body should be less than or equal to 65535",
		},
		"server without secret": {
			obj: func() client.Object {
				s := server(ns, "s4")
				s.Spec.CredentialsSecretRef.Name = ""
				return s
			}(),
			want: "spec.credentialsSecretRef.name: Invalid value: \"\": spec.credentialsSecretRef.name in body should be at least 1 chars long",
		},
		"database name of the server": {
			obj:  database(ns, "d1", "template1"),
			want: "databaseName must not be postgres, template0 or template1",
		},
		"database name uppercase": {
			obj:  database(ns, "d2", "Orders"),
			want: "databaseName must be a lowercase PostgreSQL identifier",
		},
		"database owner": {
			obj: func() client.Object {
				d := database(ns, "d3", "d3")
				d.Spec.Owner = "App Owner"
				return d
			}(),
			want: "owner must be a lowercase PostgreSQL role name",
		},
		"database deletion policy": {
			obj: func() client.Object {
				d := database(ns, "d4", "d4")
				d.Spec.DeletionPolicy = "delete"
				return d
			}(),
			want: `spec.deletionPolicy: Unsupported value: "delete": supported values: "Delete", "Retain"`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := c.Create(t.Context(), tc.obj)
			if err == nil {
				t.Fatalf("created; want refused with %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("refused with\n  %v\nwant the message to contain\n  %s", err, tc.want)
			}
		})
	}
}

// TestUpdateRefused proves names, server references and a Server's database
// (where its deployment sentinel lives) cannot change, while other fields
// still can.
func TestUpdateRefused(t *testing.T) {
	c, ns := setup(t)
	r := role(ns, "app", "app")
	d := database(ns, "orders", "orders")
	srv := &pgv1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg-immutable"}, Spec: pgv1.ServerSpec{
		Host: "db.example.com", CredentialsSecretRef: pgv1.CredentialsSecretReference{Name: "pg"}}}
	for _, obj := range []client.Object{r, d, srv} {
		if err := c.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}

	cases := map[string]struct {
		obj    client.Object
		mutate func(client.Object)
		want   string // "" means the update is accepted
	}{
		"role name": {
			obj:    r,
			mutate: func(o client.Object) { o.(*pgv1.Role).Spec.RoleName = "app2" },
			want:   "roleName is immutable: to rename, create a new Role and delete this one",
		},
		"role server": {
			obj:    r,
			mutate: func(o client.Object) { o.(*pgv1.Role).Spec.ServerRef.Name = "other" },
			want:   "serverRef is immutable: a Role cannot move to another server",
		},
		"role login and limit": {
			obj: r,
			mutate: func(o client.Object) {
				o.(*pgv1.Role).Spec.Login = false
				o.(*pgv1.Role).Spec.ConnectionLimit = ptr.To[int32](5)
			},
		},
		"database name": {
			obj:    d,
			mutate: func(o client.Object) { o.(*pgv1.Database).Spec.DatabaseName = "orders2" },
			want:   "databaseName is immutable: to rename, create a new Database and move the data",
		},
		"database server": {
			obj:    d,
			mutate: func(o client.Object) { o.(*pgv1.Database).Spec.ServerRef.Name = "other" },
			want:   "serverRef is immutable: a Database cannot move to another server",
		},
		"server database": {
			obj:    srv,
			mutate: func(o client.Object) { o.(*pgv1.Server).Spec.Database = "other" },
			want:   "database is immutable: the deployment sentinel that proves this server lives in it",
		},
		"server host": {
			obj:    srv,
			mutate: func(o client.Object) { o.(*pgv1.Server).Spec.Host = "db2.example.com" },
		},
		"database owner and policy": {
			obj: d,
			mutate: func(o client.Object) {
				o.(*pgv1.Database).Spec.Owner = "other_owner"
				o.(*pgv1.Database).Spec.DeletionPolicy = pgv1.DeletionPolicyDelete
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			obj := tc.obj.DeepCopyObject().(client.Object)
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
				t.Fatal(err)
			}
			tc.mutate(obj)
			err := c.Update(t.Context(), obj)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("update refused: %v", err)
			case tc.want == "":
			case err == nil:
				t.Fatalf("update accepted; want refused with %q", tc.want)
			case !strings.Contains(err.Error(), tc.want):
				t.Errorf("refused with\n  %v\nwant the message to contain\n  %s", err, tc.want)
			}
		})
	}
}
