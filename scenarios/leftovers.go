package scenarios

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
)

// leftovers says what is still in ns and why: each object with its
// finalizers and, for the operator's kinds, the reason of its Synced
// condition, so that a deletion that did not finish names what held it.
func (w *world) leftovers(ctx context.Context, ns string) string {
	var parts []string
	var cached client.Client
	if w.apiB != nil {
		cached, _ = client.New(w.cacheFront.To().Config, client.Options{Scheme: w.scheme})
	}
	w.mu.Lock()
	run := w.run
	w.mu.Unlock()
	add := func(kind string, o client.Object, conds []metav1.Condition) {
		s := fmt.Sprintf("%s %s finalizers %q", kind, o.GetName(), o.GetFinalizers())
		if run != nil {
			c := o.DeepCopyObject().(client.Object)
			err := run.Cache.Get(ctx, client.ObjectKeyFromObject(o), c)
			switch {
			case err != nil:
				s += fmt.Sprintf(" (the operator's cache: %v)", err)
			case c.GetResourceVersion() != o.GetResourceVersion():
				s += fmt.Sprintf(" (the operator's cache has version %s, the object is at %s)", c.GetResourceVersion(), o.GetResourceVersion())
			}
		}
		if cached != nil {
			// What the operator's cache's apiserver serves from its own
			// cache, against the object as it is.
			c := o.DeepCopyObject().(client.Object)
			err := cached.Get(ctx, client.ObjectKeyFromObject(o), c, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}})
			switch {
			case err != nil:
				s += fmt.Sprintf(" (the cache's apiserver: %v)", err)
			case c.GetResourceVersion() != o.GetResourceVersion():
				s += fmt.Sprintf(" (the cache's apiserver serves version %s, the object is at %s)", c.GetResourceVersion(), o.GetResourceVersion())
			}
		}
		for _, c := range conds {
			switch {
			case c.Type == v1alpha1.ConditionSynced && c.Status != metav1.ConditionTrue:
				s += fmt.Sprintf(" %s=%s/%s (%s)", c.Type, c.Status, c.Reason, c.Message)
			case c.Type == v1alpha1.ConditionSynced || c.Type == v1alpha1.ConditionReady:
				s += fmt.Sprintf(" %s=%s/%s", c.Type, c.Status, c.Reason)
			}
		}
		parts = append(parts, s)
	}
	var roles v1alpha1.RoleList
	if w.c.List(ctx, &roles, client.InNamespace(ns)) == nil {
		for i := range roles.Items {
			add("Role", &roles.Items[i], roles.Items[i].Status.Conditions)
		}
	}
	var dbs v1alpha1.DatabaseList
	if w.c.List(ctx, &dbs, client.InNamespace(ns)) == nil {
		for i := range dbs.Items {
			add("Database", &dbs.Items[i], dbs.Items[i].Status.Conditions)
		}
	}
	var srvs v1alpha1.ServerList
	if w.c.List(ctx, &srvs, client.InNamespace(ns)) == nil {
		for i := range srvs.Items {
			add("Server", &srvs.Items[i], srvs.Items[i].Status.Conditions)
		}
	}
	var secrets corev1.SecretList
	if w.c.List(ctx, &secrets, client.InNamespace(ns)) == nil {
		for i := range secrets.Items {
			add("Secret", &secrets.Items[i], nil)
		}
	}
	var nsObj corev1.Namespace
	if w.c.Get(ctx, client.ObjectKey{Name: ns}, &nsObj) == nil {
		for _, c := range nsObj.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				parts = append(parts, fmt.Sprintf("namespace %s: %s", c.Type, c.Message))
			}
		}
	}
	if len(parts) == 0 {
		return "nothing left in the namespace"
	}
	return strings.Join(parts, "; ")
}
