package rmqfake_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/rmqflow/rmqflow/client"
)

// Acked messages are freed: after storing N messages and acking them all,
// the server holds none, keeps no timer, drops idle lite topics, and the heap
// shrinks back by about N KiB.
func TestAckedMessagesAreFreed(t *testing.T) {
	// Not parallel: it measures the heap.
	const n, liteTopics = 4000, 100
	s, _ := start(t)
	p := producer(t, s)
	c := normalConsumer(t, s)
	lc := liteConsumer(t, s)
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	normals := (n/2 + 31) / 32 * 32
	for i := 0; i < normals; i += 32 {
		batch := make([]*client.Message, 32)
		for j := range batch {
			batch[j] = &client.Message{Topic: normalTopic, Body: make([]byte, 1024)}
		}
		send(t, p, batch...)
	}
	for i := 0; i < n/2; i++ {
		send(t, p, &client.Message{Topic: liteTopic, LiteTopic: fmt.Sprintf("conv-%03d", i%liteTopics), Body: make([]byte, 1024)})
	}
	st := s.Stats()
	stored := st.Topics[normalTopic].Stored + st.Topics[liteTopic].Stored
	if stored < n || st.Held < n {
		t.Fatalf("stored %d, held %d, want at least %d", stored, st.Held, n)
	}
	full := heap()
	if full < before+n*1024 {
		t.Fatalf("heap grew by %d bytes for %d KiB of messages", full-before, n)
	}

	drain := func(cl *client.Client, req client.ReceiveRequest, group, topic string, want int) {
		got := 0
		for got < want {
			msgs := receiveNow(t, cl, req)
			got += len(msgs)
			ackAll(t, cl, group, topic, msgs)
		}
	}
	drain(c, normalReq(time.Minute), normalGroup, normalTopic, normals)
	drain(lc, liteReq(time.Minute), liteGroup, liteTopic, n/2)

	st = s.Stats()
	if st.Held != 0 || st.Timers != 0 {
		t.Errorf("after acking everything: held %d messages, %d timers; want 0 and 0", st.Held, st.Timers)
	}
	for _, name := range []string{normalTopic, liteTopic} {
		if ts := st.Topics[name]; ts.Stored != 0 || ts.InFlight != 0 || ts.Backlog != 0 {
			t.Errorf("%s after acking everything: stored %d, %+v", name, ts.Stored, ts.Counts)
		}
	}
	if lt := st.Topics[liteTopic].LiteTopics; len(lt) != 0 {
		t.Errorf("%d idle lite topics still held", len(lt))
	}
	if g := st.Groups[normalGroup]; g.Acked != int64(normals) {
		t.Errorf("normal group acked %d", g.Acked)
	}
	if g := st.Groups[liteGroup]; g.Acked != n/2 {
		t.Errorf("lite group acked %d, want %d", g.Acked, n/2)
	}
	after := heap()
	t.Logf("heap: %d KiB before, %d KiB with %d messages, %d KiB after acking", before>>10, full>>10, n, after>>10)
	if after > full-n*1024/2 {
		t.Errorf("heap after acking %d KiB, with messages %d KiB: less than half of the %d KiB freed", after>>10, full>>10, n)
	}
}
