// Package testenv is the test environment for operators built on finale,
// as controller-runtime's envtest is for others: a real local control plane
// (package controlplane: etcd, kube-apiserver and, unlike envtest,
// kube-controller-manager with the namespace and garbage-collector
// controllers, so namespace deletion and owner garbage collection happen
// for real), the CRDs installed, optionally a throwaway PostgreSQL server
// (package pgserver), and a stop in the order that keeps each part's
// dependencies up while it stops.
//
// One environment per test binary, from TestMain:
//
//	var env *testenv.Env
//
//	func TestMain(m *testing.M) {
//		testenv.Main(m, testenv.Options{CRDPaths: []string{"../config/crd/bases"}},
//			func(e *testenv.Env) error { env = e; return nil })
//	}
//
// Set controller-runtime's logger (ctrl.SetLogger) before Main, as with
// envtest, or it warns that none was set. In a test, a manager that runs
// until the test ends:
//
//	mgr, _ := manager.New(env.Config, manager.Options{Scheme: env.Scheme})
//	env.GoFor(t, mgr.Start)
//
// # Stop order
//
// Stop first cancels what Go started (managers) and waits for it to
// return, then runs the OnStop functions, then stops the control plane,
// then PostgreSQL. Stopping the control plane under a running manager, the
// usual hand-written TestMain's mistake, floods the log with connection
// errors and lets controllers act on a half-stopped cluster. GoFor does the
// same for one test at its end.
//
// # What it installs
//
// Nothing by itself beyond the Kubernetes binaries: the first Start on a
// machine builds them from Go modules into a cache (minutes, once; see
// package controlplane, or run its kubeinstall command beforehand).
// PostgreSQL must be installed already (Debian's postgresql package) unless
// Options.Postgres.Install asks pgserver to install it.
package testenv
