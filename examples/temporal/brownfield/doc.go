// Package brownfield is finale adopted by an existing operator: a
// WorkerDeployment controller written the usual way (brownfield/naive:
// its own Reconcile, its own cache of SDK clients passed down through
// several functions, no lifecycle package), and the same controller after
// the smallest change that puts its clients in a clientpool.Pool and takes
// them through a lease (brownfield/adopted). adoption.diff is that change.
//
// Its tests run both builds on the real stack at production settings: the
// Temporal SDK's default 10 s call timeout, the controller's 10 s requeue,
// and the G1 seed's fault (faultinject.Proxy.Stall: the established HTTP/2
// connection answers the SDK's keepalive PINGs and nothing else). The
// adopted build finishes a deletion within one call timeout and one
// requeue; the naive one is still stuck 150 s after the fault, past the
// SDK's keepalive (30 s + 15 s), with no redial. Beside them, the example
// operator of examples/temporal/controller runs at the same settings, for
// the production figures of examples/temporal/README.md.
//
//	go test -v -run TestProductionSettings ./brownfield/
//	go test -run TestAdoptionDiff ./brownfield/ [-update]
package brownfield
