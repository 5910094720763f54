//go:build !linux

package jsprogram

import "os/exec"

func setProcAttr(*exec.Cmd) {}
