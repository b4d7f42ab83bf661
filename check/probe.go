package check

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/finale-dev/finale/controlplane"
)

// probeTimeout bounds one probe call.
const probeTimeout = 30 * time.Second

// prober samples the probe for one run: it subtracts what was there when
// the run began, keeps every identity it ever saw (the duplicates check)
// and puts appearances and disappearances on the timeline.
type prober struct {
	r *run

	mu   sync.Mutex // guards base, seen, last, failed, deleting and clean
	base map[string]bool
	seen map[string]bool
	last map[string]bool
	// failed: the last listing failed, so last may be stale.
	failed bool
	// deleting is when the run asked for its first deletion; clean when
	// the probe first listed none of the run's resources after it.
	deleting, clean time.Time

	cancel context.CancelFunc
	done   chan struct{}
}

// waitProbe waits for cond, which calls a probe, calling it at the probe's
// interval, as the sampling does: a probe is often a command that calls a
// rate-limited API.
func (r *run) waitProbe(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	return controlplane.WaitEvery(ctx, r.spec.probeEvery(), timeout, what, cond)
}

func newProber(r *run) *prober {
	return &prober{r: r, seen: map[string]bool{}, last: map[string]bool{}}
}

// list calls the probe once.
func (p *prober) list(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	spec := p.r.spec
	if !spec.hasProbe() {
		return nil, nil // no external service (results only)
	}
	if spec.Probe.Func != nil {
		return spec.Probe.Func(ctx, p.r.v)
	}
	argv, err := expandAll("probe.command", spec.Probe.Command, p.r.v)
	if err != nil {
		return nil, err
	}
	env, err := expandEnv("probe.env", spec.Probe.Env, p.r.v)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, spec.program(argv[0]), argv[1:]...)
	cmd.Env, cmd.Dir = env, spec.path(spec.Probe.Dir)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("probe %s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	var ids []string
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			ids = append(ids, l)
		}
	}
	return ids, sc.Err()
}

// baseline records what the service holds before the run, then samples in
// the background until stop.
func (p *prober) baseline(ctx context.Context) error {
	ids, err := p.list(ctx)
	if err != nil {
		return fmt.Errorf("the probe's first listing: %w", err)
	}
	p.mu.Lock()
	p.base = map[string]bool{}
	for _, id := range ids {
		p.base[id] = true
	}
	p.mu.Unlock()
	ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	p.done = make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(p.r.spec.probeEvery())
		defer t.Stop()
		for {
			_, _ = p.current(ctx) // a failed sample is looked at again
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

func (p *prober) stop() {
	if p.cancel != nil {
		p.cancel()
		<-p.done
	}
}

// current lists the run's identities now (those not in the baseline),
// sorted, and records them.
func (p *prober) current(ctx context.Context) ([]string, error) {
	ids, err := p.list(ctx)
	if err != nil {
		p.mu.Lock()
		p.failed = true
		p.mu.Unlock()
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failed = false
	now := map[string]bool{}
	var out []string
	for _, id := range ids {
		if p.base[id] || now[id] {
			continue
		}
		now[id] = true
		out = append(out, id)
		if !p.last[id] {
			p.r.event("external: %s appeared", id)
		}
		p.seen[id] = true
	}
	for id := range p.last {
		if !now[id] {
			p.r.event("external: %s gone", id)
		}
	}
	p.last = now
	if len(out) == 0 && !p.deleting.IsZero() && p.clean.IsZero() {
		p.clean = time.Now()
	}
	slices.Sort(out)
	return out, nil
}

// errProbeFailed: the probe's last listing failed.
var errProbeFailed = errors.New("the probe's last listing failed")

// latest is the run's identities in the last listing, sorted, without
// calling the probe (the sampling calls it at its interval).
func (p *prober) latest() ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed {
		return nil, errProbeFailed
	}
	out := slices.Collect(maps.Keys(p.last))
	slices.Sort(out)
	return out, nil
}

// deletionAsked marks the run's first deletion.
func (p *prober) deletionAsked() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.deleting.IsZero() {
		p.deleting = time.Now()
	}
}

// cleanedIn is how long the external cleanup took: from the first
// deletion to the first listing without the run's resources (0 if it
// never came).
func (p *prober) cleanedIn() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.clean.IsZero() {
		return 0
	}
	return p.clean.Sub(p.deleting)
}

// count is how many of the run's identities the probe lists now.
func (p *prober) count(ctx context.Context) (int, error) {
	ids, err := p.current(ctx)
	return len(ids), err
}

// seenAll is every identity of the run the probe ever listed, sorted.
func (p *prober) seenAll() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.seen))
	for id := range p.seen {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}
