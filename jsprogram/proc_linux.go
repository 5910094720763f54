package jsprogram

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// setProcAttr kills a worker when the host dies, so none outlives it
// spinning in a program.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// longNice is the nice value of a worker in the long lane: the kernel gives
// short programs the CPU first.
const longNice = 10

// lowerPriority renices every thread of a process (Linux nice values are
// per thread; threads made later inherit the value of the one that makes
// them). An unprivileged process cannot raise it back, so such a worker is
// not reused.
func lowerPriority(pid int) {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return
	}
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			_ = syscall.Setpriority(syscall.PRIO_PROCESS, tid, longNice)
		}
	}
}
