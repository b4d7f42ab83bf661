package scenarios

import (
	"fmt"
	"os"
	"os/exec"
)

// OperatorCommand is the reference operator's own command (package app)
// with args, as a copy of the running executable, which must call
// ReplicaMain first in main: a process of its own, whose memory and CPU
// are its alone (finale-lab bench -scale reads its peak RSS).
func OperatorCommand(args ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("operator command: %w", err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), replicaEnv+"=1")
	return cmd, nil
}
