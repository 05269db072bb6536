package pluginhost

import (
	"sync"
	"time"
)

// cacheSize bounds each cache: past it, an arbitrary entry makes room.
const cacheSize = 8192

// ttlCache remembers values for a while, forgets them all when the auth
// revision it was filled at changes, and never holds more than cacheSize.
type ttlCache[K comparable, V any] struct {
	mu  sync.Mutex
	rev uint64
	m   map[K]ttlEntry[V]
}

type ttlEntry[V any] struct {
	v       V
	expires time.Time
}

func newTTLCache[K comparable, V any]() *ttlCache[K, V] {
	return &ttlCache[K, V]{m: make(map[K]ttlEntry[V])}
}

func (c *ttlCache[K, V]) get(key K, rev uint64, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var zero V
	if rev != c.rev {
		clear(c.m)
		c.rev = rev
		return zero, false
	}
	e, ok := c.m[key]
	if !ok {
		return zero, false
	}
	if !now.Before(e.expires) {
		delete(c.m, key)
		return zero, false
	}
	return e.v, true
}

func (c *ttlCache[K, V]) put(key K, v V, rev uint64, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev != c.rev {
		clear(c.m)
		c.rev = rev
	}
	if _, ok := c.m[key]; !ok && len(c.m) >= cacheSize {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[key] = ttlEntry[V]{v: v, expires: expires}
}

func (c *ttlCache[K, V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
