//go:build !linux

package main

import "os"

// cliIsTerminal reports whether f is a terminal. Outside Linux it is a
// character device other than the null device: /dev/null is a character
// device too, and `svc dev < /dev/null` must not prompt.
func cliIsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
}

// cliEchoOff cannot turn echo off here: the secret shows as typed.
func cliEchoOff(f *os.File) (restore func()) { return func() {} }
