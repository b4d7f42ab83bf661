package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/finale-dev/finale/internal/exitcode"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
	"github.com/finale-dev/finale/watchdog"
)

// errFindings marks an audit that ran and found something an admin must act
// on, so that main can exit with a code of its own, distinct from failures.
var errFindings = errors.New("audit found problems")

// errPending marks an audit that found nothing to act on yet, but records
// whose owner is gone and that are still within the settle window: the
// sweeper may still clean them, or they become findings. It is not success:
// an admin who runs the audit right after a namespace deletion must not
// read "nothing leaked" while the outcome is still open.
var errPending = errors.New("audit found pending records")

// Exit statuses of finale audit (main maps the errors to them).
const (
	exitOK       = exitcode.OK
	exitError    = exitcode.Failed
	exitFindings = exitcode.Violation
	exitPending  = exitcode.Pending
)

// errReadOnly is what any write through the audit's record store gets: the
// audit must never change the cluster it inspects.
var errReadOnly = errors.New("finale audit is read-only")

// The records namespace of the reference operator's manifests
// (examples/postgres/config): the operator itself takes $POD_NAMESPACE,
// which the downward API sets to it, and an admin running the audit from
// outside the cluster has no $POD_NAMESPACE.
const defaultRecordsNamespace = "finale-system"

// Page size of every list: large enough to be few round trips, small enough
// that a big cluster is never read in one response.
const listPage = 500

// auditQPS is the client-side rate limit of the command's requests.
const auditQPS = 50

// Messages and formats.
const (
	auditUsage = `usage: finale audit [--kubeconfig PATH] [--records-namespace NS] [--settle 5m] [-o text|json]

Read-only report on a live cluster: objects stuck in deletion, cleanup records
whose owner is gone, and records the sweeper could not reach.

exit status:
  0  nothing found
  1  the audit failed (no cluster, a section could not be read)
  2  findings to act on: an object deleting longer than --settle, an object
     held by a finalizer whose releasing controller is down (its heartbeat
     Lease, labelled finale.dev/finalizer-holder, has expired), a record
     whose owner is gone for longer than --settle (overdue), an invalid
     record, or a record the sweeper reported unreachable
  3  no findings, but pending records: their owner is gone and they are
     younger than --settle, so the sweeper may still clean them; run the
     audit again once the window has passed (the report says when)
  64 a usage error: an unknown flag, a bad flag value, an extra argument
Objects deleting for less than --settle are listed but do not change the
exit status: a busy cluster always has some.

flags:
`
	msgBadOutput   = "-o %q: want text or json"
	msgBadSettle   = "--settle %s: want a positive duration"
	msgExtraArgs   = "unexpected arguments %q: finale audit takes only flags"
	msgConfig      = "no cluster configuration (pass --kubeconfig, set $KUBECONFIG, or create ~/.kube/config): %w"
	msgKubeconfig  = "--kubeconfig %s: %w"
	msgUnreachable = "cannot reach the cluster at %s (check --kubeconfig or $KUBECONFIG and that the apiserver is up): %w"
	msgGroupFailed = "API group %s not discovered, its objects are not checked: %v"
	msgListFailed  = "%s not listed, its deleting objects are not checked: %v"
	msgObjectRead  = "%s %s: could not read its conditions: %v"
	msgNoRecordsNS = "records namespace %s does not exist: no records can be there (wrong --records-namespace?)"
	msgNoKey       = "records not authenticated (the operator key Secret %s/%s could not be read: %v): a record edited by hand is not detected by this audit; the sweeper refuses such records"
	msgRecordsList = "list cleanup records in %s: %w"
	// Notes of the unreachable section: the sweeper's verdict kept on a
	// record (ledger.Note); the record's Events, while they last, say more.
	msgNoteUnreachable = "no allowed connection proved the record's deployment or the cleanup failed (last error class %s); the Events on the record say which connections were tried and how to clean up by hand"
	msgNoteUnverified  = "no connection the sweeper may use authenticates the deployment's server: make one authenticated (for PostgreSQL sslMode verify-full) or clean up by hand; the Events on the record say which"
	msgOwnerUnknownFmt = "owner lookup failed: %v"
	msgFindings        = "%w: %s"
	msgSummary         = "%d stuck deletions, %d records (%d owner gone, %d overdue), %d unreachable"
	msgSummaryInvalid  = ", %d invalid records"
	msgSummaryPending  = ", %d pending records (owner gone less than %s ago: run again in %s)"
	msgSummaryHolders  = ", %d finalizer holders down"
	msgHoldersList     = "finalizer holder Leases not listed, finalizers whose controller is down are not detected: %v"
	// msgHolderRemedy is printed under the holders that are down: the
	// remedy is the controller's, so the audit names the Lease, never
	// text from it.
	msgHolderRemedy = "The controller that renews each Lease above releases those finalizers, and has stopped: the objects stay until it runs again. " +
		"Start it again (it releases by its own rule); to remove it instead, run its uninstall, which deletes what adds the finalizer and then removes it " +
		"(the Argo guard: guard uninstall, in examples/argo)."
)

