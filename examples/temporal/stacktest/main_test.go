package stacktest

import (
	"testing"

	"github.com/finale-dev/finale/internal/testenv"
)

// TestMain shares one control plane and server among the package's tests.
func TestMain(m *testing.M) { testenv.Main(m) }
