package hold_test

import (
	"testing"

	"github.com/finale-dev/finale/internal/testenv"
)

// TestMain shares one control plane among the package's real-stack tests.
func TestMain(m *testing.M) { testenv.Main(m) }