// Owner states of a cleanup record.
const (
	ownerPresent   = "present"
	ownerGone      = "gone"
	ownerRecreated = "recreated"
	ownerUnknown   = "unknown"
)

// Namespace conditions worth a line: they say what the namespace
// controller is still waiting for.
var namespaceConditions = []corev1.NamespaceConditionType{
	corev1.NamespaceFinalizersRemaining,
	corev1.NamespaceContentRemaining,
	corev1.NamespaceDeletionContentFailure,
	corev1.NamespaceDeletionDiscoveryFailure,
	corev1.NamespaceDeletionGVParsingFailure,
}

// report is what the audit found; its JSON names are part of the command's
// interface, so they only ever grow.
type report struct {
	Now           time.Time `json:"now"`
	SettleSeconds int64     `json:"settleSeconds"`
	// RecordSettleSeconds is the sweeper's own window for records
	// (sweep.SettleWindow: --settle plus the sweeper's default clock
	// skew): a record is overdue past it, never before the sweeper acts.
	RecordSettleSeconds int64          `json:"recordSettleSeconds"`
	RecordsNamespace    string         `json:"recordsNamespace"`
	Deletions           []deletion     `json:"stuckDeletions"`
	Records             recordsSection `json:"records"`
	Unreachable         []unreachable  `json:"unreachable"`
	// HoldersDown: finalizer holders whose heartbeat Lease has expired
	// while deleting objects carry one of their finalizers.
	HoldersDown []holderDown `json:"holdersDown"`
	Warnings    []string     `json:"warnings,omitempty"`
}

// holder is a finalizer holder's heartbeat Lease (watchdog's convention),
// as one deleting object's finalizer refers to it.
type holder struct {
	Finalizer string `json:"finalizer"`
	// Lease is namespace/name.
	Lease string `json:"lease"`
	// Expiry is renewTime plus leaseDurationSeconds; absent when the
	// Lease has neither (it vouches for nothing).
	Expiry  *time.Time `json:"expiry,omitempty"`
	Expired bool       `json:"expired"`
}

// holderDown is an expired holder Lease and what it holds.
type holderDown struct {
	Lease      string     `json:"lease"`
	Finalizers []string   `json:"finalizers"`
	Expiry     *time.Time `json:"expiry,omitempty"`
	// ExpiredSeconds: since the expiry (0 when it has none).
	ExpiredSeconds int64 `json:"expiredSeconds"`
	// Objects: deleting objects held by one of its finalizers.
	Objects int `json:"objects"`
}

type deletion struct {
	APIVersion        string    `json:"apiVersion"`
	Kind              string    `json:"kind"`
	Namespace         string    `json:"namespace,omitempty"`
	Name              string    `json:"name"`
	DeletionTimestamp time.Time `json:"deletionTimestamp"`
	AgeSeconds        int64     `json:"ageSeconds"`
	// Overdue: deleting for longer than the settle window.
	Overdue    bool     `json:"overdue"`
	Finalizers []string `json:"finalizers,omitempty"`
	// SpecFinalizers are a namespace's spec.finalizers (kubernetes), which
	// the namespace controller removes once the content is gone.
	SpecFinalizers []string    `json:"specFinalizers,omitempty"`
	Conditions     []condition `json:"conditions,omitempty"`
	// Holders: the heartbeat Leases of the controllers that release its
	// finalizers, for the finalizers that have one.
	Holders []holder `json:"holders,omitempty"`
	// HolderDown: some finalizer of it has holder Leases and all have
	// expired: nothing will release it.
	HolderDown bool `json:"holderDown,omitempty"`
}

type condition struct {
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

type recordsSection struct {
	Total        int `json:"total"`
	OwnerPresent int `json:"ownerPresent"`
	OwnerGone    int `json:"ownerGone"`
	OwnerUnknown int `json:"ownerUnknown"`
	Overdue      int `json:"overdue"`
	// Pending: owner gone, still within the settle window (OwnerGone is
	// Overdue plus Pending plus Retained).
	Pending int `json:"pending"`
	// Retained: owner gone, deletion policy Retain: the sweeper keeps the
	// record (a restored owner may adopt it) and deletes nothing; never
	// overdue.
	Retained int `json:"retained"`
	// Authenticated: the records were checked against the operator key;
	// false when the audit could not read the key Secret.
	Authenticated bool            `json:"authenticated"`
	Gone          []goneRecord    `json:"gone"`
	Unknown       []goneRecord    `json:"unknown,omitempty"`
	Invalid       []invalidRecord `json:"invalid"`
}

// owner is ledger.Owner with JSON names of the command's own, so that a
// change in the library does not change the command's output.
type owner struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
}

func ownerOf(o ledger.Owner) owner {
	return owner{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, UID: string(o.UID)}
}

func (o owner) String() string {
	return ledger.Owner{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, UID: types.UID(o.UID)}.String()
}

