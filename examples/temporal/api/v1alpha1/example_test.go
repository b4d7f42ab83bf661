package v1alpha1_test

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	tv1 "github.com/finale-dev/finale/examples/temporal/api/v1alpha1"
)

// A Connection to Temporal Cloud with its API key in a Secret, and a
// WorkerDeployment on it.
func ExampleWorkerDeployment() {
	s := runtime.NewScheme()
	if err := tv1.AddToScheme(s); err != nil {
		panic(err)
	}
	conn := &tv1.Connection{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "temporal-cloud"},
		Spec: tv1.ConnectionSpec{
			HostPort:        "shop.a1b2c.tmprl.cloud:7233",
			APIKeySecretRef: tv1.SecretKeySelector{Name: "temporal-api-key"},
		},
	}
	wd := &tv1.WorkerDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
		Spec: tv1.WorkerDeploymentSpec{
			ConnectionRef:     tv1.ConnectionReference{Name: conn.Name},
			TemporalNamespace: "shop.a1b2c",
			DeploymentName:    "shop-orders",
		},
	}
	for _, o := range []runtime.Object{conn, wd} {
		gvks, _, err := s.ObjectKinds(o)
		if err != nil {
			panic(err)
		}
		fmt.Println(gvks[0])
	}
	// Output:
	// temporal.finale.dev/v1alpha1, Kind=Connection
	// temporal.finale.dev/v1alpha1, Kind=WorkerDeployment
}
