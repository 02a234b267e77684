package obs

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// gateWriter records each Write; while gated, a Write blocks until the gate opens.
type gateWriter struct {
	mu      sync.Mutex
	writes  []string
	gate    chan struct{} // nil: open
	entered chan struct{} // a Write started
	err     error
}

func (g *gateWriter) Write(p []byte) (int, error) {
	if g.entered != nil {
		select {
		case g.entered <- struct{}{}:
		default:
		}
	}
	if g.gate != nil {
		<-g.gate
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.writes = append(g.writes, string(p))
	return len(p), g.err
}

func (g *gateWriter) all() (string, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.Join(g.writes, ""), len(g.writes)
}

func TestBatchWriterKeepsOrderAndBatches(t *testing.T) {
	g := &gateWriter{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	b := NewBatchWriter(g, 0, 0, 0)
	mustWrite(t, b, "line 0\n")
	<-g.entered // the flusher is inside the first write, held at the gate
	var want strings.Builder
	want.WriteString("line 0\n")
	for i := 1; i <= 100; i++ {
		line := fmt.Sprintf("line %d\n", i)
		mustWrite(t, b, line)
		want.WriteString(line)
	}
	close(g.gate)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	got, n := g.all()
	if got != want.String() {
		t.Fatalf("lines out of order or lost:\n%s", got)
	}
	// The 100 lines that came while the first write was held went out together.
	if n != 2 {
		t.Fatalf("want 2 writes (the first line, then the other 100 together), got %d", n)
	}
}

func TestBatchWriterLingers(t *testing.T) {
	g := &gateWriter{entered: make(chan struct{}, 1)}
	b := NewBatchWriter(g, time.Hour, 20, 0)
	mustWrite(t, b, "one\n")
	mustWrite(t, b, "two\n")
	select {
	case <-g.entered:
		t.Fatal("lines under flushAt were written before the linger ended")
	case <-time.After(50 * time.Millisecond): // the absence of an event: bounded wait
	}
	mustWrite(t, b, "three, past flushAt\n")
	awaitWrite(t, g, "flushAt bytes waiting were not written")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got, n := g.all(); got != "one\ntwo\nthree, past flushAt\n" || n != 1 {
		t.Fatalf("want the three lines in one write, got %d writes: %q", n, got)
	}
	// With a short linger a lone line goes out by itself.
	g = &gateWriter{entered: make(chan struct{}, 1)}
	b = NewBatchWriter(g, time.Millisecond, 0, 0)
	mustWrite(t, b, "alone\n")
	awaitWrite(t, g, "a lone line was not written after the linger")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestBatchWriterConcurrentWritersLoseNothing(t *testing.T) {
	var out bytes.Buffer
	var mu sync.Mutex
	b := NewBatchWriter(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return out.Write(p)
	}), 0, 64, 256) // small: writers also wait for room
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				if _, err := fmt.Fprintf(b, "w%d %d\n", w, i); err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Every line whole, and each writer's lines in its own order.
	next := map[string]int{}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 8*500 {
		t.Fatalf("want %d lines, got %d", 8*500, len(lines))
	}
	for _, l := range lines {
		var w string
		var i int
		if _, err := fmt.Sscanf(l, "%s %d", &w, &i); err != nil {
			t.Fatalf("torn line %q", l)
		}
		if i != next[w] {
			t.Fatalf("writer %s: line %d came where %d was due", w, i, next[w])
		}
		next[w]++
	}
}

func TestBatchWriterBackPressure(t *testing.T) {
	g := &gateWriter{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	b := NewBatchWriter(g, 0, 10, 10)
	mustWrite(t, b, "first\n")
	<-g.entered                     // held in the underlying write
	mustWrite(t, b, "0123456789\n") // fills the buffer to its max
	blocked := make(chan struct{})
	go func() {
		defer close(blocked)
		mustWrite(t, b, "more\n")
	}()
	select {
	case <-blocked:
		t.Fatal("a write past max returned while the underlying writer was stuck")
	case <-time.After(50 * time.Millisecond): // the absence of an event: bounded wait
	}
	close(g.gate)
	select {
	case <-blocked:
	case <-time.After(time.Minute):
		t.Fatal("the waiting write did not go on once the writer caught up")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := g.all(); got != "first\n0123456789\nmore\n" {
		t.Fatalf("got %q", got)
	}
}

func TestBatchWriterAfterCloseAndErrors(t *testing.T) {
	g := &gateWriter{err: errors.New("disk full")}
	b := NewBatchWriter(g, time.Hour, 0, 0) // Close writes what lingers
	mustWrite(t, b, "a\n")
	if err := b.Close(); err == nil || err.Error() != "disk full" {
		t.Fatalf("Close should report the underlying writer's error, got %v", err)
	}
	if err := b.Close(); err != nil { // a second Close is harmless
		t.Fatal(err)
	}
	// A line after Close is written straight through.
	if _, err := b.Write([]byte("b\n")); err == nil {
		t.Fatal("a direct write should return the writer's error")
	}
	if got, _ := g.all(); got != "a\nb\n" {
		t.Fatalf("got %q", got)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// awaitWrite waits for the next write to g to start.
func awaitWrite(t *testing.T, g *gateWriter, failure string) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(time.Minute):
		t.Fatal(failure)
	}
}

func mustWrite(t *testing.T, b *BatchWriter, s string) {
	t.Helper()
	if _, err := b.Write([]byte(s)); err != nil {
		t.Error(err)
	}
}
