package hold_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/testenv"
)

// BenchmarkNamespaceDeletion measures, in the same run, the time from a
// namespace delete to the namespace being gone with n held Roles (each
// dropping its PostgreSQL role through the Server and its Secret), and the
// time to drop the same number of roles directly over one admin connection.
// It reports both (seconds) and their ratio, and splits the first: until
// the namespace controller has marked every Role for deletion
// (all-terminating-s), until the last PostgreSQL role is dropped
// (roles-dropped-s), the rest being the namespace controller finishing.
// Run with -benchtime=1x.
func BenchmarkNamespaceDeletion(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("dependents=%d", n), func(b *testing.B) {
			b.StopTimer()
			c := testenv.Client(b, testenv.Scheme())
			startOperator(b, operatorOptions{clock: clocktesting.NewFakeClock(time.Now())})
			var held, marked, dropped, direct time.Duration
			for range b.N {
				b.StopTimer()
				f := newFixture(b, c, n)
				f.waitReady(b, c, n)
				b.StartTimer()
				t0 := time.Now()
				deleteNamespace(b, c, f.ns)
				waitAllTerminating(b, c, f.ns)
				marked += time.Since(t0)
				waitPGRoles(b, f.ns, 0, 10*time.Minute)
				dropped += time.Since(t0)
				waitNamespaceGone(b, c, f.ns, 10*time.Minute)
				held += time.Since(t0)
				b.StopTimer()
				if left, err := pgRolesIn(context.Background(), f.ns); err != nil || len(left) != 0 {
					b.Fatalf("roles left after the namespace went: %d (%v)", len(left), err)
				}
				direct += dropDirectly(b, n)
			}
			b.ReportMetric(held.Seconds()/float64(b.N), "ns-delete-s")
			b.ReportMetric(marked.Seconds()/float64(b.N), "all-terminating-s")
			b.ReportMetric(dropped.Seconds()/float64(b.N), "roles-dropped-s")
			b.ReportMetric(direct.Seconds()/float64(b.N), "direct-drop-s")
			b.ReportMetric(held.Seconds()/direct.Seconds(), "ratio")
		})
	}
}

// dropDirectly creates n roles (untimed) and times dropping them one by
// one over a single admin connection.
func dropDirectly(b *testing.B, n int) time.Duration {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin(b).DSN())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	names := make([]string, n)
	for i := range names {
		names[i] = pgx.Identifier{fmt.Sprintf("bench_direct_%d", i)}.Sanitize()
		if _, err := conn.Exec(ctx, "CREATE ROLE "+names[i]); err != nil {
			b.Fatal(err)
		}
	}
	t0 := time.Now()
	for _, name := range names {
		if _, err := conn.Exec(ctx, "DROP ROLE "+name); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(t0)
}

// waitAllTerminating waits until every Role in ns has a deletionTimestamp.
func waitAllTerminating(b *testing.B, c client.Client, ns string) {
	b.Helper()
	err := controlplane.WaitFor(context.Background(), 10*time.Minute, "every Role in "+ns+" terminating", func(ctx context.Context) (bool, error) {
		l := newRoleList()
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, r := range l.Items {
			if r.GetDeletionTimestamp().IsZero() {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