type goneRecord struct {
	Record string `json:"record"`
	Owner  owner  `json:"owner"`
	// OwnerState is gone, recreated (same name, other UID: the sweeper
	// deletes nothing while it exists, and it may adopt the record) or
	// unknown.
	OwnerState string `json:"ownerState"`
	// Policy is the owner's deletion policy as recorded.
	Policy      string `json:"deletionPolicy"`
	AgeSeconds  int64  `json:"ageSeconds"`
	ExternalIDs int    `json:"externalIDs"`
	Deployment  string `json:"deployment"`
	Overdue     bool   `json:"overdue"`
	Error       string `json:"error,omitempty"`
}

type invalidRecord struct {
	Record string `json:"record"`
	// Owner is whatever of the owner did decode.
	Owner  owner  `json:"owner"`
	Reason string `json:"reason"`
}

type unreachable struct {
	Record     string    `json:"record"`
	Reason     string    `json:"reason"`
	Note       string    `json:"note"`
	Time       time.Time `json:"time"`
	AgeSeconds int64     `json:"ageSeconds"`
}

// findings counts what makes the audit fail.
func (r *report) findings() int {
	n := r.Records.Overdue + len(r.Records.Invalid) + len(r.Unreachable)
	for _, d := range r.Deletions {
		if d.Overdue || d.HolderDown {
			n++
		}
	}
	return n
}

// recheckIn is how long until every pending record has passed the settle
// window, and a new audit says for each whether it was swept or is overdue.
func (r *report) recheckIn() time.Duration {
	var in int64
	for _, g := range r.Records.Gone {
		if !g.Overdue {
			in = max(in, r.RecordSettleSeconds-g.AgeSeconds)
		}
	}
	return time.Duration(in) * time.Second
}

func (r *report) summary() string {
	s := fmt.Sprintf(msgSummary, len(r.Deletions), r.Records.Total, r.Records.OwnerGone, r.Records.Overdue, len(r.Unreachable))
	if n := len(r.Records.Invalid); n > 0 {
		s += fmt.Sprintf(msgSummaryInvalid, n)
	}
	if n := r.Records.Pending; n > 0 {
		s += fmt.Sprintf(msgSummaryPending, n, age(r.RecordSettleSeconds), r.recheckIn())
	}
	if n := len(r.HoldersDown); n > 0 {
		s += fmt.Sprintf(msgSummaryHolders, n)
	}
	return s
}

// verdict is the audit's outcome: errFindings when there is something to
// act on (whatever else), else errPending when records are pending, else
// nil. Both errors carry the summary.
func (r *report) verdict() error {
	switch {
	case r.findings() > 0:
		return fmt.Errorf(msgFindings, errFindings, r.summary())
	case r.Records.Pending > 0:
		return fmt.Errorf(msgFindings, errPending, r.summary())
	}
	return nil
}

// exitCode maps run's error to the command's exit status: the audit's
// outcomes by their errors, anything else by internal/exitcode's table
// (usage errors, invalid descriptions, violations; 1 otherwise).
func exitCode(err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errFindings):
		return exitFindings
	case errors.Is(err, errPending):
		return exitPending
	case errors.Is(err, errViolation):
		return exitFindings
	}
	return exitcode.Of(err)
}

// auditor holds the clients and settings of one audit. Every client only
// ever reads.
type auditor struct {
	discovery discovery.DiscoveryInterface
	metadata  metadata.Interface
	dynamic   dynamic.Interface
	// reader reads records and events, and owners as metadata through its
	// RESTMapper, which learns kinds installed after the audit started.
	reader           client.Reader
	recordsNamespace string
	// keySecret names the operator key Secret in recordsNamespace.
	keySecret string
	settle    time.Duration
	clock     clock.PassiveClock
	// namespaces limits the deletions section to these namespaces (and the
	// Namespace objects of these names); empty is the whole cluster. Tests
	// use it because the cluster is shared by every test of the binary.
	namespaces []string
}

func newAuditor(cfg *rest.Config, recordsNamespace string, settle time.Duration, clk clock.PassiveClock) (auditor, error) {
	cfg = rest.CopyConfig(cfg)
	// Listing every kind touches deprecated ones (v1 Endpoints,
	// ComponentStatus); their warnings would bury the report.
	cfg.WarningHandler = rest.NoWarnings{}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return auditor{}, fmt.Errorf("discovery client: %w", err)
	}
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return auditor{}, fmt.Errorf("metadata client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return auditor{}, fmt.Errorf("dynamic client: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		return auditor{}, fmt.Errorf("client: %w", err)
	}
	return auditor{
		discovery: dc, metadata: mc, dynamic: dyn, reader: c,
		recordsNamespace: recordsNamespace, keySecret: ledger.KeySecretName, settle: settle, clock: clk,
	}, nil
}

