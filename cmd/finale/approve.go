package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/internal/exitcode"
	"github.com/finale-dev/finale/ledger"
)

const approveUsage = `usage: finale approve --namespace NS --from-uid UID [--records-namespace NS] [--kubeconfig PATH] [--dry-run]

An admin's one action for a namespace restored after it was deleted: approves,
on every cleanup record written in namespace NS while it had the UID UID, the
object that now has the record owner's kind, namespace and name and claims it
(annotation finale.dev/uid naming the owner's UID), as
  kubectl -n RECORDS annotate configmap finale-cleanup-<old uid> finale.dev/adoption-approved-for=<new uid>
does for one record. Nothing else is approved: records of other namespaces or
of another earlier UID, and names no object claims, are left as they are. The
claim's AdoptionNeedsApproval condition prints this command with NS and UID.
Run it after the namespace's objects are restored, and again for objects
restored later (it is idempotent); until approved, the sweeper keeps what a
claim names for its grace only (24h at defaults), then deletes it.

exit status:
  0  done (each record's outcome is listed)
  1  could not run (no cluster, the namespace missing or not re-created, a
     record that could not be read or approved)
  64 usage error

flags:
`

// Messages of `finale approve`.
const (
	msgApproveExtraArgs = "unexpected arguments %q: finale approve takes only flags"
	msgApproveRequired  = "--namespace and --from-uid are required (the AdoptionNeedsApproval condition of a claiming object prints both)"
	msgApproveNone      = "no cleanup record in %s was written in namespace %s with uid %s\n"
)

// approve is `finale approve`.
func approve(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("approve", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig; default $KUBECONFIG, then the in-cluster config, then ~/.kube/config")
	recordsNS := fs.String("records-namespace", "",
		"namespace of the cleanup records; default $"+ledger.NamespaceEnv+", else "+defaultRecordsNamespace+" (the reference operator's)")
	namespace := fs.String("namespace", "", "the restored namespace (required)")
	from := fs.String("from-uid", "", "the UID the namespace had when the records were written (required)")
	dryRun := fs.Bool("dry-run", false, "list what would be approved and write nothing")
	if helped, err := parseFlags(fs, args, out, approveUsage); helped || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return exitcode.Usagef(msgApproveExtraArgs, fs.Args())
	}
	if *namespace == "" || *from == "" {
		return exitcode.Usagef(msgApproveRequired)
	}
	ns := cmp.Or(*recordsNS, os.Getenv(ledger.NamespaceEnv), defaultRecordsNamespace)
	cfg, err := restConfig(*kubeconfig)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	return runApprove(ctx, c, ns, ledger.ApproveRequest{Namespace: *namespace, From: types.UID(*from), DryRun: *dryRun}, out)
}

// runApprove approves and lists each record's outcome.
func runApprove(ctx context.Context, c client.Client, recordsNS string, req ledger.ApproveRequest, out io.Writer) error {
	store, err := ledger.NewConfigMapStore(c, recordsNS)
	if err != nil {
		return err
	}
	done, err := store.ApproveNamespace(ctx, c, req)
	if len(done) == 0 && err == nil {
		fmt.Fprintf(out, msgApproveNone, recordsNS, req.Namespace, req.From)
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RECORD\tOBJECT\tCLAIMANT UID\tOUTCOME")
	for _, a := range done {
		outcome := string(a.Outcome)
		if req.DryRun && a.Outcome == ledger.Approved {
			outcome = "would be approved"
		}
		fmt.Fprintf(tw, "%s\t%s %s/%s\t%s\t%s\n", a.Record, a.Owner.Kind, a.Owner.Namespace, a.Owner.Name, dash(string(a.Claimant)), outcome)
	}
	if ferr := tw.Flush(); ferr != nil && err == nil {
		err = ferr
	}
	return err
}
