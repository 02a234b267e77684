package sandbox

import (
	"os"
	"sync"
	"syscall"
)

// watchFiles calls changed whenever one of the files is modified (inotify: cgroup
// event files notify on change), until the returned stop is called: once stop has
// returned, changed is not running and is not called again. The inotify descriptor
// is non-blocking and read through the runtime's poller, so that closing it ends the
// read. stop does not wait for that close: closing an inotify descriptor waits for
// the kernel's fsnotify grace period (SRCU), 4–14 ms on a 2-vCPU guest, which was on
// every job's way from its end to its finish (its run's WaitKept).
func watchFiles(files []string, changed func()) func() {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return func() {}
	}
	n := 0
	for _, f := range files {
		if _, err := syscall.InotifyAddWatch(fd, f, syscall.IN_MODIFY); err == nil {
			n++
		}
	}
	if n == 0 {
		_ = syscall.Close(fd)
		return func() {}
	}
	f := os.NewFile(uintptr(fd), "inotify")
	var mu sync.Mutex // held while changed runs; stopped under it
	stopped := false
	go func() {
		buf := make([]byte, 4096)
		for {
			if k, err := f.Read(buf); err != nil || k <= 0 {
				return
			}
			mu.Lock()
			if !stopped {
				changed()
			}
			mu.Unlock()
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			stopped = true
			mu.Unlock()
			go func() { _ = f.Close() }() // ends the read above
		})
	}
}
