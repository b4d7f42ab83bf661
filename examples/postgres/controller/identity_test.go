package controller_test

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/lifecycle"
	"github.com/finale-dev/finale/pgserver"
)

// A server that does not prove its identity is not a wrong password:
// a certificate from a CA the Server does not pin, a
// certificate the pinned CA issued for another host, and a PostgreSQL
// server that declines TLS under sslMode require all read as an Identity
// failure that sends the admin to the certificate, the CA and the network
// path. Before, the first two said "check the user name and password" and
// the third "the server cannot be reached".
func TestServerIdentityFailureIsNotAPassword(t *testing.T) {
	pg, _ := ownTLSServer(t)
	other, err := pgserver.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	w := start(t, controller.Options{})
	plain := ownServer(t) // serves no TLS (the package's PostgreSQL does)
	cases := []struct {
		name string
		make func(ns string)
		want string
	}{
		{"unknown CA, system roots", func(ns string) {
			w.serverOn(ns, "pg", pg, pg.Addr(), v1alpha1.SSLModeVerifyFull)
			w.editServer(ns, "pg", func(s *v1alpha1.Server) { s.Spec.TrustSystemRoots = true })
		},
			fmt.Sprintf(controller.MessageIdentityFailed, pg.Host, pg.Port, "the operator's system roots")},
		{"another CA pinned", func(ns string) { w.serverOnTLS(ns, "pg", pg, pg.Addr(), v1alpha1.SSLModeVerifyFull, other) },
			fmt.Sprintf(controller.MessageIdentityFailed, pg.Host, pg.Port, `the CA in credential Secret "pg-admin" key "ca.crt"`)},
		{"PostgreSQL without TLS, require", func(ns string) { w.serverOn(ns, "pg", plain, plain.Addr(), v1alpha1.SSLModeRequire) },
			fmt.Sprintf(controller.MessageIdentityFailed, plain.Host, plain.Port, "the operator's system roots")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns := w.namespace()
			c.make(ns)
			srv := &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}}
			// serverOnTLS pins the CA in a second write: wait for the
			// message of the Server as it ends up.
			got := ""
			err := controlplane.WaitFor(t.Context(), wait, "the Server's identity failure", func(ctx context.Context) (bool, error) {
				if err := w.c.Get(ctx, client.ObjectKeyFromObject(srv), srv); err != nil {
					return false, err
				}
				if c := meta.FindStatusCondition(srv.Status.Conditions, lifecycle.ConditionReady); c != nil && c.Reason == controller.ReasonConnectFailed {
					got = c.Message
				}
				return got == c.want, nil
			})
			if err != nil {
				t.Errorf("%v: Server Ready message\n got %q\nwant %q", err, got, c.want)
			}
			w.waitEvent(ns, "Server", "pg", controller.ReasonConnectFailed)
		})
	}
}
