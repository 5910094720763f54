//go:build unix

package chaos

import (
	"os/exec"
	"syscall"
)

// inGroup starts cmd in a process group of its own, so that a kill takes
// its worker processes with it.
func inGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// killGroup sends SIGKILL to the process group of a command inGroup
// started.
func killGroup(cmd *exec.Cmd) error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }

// terminate asks the process to stop (SIGTERM), as an operator would.
func terminate(cmd *exec.Cmd) error { return cmd.Process.Signal(syscall.SIGTERM) }
