package model_test

import (
	"context"
	"fmt"
	"os"

	"github.com/finale-dev/finale/internal/model"
)

// Capture released on a timer, as upstream Argo does: every state of a
// workflow with one Pod explored, and the shortest run that loses the
// Pod's result printed.
func Example() {
	rules := model.Target()
	rules.CaptureRule = false
	sys, err := model.NewG3(model.G3Config{Owners: 1, Children: 1, Rules: rules})
	if err != nil {
		panic(err)
	}
	res, err := model.Explore[model.G3](context.Background(), sys, model.Options{StopAtFirst: true})
	if err != nil {
		panic(err)
	}
	fmt.Println("found:", res.Safety != nil)
	res.Safety.Format(os.Stdout)
	// Output:
	// found: true
	//     1  start
	//         ns:live | W0:active C0:alive+fin(running)
	//     2  user           deletes C0
	//         ns:live | W0:active C0:deleting+fin(running)
	//     3  kubelet        C0 finishes
	//         ns:live | W0:active C0:deleting+fin(finished)
	//     4  clock          C0's 2-minute timer fires
	//         ns:live | W0:active C0:deleting+fin(finished)
	//     5  C0 release     timer fired: removes the capture finalizer (upstream Argo)
	//         ns:live | W0:active C0:gone(finished)
	//   broken: no-lost-result: C0 went while its owner W0 was active and had not recorded its result
}