// audit is `finale audit`: it parses flags, connects, prints the report and
// returns an error wrapping errFindings when there is something to act on.
func audit(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig; default $KUBECONFIG, then the in-cluster config, then ~/.kube/config")
	recordsNS := fs.String("records-namespace", "",
		"namespace of the cleanup records; default $"+ledger.NamespaceEnv+", else "+defaultRecordsNamespace+" (the reference operator's)")
	settle := fs.Duration("settle", sweep.DefaultSettle,
		"how long a deletion may take, and a record's owner may be gone, before it is a finding (the sweeper's settle window)")
	output := fs.String("o", "text", "output format: text or json")
	keySecret := fs.String("key-secret", ledger.KeySecretName, "Secret in the records namespace holding the operator key, read (never written) to authenticate the records")
	if helped, err := parseFlags(fs, args, out, auditUsage); helped || err != nil {
		return err // the usage was asked for and printed, or a usage error
	}
	if fs.NArg() > 0 {
		return exitcode.Usagef(msgExtraArgs, fs.Args())
	}
	if *output != "text" && *output != "json" {
		return exitcode.Usagef(msgBadOutput, *output)
	}
	if *settle <= 0 {
		return exitcode.Usagef(msgBadSettle, *settle)
	}
	ns := cmp.Or(*recordsNS, os.Getenv(ledger.NamespaceEnv), defaultRecordsNamespace)

	cfg, err := restConfig(*kubeconfig)
	if err != nil {
		return err
	}
	a, err := newAuditor(cfg, ns, *settle, clock.RealClock{})
	a.keySecret = *keySecret
	if err != nil {
		return err
	}
	if _, err := a.discovery.ServerVersion(); err != nil {
		return fmt.Errorf(msgUnreachable, cfg.Host, err)
	}
	rep, err := runAudit(ctx, a)
	if err != nil {
		return err
	}
	if err := printReport(out, rep, *output); err != nil {
		return err
	}
	return rep.verdict()
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf(msgKubeconfig, kubeconfig, err)
		}
		return withRate(cfg), nil
	}
	cfg, err := config.GetConfigWithContext("")
	if err != nil {
		return nil, fmt.Errorf(msgConfig, err)
	}
	return withRate(cfg), nil
}

// withRate lifts client-go's default of 5 requests a second, at which one
// list per kind alone takes ten seconds; the audit only reads, in pages, and
// the apiserver's priority and fairness still protects it.
func withRate(cfg *rest.Config) *rest.Config {
	cfg.QPS, cfg.Burst = auditQPS, 2*auditQPS
	return cfg
}

// runAudit gathers the report. Failures that only hide part of the cluster
// (a group that is not discovered, a kind that cannot be listed) become
// warnings; failures that would make a section lie become errors.
func runAudit(ctx context.Context, a auditor) (report, error) {
	now := a.clock.Now()
	// One settle: records are overdue past the sweeper's own window
	// (sweep.SettleWindow), so the audit never calls overdue a record the
	// sweeper is still leaving alone.
	rep := report{Now: now, SettleSeconds: seconds(a.settle), RecordSettleSeconds: seconds(sweep.SettleWindow(a.settle, 0)), RecordsNamespace: a.recordsNamespace}
	rep.Deletions = a.deletions(ctx, now, &rep.Warnings)
	rep.HoldersDown = a.holders(ctx, now, rep.Deletions, &rep.Warnings)
	if err := a.records(ctx, now, &rep); err != nil {
		return report{}, err
	}
	return rep, nil
}

func (a auditor) deletions(ctx context.Context, now time.Time, warnings *[]string) []deletion {
	kinds, withStatus, err := a.listableKinds()
	if err != nil {
		var gerr *discovery.ErrGroupDiscoveryFailed
		if !errors.As(err, &gerr) {
			*warnings = append(*warnings, fmt.Sprintf(msgGroupFailed, "(all)", err))
		} else {
			var ws []string
			for gv, e := range gerr.Groups {
				ws = append(ws, fmt.Sprintf(msgGroupFailed, gv, e))
			}
			slices.Sort(ws)
			*warnings = append(*warnings, ws...)
		}
	}
	out := []deletion{}
	// One object can be served by two groups (v1 and events.k8s.io/v1
	// Events): it is reported once.
	seen := map[types.UID]bool{}
	for _, k := range kinds {
		found, err := a.deletingOf(ctx, k.gvr, k.res, now, seen)
		if err != nil {
			*warnings = append(*warnings, fmt.Sprintf(msgListFailed, k.gvr.GroupResource(), err))
			continue
		}
		// The watchdog writes its condition through the status subresource,
		// so a kind without one cannot carry it: no need to read the object.
		if withStatus[k.gvr.GroupResource()] {
			for i := range found {
				a.addConditions(ctx, k.gvr, k.res.Namespaced, &found[i], warnings)
			}
		}
		out = append(out, found...)
	}
	slices.SortFunc(out, func(x, y deletion) int {
		return cmp.Or(x.DeletionTimestamp.Compare(y.DeletionTimestamp), cmp.Compare(x.Kind, y.Kind),
			cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name))
	})
	return out
}

