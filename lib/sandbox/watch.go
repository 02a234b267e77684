package sandbox

import (
	"os"
	"sync"
	"syscall"
)

// watchFiles calls changed whenever one of the files is modified (inotify: cgroup
// event files notify on change), until the returned stop is called. The inotify
// descriptor is non-blocking and read through the runtime's poller, so that closing
// it ends the read.
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
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			if k, err := f.Read(buf); err != nil || k <= 0 {
				return
			}
			changed()
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = f.Close()
			<-done
		})
	}
}
