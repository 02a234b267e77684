// Package fsx writes files so that a reader, or a restart after a crash, finds the
// old content or the new one, never a part of either.
package fsx

import (
	"os"
	"path/filepath"
	"strings"
)

// tempMark is in the name of every temporary file WriteFile makes.
const tempMark = ".tmp-"

// WriteFile writes b to path with mode: into a temporary file of the same directory,
// synced, given its mode, then renamed over path, and the directory synced.
func WriteFile(path string, b []byte, mode os.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+tempMark+"*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// IsTemp says whether a file name is one of WriteFile's temporary files (a write a
// crash cut short: safe to remove).
func IsTemp(name string) bool {
	name = filepath.Base(name)
	return strings.HasPrefix(name, ".") && strings.Contains(name, tempMark)
}
