//go:build linux

package main

import (
	"os"
	"syscall"
	"unsafe"
)

// cliIsTerminal reports whether f is a terminal: whether the terminal
// attributes can be read from it. A character device is not enough:
// /dev/null is one, and `svc dev < /dev/null` must not prompt.
func cliIsTerminal(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var errno syscall.Errno
	var t syscall.Termios
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	}); err != nil {
		return false
	}
	return errno == 0
}

// cliEchoOff turns a terminal's echo off and returns what turns it back
// on; on anything else it does nothing.
func cliEchoOff(f *os.File) (restore func()) {
	rc, err := f.SyscallConn()
	if err != nil {
		return func() {}
	}
	var old syscall.Termios
	var errno syscall.Errno
	rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&old)))
	})
	if errno != 0 {
		return func() {}
	}
	set := func(t syscall.Termios) {
		rc.Control(func(fd uintptr) {
			syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCSETS, uintptr(unsafe.Pointer(&t)))
		})
	}
	quiet := old
	quiet.Lflag &^= syscall.ECHO
	set(quiet)
	return func() { set(old) }
}
