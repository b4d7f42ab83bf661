package scenarios

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/postgres/cmd/operator/app"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/ledger"
)

// replicaEnv marks a process the failover scenario started as a replica
// of the reference operator (see ReplicaMain).
const replicaEnv = "FINALE_SCENARIOS_REPLICA"

// ReplicaMain makes this binary a replica of the reference operator when
// the failover scenario started it as one, and returns at once otherwise.
// Call it first in main (or TestMain) of any binary that runs the failover
// scenario: the scenario runs its replicas as copies of the running
// executable (os.Executable), so that they are the operator's own command
// (package app) in processes of their own, which can be killed and
// stopped.
func ReplicaMain() {
	if os.Getenv(replicaEnv) != "1" {
		return
	}
	if err := app.Main(ctrl.SetupSignalHandler(), os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

const replicaStopWait = 30 * time.Second

// Election is the replicas' leader-election timing: the reference
// operator's --leader-elect-lease-duration, -renew-deadline and
// -retry-period.
type Election struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// FastElection is the failover scenario's default, so that a run takes
// about a minute: a takeover in seconds, with a renew deadline a loaded
// machine still meets. OperatorElection is the operator's own default
// (controller-runtime's), what a deployment takes over in.
var (
	FastElection     = Election{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}
	OperatorElection = Election{LeaseDuration: app.DefaultLeaseDuration, RenewDeadline: app.DefaultRenewDeadline, RetryPeriod: app.DefaultRetryPeriod}
)

// String is the three timings, lease/renew/retry.
func (e Election) String() string {
	return fmt.Sprintf("%s/%s/%s", e.LeaseDuration, e.RenewDeadline, e.RetryPeriod)
}

func (e Election) args() []string {
	return []string{
		"--leader-elect-lease-duration", e.LeaseDuration.String(),
		"--leader-elect-renew-deadline", e.RenewDeadline.String(),
		"--leader-elect-retry-period", e.RetryPeriod.String(),
	}
}

// check refuses timings the replicas would refuse, with the operator's own
// flag checks, before any replica starts.
func (e Election) check() error {
	args := append([]string{"--leader-elect", "--records-namespace=finale-system"}, e.args()...)
	if _, err := app.Parse(args); err != nil {
		return fmt.Errorf("failover: election %s: %w", e, err)
	}
	return nil
}

// replica is one operator process.
type replica struct {
	name    string
	cmd     *exec.Cmd
	log     *os.File
	started time.Time
	// api is the replica's own way to the API server, so that it alone
	// can be cut off.
	api *faultinject.Proxy

	exited chan struct{} // closed when the process has exited
	mu     sync.Mutex
	// exitErr is the process's exit (Wait's error) and exitedAt when Wait
	// saw it; guarded by mu, set before exited is closed.
	exitErr  error
	exitedAt time.Time
	// killed, paused and resumed are when the scenario did that; guarded
	// by mu.
	killed, paused, resumed time.Time
}

// replicaSet starts and tracks the replicas of one run.
type replicaSet struct {
	exe, kubeconfig, recNS, dir string
	watch                       []string
	naive                       bool
	election                    Election
	seq                         int
	// trusted is the tap's host:port, the one path the scenario vouches
	// for (--sweep-trusted-hosts).
	trusted string

	mu sync.Mutex
	// all holds every replica started, by name; guarded by mu.
	all map[string]*replica
}

func (s *replicaSet) start(prefix string) (*replica, error) {
	s.mu.Lock()
	s.seq++
	name := fmt.Sprintf("%s%d", prefix, s.seq)
	s.mu.Unlock()
	api, kubeconfig, err := s.apiProxy(name)
	if err != nil {
		return nil, err
	}
	args := []string{
		"--kubeconfig", kubeconfig, "--records-namespace", s.recNS,
		"--watch-namespaces", strings.Join(s.watch, ","),
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--leader-elect", "--leader-elect-identity", name,
		"--workers=2",
		// The sweeper acts within seconds of an owner's forced deletion.
		"--sweep-settle=1s", "--sweep-clock-skew=500ms", "--sweep-interval=1s",
		// The scenarios' call timeout, not the default 30 s: a successor
		// keeps the record of a role its killed predecessor dropped for
		// the create-in-doubt window after the role's create (it cannot
		// know that create was answered), 21 s here but 85 s at the
		// default, which the finished bound could not tell from a stuck
		// sweep.
		"--call-timeout=" + callTimeout.String(),
		// The Servers reach PostgreSQL in plain text through the tap on
		// loopback, which must read the statements to time its kills:
		// the scenario vouches for that path, as an admin would for a
		// sidecar that authenticates the server. The sweeper acts only
		// through authenticated connections. The trust names the tap's
		// host and port: a host alone is refused.
		"--sweep-trusted-hosts=" + s.trusted,
	}
	args = append(args, s.election.args()...)
	if s.naive {
		args = append(args, "--naive")
	}
	f, err := os.Create(fmt.Sprintf("%s/%s.log", s.dir, name))
	if err != nil {
		_ = api.Close() // unused
		return nil, fmt.Errorf("failover: replica log: %w", err)
	}
	cmd := exec.Command(s.exe, args...)
	cmd.Env = append(os.Environ(), replicaEnv+"=1", "PGAPPNAME="+name, ledger.NamespaceEnv+"="+s.recNS)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		_ = f.Close()   // nothing was written
		_ = api.Close() // unused
		return nil, fmt.Errorf("failover: start replica %s: %w", name, err)
	}
	r := &replica{name: name, cmd: cmd, log: f, api: api, started: time.Now(), exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		r.mu.Lock()
		r.exitErr, r.exitedAt = err, time.Now()
		r.mu.Unlock()
		close(r.exited)
	}()
	s.mu.Lock()
	s.all[name] = r
	s.mu.Unlock()
	return r, nil
}

// apiProxy puts a proxy in front of the API server for one replica and
// writes the kubeconfig that goes through it (the server's certificate
// names 127.0.0.1, which the proxy listens on too).
func (s *replicaSet) apiProxy(name string) (*faultinject.Proxy, string, error) {
	cfg, err := clientcmd.LoadFromFile(s.kubeconfig)
	if err != nil {
		return nil, "", fmt.Errorf("failover: read the kubeconfig: %w", err)
	}
	var target string
	for _, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			return nil, "", fmt.Errorf("failover: the kubeconfig's server %q: %w", c.Server, err)
		}
		target = u.Host
	}
	p, err := faultinject.NewProxy(target)
	if err != nil {
		return nil, "", err
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + p.Addr()
	}
	path := fmt.Sprintf("%s/%s.kubeconfig", s.dir, name)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		_ = p.Close() // unused
		return nil, "", fmt.Errorf("failover: write the replica's kubeconfig: %w", err)
	}
	return p, path, nil
}

