package gate

import (
	"testing"
	"time"
)

func TestCloseWaitsForHolders(t *testing.T) {
	var g Gate
	if !g.Enter() {
		t.Fatal("Enter on open gate failed")
	}
	closed := make(chan bool)
	go func() { closed <- g.Close() }()
	// Close must not finish while a holder is in: it can only finish after Exit.
	select {
	case <-closed:
		t.Fatal("Close returned while a holder was in")
	case <-time.After(20 * time.Millisecond):
	}
	g.Exit()
	if !<-closed {
		t.Fatal("first Close reported already closed")
	}
	if g.Enter() {
		t.Fatal("Enter succeeded after Close")
	}
	if g.Close() {
		t.Fatal("second Close reported first close")
	}
}
