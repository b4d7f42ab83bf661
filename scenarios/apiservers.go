package scenarios

import (
	"context"
	"errors"
	"fmt"
)

// addAPIServer gives the world a kube-apiserver of its own on the control
// plane's etcd (so that its lag never reaches another world's operator)
// and two fronts: the operator's cache lists and watches through one,
// which starts on the new apiserver, and its writes and live reads go
// through the other, which starts on the control plane's first.
func (w *world) addAPIServer(ctx context.Context) error {
	b, err := w.env.ControlPlane.AddAPIServer(ctx)
	if err != nil {
		return fmt.Errorf("a second kube-apiserver for the campaign: %w", err)
	}
	w.apiB = b
	first := w.env.ControlPlane.APIServers()[0]
	if w.cacheFront, err = w.env.ControlPlane.NewFront(b); err != nil {
		return err
	}
	if w.writeFront, err = w.env.ControlPlane.NewFront(first); err != nil {
		return err
	}
	return nil
}

// routeDefault puts the cache back on the world's apiserver and the
// writes on the first, for the next run.
func (w *world) routeDefault() error {
	if w.apiB == nil {
		return nil
	}
	if w.cacheFront.To() != w.apiB {
		if _, err := w.cacheFront.Route(w.apiB); err != nil {
			return err
		}
	}
	if first := w.env.ControlPlane.APIServers()[0]; w.writeFront.To().Addr() != first.Addr() {
		if _, err := w.writeFront.Route(first); err != nil {
			return err
		}
	}
	return nil
}

// failover swaps the fronts' apiservers, resetting what is established:
// the operator's cache lists and watches again from the other apiserver
// (from a lagging one to a fresh one, or back to one behind what it has
// seen), and its writes land on the other.
func (w *world) failover() error {
	if w.apiB == nil {
		return nil
	}
	c, wr := w.cacheFront.To(), w.writeFront.To()
	_, err1 := w.cacheFront.Route(wr)
	_, err2 := w.writeFront.Route(c)
	return errors.Join(err1, err2)
}

// closeAPIServer closes the fronts and stops the world's apiserver.
func (w *world) closeAPIServer() {
	if w.cacheFront != nil {
		_ = w.cacheFront.Close()
	}
	if w.writeFront != nil {
		_ = w.writeFront.Close()
	}
	if w.apiB != nil {
		_ = w.apiB.Kill() // the control plane's Stop would too; a finished campaign frees it now
	}
}