func (s *replicaSet) get(name string) *replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.all[name]
}

// stopAll ends every replica still running (SIGTERM, then SIGKILL) and
// closes their logs.
func (s *replicaSet) stopAll() {
	s.mu.Lock()
	all := make([]*replica, 0, len(s.all))
	for _, r := range s.all {
		all = append(all, r)
	}
	s.mu.Unlock()
	for _, r := range all {
		r.stop()
	}
}

func (r *replica) running() bool {
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

func (r *replica) signal(sig syscall.Signal) {
	if r.running() {
		_ = r.cmd.Process.Signal(sig) // it may have exited since; Wait reports how
	}
}

// kill SIGKILLs the replica and records when.
func (r *replica) kill() time.Time {
	now := time.Now()
	r.signal(syscall.SIGKILL)
	r.mu.Lock()
	r.killed = now
	r.mu.Unlock()
	return now
}

// pause SIGSTOPs the replica; resume SIGCONTs it.
func (r *replica) pause() time.Time {
	now := time.Now()
	r.signal(syscall.SIGSTOP)
	r.mu.Lock()
	r.paused = now
	r.mu.Unlock()
	return now
}

func (r *replica) resume() time.Time {
	now := time.Now()
	r.signal(syscall.SIGCONT)
	r.mu.Lock()
	r.resumed = now
	r.mu.Unlock()
	return now
}

func (r *replica) stop() {
	r.signal(syscall.SIGCONT) // a paused process cannot handle SIGTERM
	r.signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(replicaStopWait):
		r.signal(syscall.SIGKILL)
		<-r.exited
	}
	_ = r.log.Close() // the log is complete
	_ = r.api.Close() // the process is gone
}

// waitExit waits until the replica exits, up to d, and says when it did.
func (r *replica) waitExit(ctx context.Context, d time.Duration) (time.Time, bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.exited:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.exitedAt, true
	case <-t.C:
		return time.Time{}, false
	case <-ctx.Done():
		return time.Time{}, false
	}
}

// tail is the end of the replica's log, for failures.
func (r *replica) tail(lines int) string {
	b, err := os.ReadFile(r.log.Name())
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	ls := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return string(bytes.Join(ls, []byte("\n")))
}

// term is one holder's time with the lease, as the Lease recorded it.
type term struct {
	Holder string
	// Acquired is the holder's acquireTime: its elector's clock just
	// before its acquiring write, so no earlier than that write.
	Acquired time.Time
	// Seen is when the watcher first read this holder.
	Seen time.Time
}

// leaseWatch polls the election's Lease and keeps its holders in order.
type leaseWatch struct {
	c    client.Reader
	key  types.NamespacedName
	stop context.CancelFunc
	done chan struct{}

	mu sync.Mutex
	// terms holds every holder seen, in order; guarded by mu.
	terms []term
}

const leasePoll = 50 * time.Millisecond

func watchLease(ctx context.Context, c client.Reader, namespace string) *leaseWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &leaseWatch{c: c, key: types.NamespacedName{Namespace: namespace, Name: app.LeaderElectionID}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(leasePoll)
		defer t.Stop()
		for {
			w.poll(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *leaseWatch) poll(ctx context.Context) {
	var l coordinationv1.Lease
	if err := w.c.Get(ctx, w.key, &l); err != nil {
		if !apierrors.IsNotFound(err) {
			return // the next poll tries again
		}
		return
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	var acquired time.Time
	if l.Spec.AcquireTime != nil {
		acquired = l.Spec.AcquireTime.Time
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.terms); n > 0 && w.terms[n-1].Holder == holder && w.terms[n-1].Acquired.Equal(acquired) {
		return
	}
	if holder != "" {
		w.terms = append(w.terms, term{Holder: holder, Acquired: acquired, Seen: time.Now()})
	}
}

func (w *leaseWatch) close() {
	w.stop()
	<-w.done
}

func (w *leaseWatch) history() []term {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]term(nil), w.terms...)
}

// holder is the current holder ("" before the first).
func (w *leaseWatch) holder() term {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.terms) == 0 {
		return term{}
	}
	return w.terms[len(w.terms)-1]
}

// lostAt is when each holder's lease passed to another: the next holder's
// acquisition. A holder that never lost it is absent.
func lostAt(terms []term) map[string]time.Time {
	out := map[string]time.Time{}
	for i := 0; i+1 < len(terms); i++ {
		if terms[i].Holder != terms[i+1].Holder {
			if _, ok := out[terms[i].Holder]; !ok {
				out[terms[i].Holder] = terms[i+1].Acquired
			}
		}
	}
	return out
}
