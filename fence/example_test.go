package fence_test

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/finale-dev/finale/fence"
)

// staticLock stands in for the Lease lock in this example; in an operator
// it is fence.NewLease's.
type staticLock struct{ id string }

func (s staticLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return &resourcelock.LeaderElectionRecord{HolderIdentity: s.id}, nil, nil
}
func (staticLock) Create(context.Context, resourcelock.LeaderElectionRecord) error { return nil }
func (staticLock) Update(context.Context, resourcelock.LeaderElectionRecord) error { return nil }
func (staticLock) RecordEvent(string)                                              {}
func (s staticLock) Identity() string                                              { return s.id }
func (staticLock) Describe() string                                                { return "operators/my-operator" }

// The fence runs from each renewal's send time for the recorded lease
// duration less the margin. In an operator the Lock goes to
// ctrl.Options.LeaderElectionResourceLockInterface and to
// clientpool.Options.Fence:
//
//	lease, _ := fence.NewLease(cfg, fence.LeaseOptions{Namespace: ns, Name: "my-operator", RenewDeadline: 10 * time.Second})
//	lock, _ := fence.New(lease, fence.Options{LeaseDuration: 15 * time.Second})
func Example() {
	start := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	lock, err := fence.New(staticLock{id: "replica-a"}, fence.Options{LeaseDuration: 15 * time.Second, Clock: clk})
	if err != nil {
		panic(err)
	}
	fmt.Println("before the election:", lock.Until().IsZero())
	// What the elector writes when it acquires or renews.
	_ = lock.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "replica-a", LeaseDurationSeconds: 15})
	fmt.Println("may act for:", lock.Until().Sub(start))
	// A release writes an empty holder: the fence drops before it is sent.
	_ = lock.Update(context.Background(), resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1})
	fmt.Println("after the release:", lock.Until().IsZero())
	// Output:
	// before the election: true
	// may act for: 12s
	// after the release: true
}