// holders lists the finalizer holders' Leases (watchdog.LabelFinalizerHolder,
// every namespace), attaches them to the deletions whose finalizers they
// claim, marks the deletions nothing will release, and returns the expired
// holders that hold at least one of them.
func (a auditor) holders(ctx context.Context, now time.Time, dels []deletion, warnings *[]string) []holderDown {
	sel := labels.SelectorFromSet(labels.Set{watchdog.LabelFinalizerHolder: "true"})
	byFinalizer := map[string][]holder{}
	down := map[string]*holderDown{}
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: sel}, client.Limit(listPage)}
	for {
		var l coordinationv1.LeaseList
		if err := a.reader.List(ctx, &l, opts...); err != nil {
			*warnings = append(*warnings, fmt.Sprintf(msgHoldersList, err))
			return []holderDown{}
		}
		for i := range l.Items {
			lease := &l.Items[i]
			name := objectName(lease.Namespace, lease.Name)
			h := holder{Lease: name, Expired: true}
			if exp, ok := watchdog.HolderExpiry(lease); ok {
				h.Expiry, h.Expired = &exp, !now.Before(exp)
			}
			fins := watchdog.HeldFinalizers(lease)
			for _, f := range fins {
				h.Finalizer = f
				byFinalizer[f] = append(byFinalizer[f], h)
			}
			if h.Expired && len(fins) > 0 {
				hd := &holderDown{Lease: name, Finalizers: fins, Expiry: h.Expiry}
				if h.Expiry != nil {
					hd.ExpiredSeconds = seconds(now.Sub(*h.Expiry))
				}
				down[name] = hd
			}
		}
		if l.Continue == "" {
			break
		}
		opts = []client.ListOption{client.MatchingLabelsSelector{Selector: sel}, client.Limit(listPage), client.Continue(l.Continue)}
	}
	for i := range dels {
		d := &dels[i]
		counted := map[string]bool{}
		for _, f := range d.Finalizers {
			hs := byFinalizer[f]
			if len(hs) == 0 {
				continue
			}
			d.Holders = append(d.Holders, hs...)
			alive := false
			for _, h := range hs {
				alive = alive || !h.Expired
			}
			if alive {
				continue
			}
			d.HolderDown = true
			for _, h := range hs {
				if hd := down[h.Lease]; hd != nil && !counted[h.Lease] {
					hd.Objects++
					counted[h.Lease] = true
				}
			}
		}
	}
	out := []holderDown{}
	for _, hd := range down {
		if hd.Objects > 0 {
			out = append(out, *hd)
		}
	}
	slices.SortFunc(out, func(x, y holderDown) int { return cmp.Compare(x.Lease, y.Lease) })
	return out
}

type listable struct {
	gvr schema.GroupVersionResource
	res metav1.APIResource
}

// listableKinds returns every resource that can be listed, in its group's
// preferred version, and which resources have a status subresource. It
// does not use ServerPreferredResources because that drops subresources.
// A discovery error for some groups comes back with the rest.
func (a auditor) listableKinds() ([]listable, map[schema.GroupResource]bool, error) {
	groups, lists, err := a.discovery.ServerGroupsAndResources()
	preferred := map[string]string{}
	for _, g := range groups {
		preferred[g.Name] = g.PreferredVersion.Version
	}
	chosen := map[schema.GroupResource]listable{}
	withStatus := map[schema.GroupResource]bool{}
	for _, l := range lists {
		gv, perr := schema.ParseGroupVersion(l.GroupVersion)
		if perr != nil {
			continue
		}
		for _, r := range l.APIResources {
			if name, ok := strings.CutSuffix(r.Name, "/status"); ok {
				withStatus[gv.WithResource(name).GroupResource()] = true
				continue
			}
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			gr := gv.WithResource(r.Name).GroupResource()
			if _, ok := chosen[gr]; ok && gv.Version != preferred[gv.Group] {
				continue
			}
			chosen[gr] = listable{gvr: gv.WithResource(r.Name), res: r}
		}
	}
	out := slices.Collect(maps.Values(chosen))
	slices.SortFunc(out, func(x, y listable) int {
		return cmp.Or(cmp.Compare(x.gvr.Group, y.gvr.Group), cmp.Compare(x.gvr.Resource, y.gvr.Resource))
	})
	return out, withStatus, err
}

