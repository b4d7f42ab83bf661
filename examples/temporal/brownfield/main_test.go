package brownfield_test

import (
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/finale-dev/finale/internal/testenv"
)

func TestMain(m *testing.M) {
	// The faults make the controllers log errors on purpose; each run
	// counts the ones it needs through its manager's own logger.
	ctrllog.SetLogger(logr.Discard())
	testenv.Main(m)
}
