package receiver

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// A new Seen costs what it holds, not what it may hold: the receiver's is
// bounded at 100,000 events, and its heap should not carry them empty.
func TestSeenGrowsWithItsEvents(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := NewSeen(100_000, 15*time.Minute)
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<10 {
		t.Errorf("an empty Seen of 100,000 allocated %d KiB", grew>>10)
	}
	for i := range 3 {
		s.Add(fmt.Sprint("event-", i))
	}
	if !s.Has("event-2") || s.Has("event-3") {
		t.Error("Seen lost an event or invented one")
	}
	runtime.KeepAlive(s)
}
