package guard

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/watchdog"
)

// HeartbeatName names the Lease the guard renews while it runs, in its own
// namespace: the admission policy's parameter. The policy adds Finalizer
// only while that Lease is fresh, so a guard that is down stops marking new
// Pods once its Lease has expired.
const HeartbeatName = PolicyName

// DefaultHeartbeatDuration is the Lease's duration: how long after the
// guard's last renewal the policy still marks new Pods. It covers a
// rolling update (the next leader renews within the leader election's
// lease of 15 s) without leaving new Pods unmarked in between.
const DefaultHeartbeatDuration = 60 * time.Second

// minHeartbeatDuration: the Lease counts whole seconds and is renewed four
// times per duration.
const minHeartbeatDuration = 2 * time.Second

// HeartbeatOptions configure a Heartbeat. Namespace is required.
type HeartbeatOptions struct {
	// Namespace of the Lease: the guard's own, where the policy binding's
	// paramRef points.
	Namespace string
	// Identity is the Lease's holderIdentity; the host name when empty
	// (the Pod's name in a cluster).
	Identity string
	// Duration is the Lease's leaseDurationSeconds, whole seconds of at
	// least 2; DefaultHeartbeatDuration when zero. The guard renews it
	// every quarter of it.
	Duration time.Duration
	// Clock writes renewTime and times the renewals; the real clock when
	// nil. The apiserver compares renewTime with its own clock, so the
	// guard's must agree with it to well within Duration (NTP).
	Clock clock.WithTicker
}

// Heartbeat renews the guard's Lease (HeartbeatName) while the guard runs.
// It is a manager Runnable that runs on the leader only: the replica that
// releases Pods is the one that vouches for them. A stopped guard leaves
// the Lease as it was, so that a rolling update (the next leader renews
// within seconds) marks every Pod; the Lease then expires by itself.
type Heartbeat struct {
	r    client.Reader
	w    client.Writer
	opts HeartbeatOptions
}

// NewHeartbeat returns a Heartbeat that reads the Lease with r (live reads:
// the guard caches only Pods) and writes it with w.
func NewHeartbeat(r client.Reader, w client.Writer, opts HeartbeatOptions) (*Heartbeat, error) {
	switch {
	case r == nil || w == nil:
		return nil, errors.New("guard: the heartbeat needs a reader and a writer")
	case opts.Namespace == "":
		return nil, errors.New("guard: HeartbeatOptions.Namespace is required: the guard's namespace, where the policy binding's paramRef names Lease " + HeartbeatName)
	}
	if opts.Duration == 0 {
		opts.Duration = DefaultHeartbeatDuration
	}
	if opts.Duration < minHeartbeatDuration || opts.Duration%time.Second != 0 {
		return nil, fmt.Errorf("guard: heartbeat duration %s: want whole seconds, at least %s", opts.Duration, minHeartbeatDuration)
	}
	if opts.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("guard: heartbeat identity: %w", err)
		}
		opts.Identity = host
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Heartbeat{r: r, w: w, opts: opts}, nil
}

// Key is the Lease the heartbeat renews.
func (h *Heartbeat) Key() client.ObjectKey {
	return client.ObjectKey{Namespace: h.opts.Namespace, Name: HeartbeatName}
}

// Renew writes the Lease once: created when missing, otherwise renewed
// (renewTime now, this holder, this duration) on the version it read.
func (h *Heartbeat) Renew(ctx context.Context) error {
	now := metav1.NewMicroTime(h.opts.Clock.Now())
	var l coordinationv1.Lease
	err := h.r.Get(ctx, h.Key(), &l)
	switch {
	case apierrors.IsNotFound(err):
		l = coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: h.opts.Namespace, Name: HeartbeatName}}
		h.fill(&l, now)
		if err := h.w.Create(ctx, &l); err != nil {
			return fmt.Errorf("guard: create heartbeat Lease %s: %w", h.Key(), err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("guard: read heartbeat Lease %s: %w", h.Key(), err)
	}
	h.fill(&l, now)
	if err := h.w.Update(ctx, &l); err != nil {
		return fmt.Errorf("guard: renew heartbeat Lease %s: %w", h.Key(), err)
	}
	return nil
}

func (h *Heartbeat) fill(l *coordinationv1.Lease, now metav1.MicroTime) {
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[watchdog.LabelFinalizerHolder] = "true"
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[watchdog.AnnotationHeldFinalizers] = Finalizer
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != h.opts.Identity {
		l.Spec.HolderIdentity = ptr.To(h.opts.Identity)
		l.Spec.AcquireTime = &now
	}
	l.Spec.LeaseDurationSeconds = ptr.To(int32(h.opts.Duration / time.Second))
	l.Spec.RenewTime = &now
}

// Start renews the Lease at once and then every quarter of its duration
// until ctx ends. A failed renewal is logged and tried again at the next
// tick: three in a row may fail before the Lease expires.
func (h *Heartbeat) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("heartbeat")
	t := h.opts.Clock.NewTicker(h.opts.Duration / 4)
	defer t.Stop()
	for {
		if err := h.Renew(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "heartbeat not renewed; new workflow Pods stop getting the guard's finalizer once it expires", "lease", h.Key().String(), "duration", h.opts.Duration)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// NeedLeaderElection: only the leader vouches for the guard.
func (h *Heartbeat) NeedLeaderElection() bool { return true }
