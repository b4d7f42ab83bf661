package controlplane

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PollInterval is how often the wait helpers look again.
const PollInterval = 50 * time.Millisecond

// WaitFor calls cond every PollInterval until it reports true, returns an
// error, or timeout passes; what says what is being waited for, in the
// error.
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	return WaitEvery(ctx, PollInterval, timeout, what, cond)
}

// WaitEvery is WaitFor calling cond every interval (at most; a slow cond
// spaces the calls further): for a condition that is costly to look at,
// such as a command or a call to an external service. An interval that is
// not positive is PollInterval.
func WaitEvery(ctx context.Context, interval, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	if interval <= 0 {
		interval = PollInterval
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var lastErr error
	for {
		ok, err := cond(ctx)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("waiting for %s: not within %s: %w", what, timeout, lastErr)
			}
			return fmt.Errorf("waiting for %s: not within %s", what, timeout)
		case <-tick.C:
		}
	}
}

// CreateAndWait creates obj and waits until r (often a manager's cached
// client) can read it back.
func CreateAndWait(ctx context.Context, c client.Client, r client.Reader, obj client.Object, timeout time.Duration) error {
	if err := c.Create(ctx, obj); err != nil {
		return fmt.Errorf("create %s %s: %w", kindOf(c, obj), client.ObjectKeyFromObject(obj), err)
	}
	key := client.ObjectKeyFromObject(obj)
	probe := obj.DeepCopyObject().(client.Object)
	return WaitFor(ctx, timeout, fmt.Sprintf("%s %s to be readable", kindOf(c, obj), key), func(ctx context.Context) (bool, error) {
		err := r.Get(ctx, key, probe)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// DeleteAndWait deletes obj (a missing object is fine) and waits until it is
// gone from the apiserver, finalizers and all.
func DeleteAndWait(ctx context.Context, c client.Client, obj client.Object, timeout time.Duration, opts ...client.DeleteOption) error {
	if err := c.Delete(ctx, obj, opts...); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s %s: %w", kindOf(c, obj), client.ObjectKeyFromObject(obj), err)
	}
	return WaitGone(ctx, c, obj, timeout)
}

// WaitGone waits until obj no longer exists.
func WaitGone(ctx context.Context, c client.Reader, obj client.Object, timeout time.Duration) error {
	key := client.ObjectKeyFromObject(obj)
	probe := obj.DeepCopyObject().(client.Object)
	return WaitFor(ctx, timeout, fmt.Sprintf("%T %s to be gone", obj, key), func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, probe)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// InstallCRDs creates the definitions (or leaves existing ones) and waits
// until each is Established.
func InstallCRDs(ctx context.Context, c client.Client, crds ...*apiextensionsv1.CustomResourceDefinition) error {
	for _, crd := range crds {
		if err := c.Create(ctx, crd.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("install CRD %s: %w", crd.Name, err)
		}
	}
	for _, crd := range crds {
		name := crd.Name
		err := WaitFor(ctx, 30*time.Second, "CRD "+name+" to be established", func(ctx context.Context) (bool, error) {
			var got apiextensionsv1.CustomResourceDefinition
			if err := c.Get(ctx, client.ObjectKey{Name: name}, &got); err != nil {
				return false, err
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func kindOf(c client.Client, obj client.Object) string {
	if gvk, err := c.GroupVersionKindFor(obj); err == nil {
		return gvk.Kind
	}
	return fmt.Sprintf("%T", obj)
}
