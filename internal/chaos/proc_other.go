//go:build !unix

package chaos

import (
	"errors"
	"os/exec"
)

func inGroup(*exec.Cmd) {}

func killGroup(*exec.Cmd) error { return errors.ErrUnsupported }

func terminate(*exec.Cmd) error { return errors.ErrUnsupported }