// deletingOf lists one resource as metadata, in pages, and keeps the
// objects with a deletionTimestamp.
func (a auditor) deletingOf(ctx context.Context, gvr schema.GroupVersionResource, r metav1.APIResource, now time.Time,
	seen map[types.UID]bool) ([]deletion, error) {
	scopes := []string{metav1.NamespaceAll}
	if len(a.namespaces) > 0 {
		if !r.Namespaced && gvr.GroupResource() != corev1.Resource("namespaces") {
			return nil, nil
		}
		if r.Namespaced {
			scopes = a.namespaces
		}
	}
	var out []deletion
	for _, ns := range scopes {
		opts := metav1.ListOptions{Limit: listPage}
		for {
			var l *metav1.PartialObjectMetadataList
			var err error
			if r.Namespaced {
				l, err = a.metadata.Resource(gvr).Namespace(ns).List(ctx, opts)
			} else {
				l, err = a.metadata.Resource(gvr).List(ctx, opts)
			}
			if err != nil {
				return nil, err
			}
			for _, o := range l.Items {
				if o.DeletionTimestamp == nil {
					continue
				}
				if !r.Namespaced && len(a.namespaces) > 0 && !slices.Contains(a.namespaces, o.Name) {
					continue
				}
				if seen[o.UID] {
					continue
				}
				seen[o.UID] = true
				dts := o.DeletionTimestamp.Time
				age := now.Sub(dts)
				out = append(out, deletion{
					APIVersion: gvr.GroupVersion().String(), Kind: r.Kind, Namespace: o.Namespace, Name: o.Name,
					DeletionTimestamp: dts, AgeSeconds: seconds(age), Overdue: age > a.settle, Finalizers: o.Finalizers,
				})
			}
			if l.Continue == "" {
				break
			}
			opts.Continue = l.Continue
		}
	}
	return out, nil
}

// addConditions reads the full object, because metadata has no status: the
// CleanupBlocked condition the watchdog writes, or for a namespace the
// conditions of the namespace controller and its spec.finalizers.
func (a auditor) addConditions(ctx context.Context, gvr schema.GroupVersionResource, namespaced bool, d *deletion, warnings *[]string) {
	var obj *unstructured.Unstructured
	var err error
	if namespaced {
		obj, err = a.dynamic.Resource(gvr).Namespace(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
	} else {
		obj, err = a.dynamic.Resource(gvr).Get(ctx, d.Name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return // finished deleting since the list
	}
	if err != nil {
		*warnings = append(*warnings, fmt.Sprintf(msgObjectRead, d.Kind, objectName(d.Namespace, d.Name), err))
		return
	}
	isNamespace := gvr.GroupResource() == corev1.Resource("namespaces")
	if isNamespace {
		d.SpecFinalizers, _, _ = unstructured.NestedStringSlice(obj.Object, "spec", "finalizers")
	}
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		typ, _ := m["type"].(string)
		status, _ := m["status"].(string)
		if status != string(metav1.ConditionTrue) {
			continue
		}
		if isNamespace && !slices.Contains(namespaceConditions, corev1.NamespaceConditionType(typ)) {
			continue
		}
		if !isNamespace && typ != watchdog.ConditionType {
			continue
		}
		reason, _ := m["reason"].(string)
		message, _ := m["message"].(string)
		d.Conditions = append(d.Conditions, condition{Type: typ, Reason: reason, Message: message})
	}
}

// records fills the records section, and the unreachable one from the
// sweeper's verdicts kept on the records (ledger.Note): durable state,
// never Events, which expire after an hour.
func (a auditor) records(ctx context.Context, now time.Time, rep *report) error {
	window := sweep.SettleWindow(a.settle, 0)
	unreach := []unreachable{}
	sec := recordsSection{Gone: []goneRecord{}, Invalid: []invalidRecord{}}
	var nsObj metav1.PartialObjectMetadata
	nsObj.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := a.reader.Get(ctx, client.ObjectKey{Name: a.recordsNamespace}, &nsObj); apierrors.IsNotFound(err) {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf(msgNoRecordsNS, a.recordsNamespace))
	}
	store, err := ledger.NewConfigMapStore(ledger.ReadWriter{Reader: a.reader, Writer: readOnly{}}, a.recordsNamespace)
	if err != nil {
		return err
	}
	list := store.List
	if l, err := a.ledger(ctx, store); err == nil {
		list, sec.Authenticated = l.List, true
	} else {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf(msgNoKey, a.recordsNamespace, a.keySecret, err))
	}
	cont := ""
	for {
		p, err := list(ctx, listPage, cont)
		if err != nil {
			return fmt.Errorf(msgRecordsList, a.recordsNamespace, err)
		}
		for _, r := range p.Records {
			sec.Total++
			if u, ok := noted(r, now); ok {
				unreach = append(unreach, u)
			}
			state, err := a.ownerState(ctx, r.Owner)
			if state == ownerPresent {
				sec.OwnerPresent++
				continue
			}
			age := now.Sub(r.SettleFrom())
			g := goneRecord{
				Record: r.Source.Name, Owner: ownerOf(r.Owner), OwnerState: state, Policy: string(r.Policy), AgeSeconds: seconds(age),
				ExternalIDs: len(r.ExternalIDs), Deployment: r.Deployment,
			}
			if state == ownerUnknown {
				g.Error = fmt.Sprintf(msgOwnerUnknownFmt, err)
				sec.OwnerUnknown++
				sec.Unknown = append(sec.Unknown, g)
				continue
			}
			sec.OwnerGone++
			switch {
			case r.Policy == ledger.PolicyRetain:
				sec.Retained++
			case age > window:
				g.Overdue = true
				sec.Overdue++
			default:
				sec.Pending++
			}
			sec.Gone = append(sec.Gone, g)
		}
		for _, inv := range p.Invalid {
			sec.Total++
			ir := invalidRecord{Reason: inv.Err.Error()}
			if inv.Record != nil {
				ir.Owner = ownerOf(inv.Record.Owner)
				if inv.Record.Source != nil {
					ir.Record = inv.Record.Source.Name
				}
			}
			sec.Invalid = append(sec.Invalid, ir)
		}
		if p.Continue == "" {
			break
		}
		cont = p.Continue
	}
	slices.SortFunc(sec.Gone, func(x, y goneRecord) int {
		return cmp.Or(cmp.Compare(y.AgeSeconds, x.AgeSeconds), cmp.Compare(x.Record, y.Record))
	})
	slices.SortFunc(sec.Invalid, func(x, y invalidRecord) int { return cmp.Compare(x.Record, y.Record) })
	rep.Records = sec
	slices.SortFunc(unreach, func(x, y unreachable) int { return cmp.Or(x.Time.Compare(y.Time), cmp.Compare(x.Record, y.Record)) })
	rep.Unreachable = unreach
	return nil
}

