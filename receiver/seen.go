package receiver

import (
	"sync"
	"time"
)

// Seen remembers recently handled events by source and id, so a redelivery
// is acknowledged without acting twice. It is per process and bounded; the
// actions themselves are idempotent for what it forgets.
type Seen struct {
	mu    sync.Mutex
	ttl   time.Duration
	max   int
	items map[string]time.Time
	now   func() time.Time
}

// NewSeen remembers up to max events for ttl each. The map grows with the
// events: sized for max up front, it held 6 MB of a receiver's heap from its
// start, most of it never used.
func NewSeen(max int, ttl time.Duration) *Seen {
	return &Seen{ttl: ttl, max: max, items: map[string]time.Time{}, now: time.Now}
}

// Has reports whether key was handled within the ttl.
func (s *Seen) Has(key string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.items[key]
	return ok && s.now().Sub(t) < s.ttl
}

// Add records key; when full it drops expired entries, then the oldest.
func (s *Seen) Add(key string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.items) >= s.max {
		oldestKey, oldest := "", now
		for k, t := range s.items {
			if now.Sub(t) >= s.ttl {
				delete(s.items, k)
				continue
			}
			if t.Before(oldest) {
				oldestKey, oldest = k, t
			}
		}
		if len(s.items) >= s.max {
			delete(s.items, oldestKey)
		}
	}
	s.items[key] = now
}
