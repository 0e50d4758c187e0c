//go:build unix

package svcconfig

import "syscall"

func restrictFileModes() { syscall.Umask(RestrictedUmask) }