// noted is the unreachable entry of a record the sweeper keeps because it
// could not act (sweep.Unreachable, sweep.Unverified), from its Note.
func noted(r *ledger.Record, now time.Time) (unreachable, bool) {
	var reason, note string
	switch sweep.State(r.Note.State) {
	case sweep.Unreachable:
		reason, note = sweep.ReasonUnreachable, fmt.Sprintf(msgNoteUnreachable, r.Note.Class)
	case sweep.Unverified:
		reason, note = sweep.ReasonUnverified, msgNoteUnverified
	default:
		return unreachable{}, false
	}
	return unreachable{Record: r.Source.Name, Reason: reason, Note: note, Time: r.Note.Since, AgeSeconds: seconds(now.Sub(r.Note.Since))}, true
}

// ledger is a read-only ledger over store with the operator key, so that
// records are authenticated as the sweeper authenticates them. The key
// Secret is read, never created.
func (a auditor) ledger(ctx context.Context, store ledger.Store) (*ledger.Ledger, error) {
	var sec corev1.Secret
	if err := a.reader.Get(ctx, client.ObjectKey{Namespace: a.recordsNamespace, Name: a.keySecret}, &sec); err != nil {
		return nil, err
	}
	key, err := ledger.NewKey(sec.Data[ledger.KeySecretKey])
	if err != nil {
		return nil, err
	}
	return ledger.New(store, ledger.Options{Key: key})
}

// ownerState looks the owner up as metadata, as the sweeper does: not
// found, or found under another UID (recreated), is gone; a lookup that
// fails is unknown, never gone.
func (a auditor) ownerState(ctx context.Context, o ledger.Owner) (string, error) {
	var obj metav1.PartialObjectMetadata
	obj.SetGroupVersionKind(o.GroupVersionKind())
	err := a.reader.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Name}, &obj)
	switch {
	case apierrors.IsNotFound(err):
		return ownerGone, nil
	case err != nil:
		return ownerUnknown, err
	case o.ClaimedBy(&obj):
		return ownerRecreated, nil
	case obj.UID != o.UID:
		return ownerGone, nil // a namesake that does not claim the record
	}
	return ownerPresent, nil
}

