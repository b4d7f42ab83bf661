package controller_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/lifecycle"
)

// When the hold ends before a dependent could delete (a database kept in
// use past the hold), the dependent is released without its delete and its
// record stays; once the database is free, the sweeper drops it through a
// Server an admin designated for sweeping (one in the operator's own
// namespace), proven to reach the same deployment, and removes the record:
// nothing leaks. The release is reported where it can land while the
// namespace terminates (which refuses Events): on the record, in the
// operator's namespace. The admin's Server is in plain text on loopback,
// which this admin vouches for (SweepTrustedHosts, its host and port);
// TestAuthenticatedSweepCannotBeSpliced sweeps through verify-full.
func TestHoldTimeoutLeavesRecordForTheSweeper(t *testing.T) {
	w := start(t, controller.Options{HoldTimeout: 3 * time.Second, SweepSettle: time.Second, SweepClockSkew: time.Millisecond, SweepInterval: time.Second,
		SweepTrustedHosts: []string{testenv.Postgres(t).Addr()}})
	w.serverIn(w.recNS) // the admin's Server: the sweeper's way in
	ns := w.server()
	d := database(ns, "d", pgtarget.RandomName("swept_"), "")
	w.create(d)
	w.ready(d)
	session, err := pgxConnectAs(t, w, "finale", w.pg.Password, d.Spec.DatabaseName)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = session.Close(context.Background()) }()

	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := w.c.Delete(t.Context(), nsObj); err != nil {
		t.Fatal(err)
	}
	w.waitGone(nsObj)
	if _, ok := w.database(d.Spec.DatabaseName); !ok {
		t.Fatal("the database in use was dropped; the test proves nothing")
	}
	if w.record(string(d.UID)) == nil {
		t.Fatal("released without delete, but the record is gone: the database would leak")
	}
	w.recordEvents(lifecycle.ReasonReleased, []string{string(d.UID)})

	_ = session.Close(t.Context())
	err = controlplane.WaitFor(t.Context(), wait, "sweeper drops the database and its record", func(ctx context.Context) (bool, error) {
		_, exists := w.database(d.Spec.DatabaseName)
		return !exists && w.record(string(d.UID)) == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if l := w.leaks(); len(l) > 0 {
		t.Errorf("leaked: %q", l)
	}
}
