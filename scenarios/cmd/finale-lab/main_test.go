package main

import (
	"os"
	"testing"

	"github.com/finale-dev/finale/scenarios"
)

// TestMain lets this test binary be the reference operator's command when
// bench -scale re-executes it as one (scenarios.OperatorCommand).
func TestMain(m *testing.M) {
	scenarios.ReplicaMain()
	os.Exit(m.Run())
}