func printReport(w io.Writer, rep report, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Stuck deletions (%d; overdue after %s)\n", len(rep.Deletions), age(rep.SettleSeconds))
	if len(rep.Deletions) > 0 {
		fmt.Fprintln(tw, "AGE\tOVERDUE\tKIND\tOBJECT\tFINALIZERS\tCONDITIONS")
		for _, d := range rep.Deletions {
			fins := d.Finalizers
			if len(d.SpecFinalizers) > 0 {
				fins = append(slices.Clone(fins), "spec:"+strings.Join(d.SpecFinalizers, ","))
			}
			conds := make([]string, len(d.Conditions))
			for i, c := range d.Conditions {
				conds[i] = c.Type + ": " + oneLine(c.Message)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", age(d.AgeSeconds), deletionState(d), kindOf(d.APIVersion, d.Kind),
				objectName(d.Namespace, d.Name), dash(strings.Join(fins, ",")), dash(strings.Join(conds, "; ")))
		}
	}
	if len(rep.HoldersDown) > 0 {
		// The heading also ends the table above.
		fmt.Fprintf(tw, "Finalizers whose controller is down (%d)\n", len(rep.HoldersDown))
		fmt.Fprintln(tw, "LEASE\tFINALIZERS\tEXPIRED\tDELETING OBJECTS HELD")
		for _, h := range rep.HoldersDown {
			expired := "(no renewTime)"
			if h.Expiry != nil {
				expired = age(h.ExpiredSeconds) + " ago"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", h.Lease, strings.Join(h.Finalizers, ","), expired, h.Objects)
		}
		fmt.Fprintln(tw, msgHolderRemedy)
	}
	s := rep.Records
	fmt.Fprintf(tw, "\nCleanup records in %s: %d total, %d owner present, %d owner gone (%d overdue, %d pending), %d lookup failed, %d invalid\n",
		rep.RecordsNamespace, s.Total, s.OwnerPresent, s.OwnerGone, s.Overdue, s.Pending, s.OwnerUnknown, len(s.Invalid))
	if len(s.Gone)+len(s.Unknown) > 0 {
		fmt.Fprintln(tw, "AGE\tOVERDUE\tOWNER\tSTATE\tPOLICY\tIDS\tDEPLOYMENT\tRECORD")
		for _, g := range append(slices.Clone(s.Gone), s.Unknown...) {
			state := g.OwnerState
			switch {
			case g.Error != "":
				state += " (" + oneLine(g.Error) + ")"
			case g.OwnerState == ownerRecreated:
				state += " (a namesake claims it: nothing is deleted while the claim stands)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", age(g.AgeSeconds), overdue(g, rep.RecordSettleSeconds), g.Owner, state, dash(g.Policy), g.ExternalIDs, g.Deployment, g.Record)
		}
		if s.Retained > 0 {
			fmt.Fprintf(tw, "%d of them Retain: the sweeper keeps those records, for a restored object to adopt, and deletes nothing\n", s.Retained)
		}
	}
	if len(s.Invalid) > 0 {
		// The heading also ends the table above: tabwriter aligns
		// adjacent lines as one table.
		fmt.Fprintf(tw, "Invalid records (%d; the sweeper will not touch them)\n", len(s.Invalid))
		fmt.Fprintln(tw, "RECORD\tOWNER\tREASON")
		for _, inv := range s.Invalid {
			o := "-"
			if inv.Owner.Name != "" {
				o = inv.Owner.String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", inv.Record, o, oneLine(inv.Reason))
		}
	}
	fmt.Fprintf(tw, "\nUnreachable records (%d)\n", len(rep.Unreachable))
	if len(rep.Unreachable) > 0 {
		fmt.Fprintln(tw, "AGE\tRECORD\tREASON\tNOTE")
		for _, u := range rep.Unreachable {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", age(u.AgeSeconds), u.Record, u.Reason, oneLine(u.Note))
		}
	}
	if len(rep.Warnings) > 0 {
		fmt.Fprintln(tw, "\nWarnings (parts of the cluster not checked)")
		for _, m := range rep.Warnings {
			fmt.Fprintln(tw, "  "+oneLine(m))
		}
	}
	fmt.Fprintln(tw, "\n"+rep.summary())
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

func seconds(d time.Duration) int64 { return int64(max(d, 0) / time.Second) }

func age(s int64) string { return (time.Duration(s) * time.Second).String() }

func objectName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// kindOf names the kind with its group, as kubectl does, because two groups
// may define the same kind.
func kindOf(apiVersion, kind string) string {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil || gv.Group == "" {
		return kind
	}
	return kind + "." + gv.Group
}

// overdue is a gone record's OVERDUE column: yes, or for a pending record
// when it will be ("in 3m0s"); a record whose owner could not be looked up
// is neither.
func overdue(g goneRecord, settleSeconds int64) string {
	switch {
	case g.Overdue:
		return "yes"
	case g.OwnerState == ownerUnknown:
		return "-"
	case g.Policy == string(ledger.PolicyRetain):
		return "kept"
	}
	return "in " + age(settleSeconds-g.AgeSeconds)
}

// deletionState is a deletion's OVERDUE column: whether it is past the
// settle window, and whether nothing will release it.
func deletionState(d deletion) string {
	switch {
	case d.HolderDown && d.Overdue:
		return "yes, holder down"
	case d.HolderDown:
		return "holder down"
	}
	return yes(d.Overdue)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "-"
}

func dash(s string) string { return cmp.Or(s, "-") }

// oneLine keeps a table row on one line: conditions and notes may hold
// newlines and tabs, which would break the alignment.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// readOnly is the writer half of the audit's record store: the store's
// API needs one, and the audit must never use it.
//
// The embedded Writer is nil: it only supplies the methods some
// controller-runtime versions add to client.Writer (Apply, from v0.22),
// which the store never calls; every method the store has is answered
// here with errReadOnly.
type readOnly struct{ client.Writer }

var _ client.Writer = readOnly{}

func (readOnly) Create(context.Context, client.Object, ...client.CreateOption) error {
	return errReadOnly
}
func (readOnly) Delete(context.Context, client.Object, ...client.DeleteOption) error {
	return errReadOnly
}
func (readOnly) Update(context.Context, client.Object, ...client.UpdateOption) error {
	return errReadOnly
}
func (readOnly) Patch(context.Context, client.Object, client.Patch, ...client.PatchOption) error {
	return errReadOnly
}
func (readOnly) DeleteAllOf(context.Context, client.Object, ...client.DeleteAllOfOption) error {
	return errReadOnly
}
