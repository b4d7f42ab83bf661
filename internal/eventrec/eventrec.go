// Package eventrec gets an events.k8s.io/v1 recorder from a
// controller-runtime manager of any version finale supports.
//
// controller-runtime v0.23 and later have Manager.GetEventRecorder; its
// result type is controller-runtime's own interface, which older versions
// do not declare, so the method is found by name (reflect) and its result
// used through client-go's events.EventRecorder, which it embeds. Older
// managers only have the core/v1 recorder; for them a broadcaster is made
// here from the manager's config and run as one of its Runnables.
package eventrec

import (
	"context"
	"fmt"
	"reflect"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// For returns the recorder that reports as name (the Events'
// reportingController).
//
// With a manager older than controller-runtime v0.23 the recorder sends
// once the manager has started, on the elected leader only (its Runnable
// needs leader election): Events emitted before that are dropped, as the
// broadcaster has nobody to send them to yet.
func For(mgr manager.Manager, name string) (events.EventRecorder, error) {
	if m := reflect.ValueOf(mgr).MethodByName("GetEventRecorder"); m.IsValid() {
		t := m.Type()
		if t.NumIn() == 1 && t.In(0).Kind() == reflect.String && t.NumOut() == 1 {
			if r, ok := m.Call([]reflect.Value{reflect.ValueOf(name)})[0].Interface().(events.EventRecorder); ok {
				return r, nil
			}
		}
	}
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("eventrec: events client for %s: %w", name, err)
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
			return fmt.Errorf("eventrec: start %s: %w", name, err)
		}
		<-ctx.Done()
		b.Shutdown()
		return nil
	}))
	if err != nil {
		return nil, fmt.Errorf("eventrec: add the %s broadcaster to the manager: %w", name, err)
	}
	return b.NewRecorder(mgr.GetScheme(), name), nil
}
