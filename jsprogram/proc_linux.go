package jsprogram

import (
	"os/exec"
	"syscall"
)

// setProcAttr kills a worker when the host dies, so none outlives it
// spinning in a program.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
