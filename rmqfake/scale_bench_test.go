package rmqfake

// Memory per stored message and per lite topic, measured on the broker's
// own request handlers (send, target+pop, ack: what SendMessage,
// ReceiveMessage and AckMessage run once gRPC has decoded a request), so that
// only what rmqfake keeps is counted. Each message is built as the project's
// client builds it (client.sendBatch) with strings and body freshly
// allocated, as protobuf decoding allocates them.
//
// Definitions (heap = runtime.MemStats.HeapInuse after runtime.GC):
//   - B/msg: (heap with N stored messages - heap before) / N - body size;
//     lite messages spread over 100 lite topics, normal ones sent 32 per
//     SendMessage. Nothing is received: the messages are backlog.
//   - B/lite-topic(backlog): N lite topics holding one message each:
//     (heap - heap before) / N - body size - B/msg of lite messages measured
//     just before in the same process: what a lite topic with a small
//     backlog costs beyond its messages.
//   - B/lite-topic(idle): after every message of those N lite topics was
//     received and acked: (heap - heap before) / N, what a lite topic that
//     has nothing left costs.

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/rmqflow/rmqflow/client"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const (
	scaleLite        = "scale-lite"
	scaleLiteGroup   = "scale-lite-g"
	scaleNormal      = "scale-normal"
	scaleNormalGroup = "scale-normal-g"
	scaleClient      = "scale-client"
	scaleBody        = 256
)

type scaleRig struct {
	tb testing.TB
	s  *Server
	b  *broker
}

func newScaleRig(tb testing.TB) *scaleRig {
	tb.Helper()
	s, err := New(FastLiteDispatch())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	for _, err := range []error{
		s.CreateTopic(scaleLite, TopicLite),
		s.CreateGroup(scaleLiteGroup, LiteBind(scaleLite), Wildcard()),
		s.CreateTopic(scaleNormal, TopicNormal),
		s.CreateGroup(scaleNormalGroup),
	} {
		if err != nil {
			tb.Fatal(err)
		}
	}
	r := &scaleRig{tb: tb, s: s, b: s.b}
	// A lite consumer subscribed to every lite topic (COMPLETE_ADD), and a
	// normal group consuming the normal topic, as their sessions make them.
	if f := r.b.syncLite(callMeta{clientID: scaleClient}, &v2.SyncLiteSubscriptionRequest{
		Action: v2.LiteSubscriptionAction_COMPLETE_ADD,
		Topic:  &v2.Resource{Name: scaleLite}, Group: &v2.Resource{Name: scaleLiteGroup},
	}); f != nil {
		tb.Fatal(f)
	}
	r.b.mu.Lock()
	r.b.consumer(r.b.groups[resKey{name: scaleNormalGroup}], r.b.topics[resKey{name: scaleNormal}])
	r.b.mu.Unlock()
	return r
}

// message builds one message as client.sendBatch does, every string and the
// body allocated anew.
func scaleMessage(topic, lite string) *v2.Message {
	sp := &v2.SystemProperties{
		MessageId:     client.NewMessageID(),
		BornTimestamp: timestamppb.Now(),
		BornHost:      strings.Clone("bench-host-1"),
		BodyEncoding:  v2.Encoding_IDENTITY,
		MessageType:   v2.MessageType_NORMAL,
	}
	if lite != "" {
		sp.MessageType = v2.MessageType_LITE
		sp.LiteTopic = &lite
	}
	return &v2.Message{Topic: &v2.Resource{Name: strings.Clone(topic)}, SystemProperties: sp, Body: make([]byte, scaleBody)}
}

func (r *scaleRig) send(msgs ...*v2.Message) {
	resp := r.b.send(&v2.SendMessageRequest{Messages: msgs}, "", "127.0.0.1:50000")
	if c := resp.GetStatus().GetCode(); c != v2.Code_OK {
		r.tb.Fatalf("send: %v", resp.GetStatus())
	}
}

// storeLite stores n lite messages round-robin over topics lite topics
// named prefix<i>.
func (r *scaleRig) storeLite(n, topics int, prefix string) {
	for i := 0; i < n; i++ {
		r.send(scaleMessage(scaleLite, fmt.Sprintf("%s%d", prefix, i%topics)))
	}
}

// storeNormal stores n normal messages, 32 per request.
func (r *scaleRig) storeNormal(n int) {
	for i := 0; i < n; i += 32 {
		batch := make([]*v2.Message, min(32, n-i))
		for j := range batch {
			batch[j] = scaleMessage(scaleNormal, "")
		}
		r.send(batch...)
	}
}

// drainLite receives and acks lite messages, 32 per pop and per ack, until
// none is left; it returns how many it acked.
func (r *scaleRig) drainLite() int {
	b := r.b
	req := &popRequest{clientID: scaleClient, lite: true, group: resKey{name: scaleLiteGroup},
		topic: resKey{name: scaleLite}, batch: maxBatch, invisible: 60_000}
	n := 0
	for {
		b.mu.Lock()
		t, g, f := b.target(req)
		if f != nil {
			b.mu.Unlock()
			r.tb.Fatal(f)
		}
		out := b.pop(req, t, g)
		b.mu.Unlock()
		if len(out) == 0 {
			return n
		}
		ack := &v2.AckMessageRequest{Group: &v2.Resource{Name: scaleLiteGroup}, Topic: &v2.Resource{Name: scaleLite}}
		for _, d := range out {
			lite := d.m.lite
			ack.Entries = append(ack.Entries, &v2.AckMessageEntry{MessageId: d.m.id, ReceiptHandle: d.handle.String(), LiteTopic: &lite})
		}
		resp := b.ack(ack, "")
		if c := resp.GetStatus().GetCode(); c != v2.Code_OK {
			r.tb.Fatalf("ack: %v", resp.GetStatus())
		}
		n += len(out)
	}
}

func heapInuse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// scaleCosts are the three memory figures defined at the top of the file.
type scaleCosts struct {
	normalMsg, liteMsg, liteTopic, idleTopic float64
}

func measureScale(tb testing.TB, msgs, topics int) scaleCosts {
	var c scaleCosts
	{
		r := newScaleRig(tb)
		base := heapInuse()
		r.storeNormal(msgs)
		c.normalMsg = float64(heapInuse()-base)/float64(msgs) - scaleBody
		runtime.KeepAlive(r)
	}
	{
		r := newScaleRig(tb)
		base := heapInuse()
		r.storeLite(msgs, 100, "few-")
		c.liteMsg = float64(heapInuse()-base)/float64(msgs) - scaleBody
		runtime.KeepAlive(r)
	}
	r := newScaleRig(tb)
	base := heapInuse()
	r.storeLite(topics, topics, "lt-")
	c.liteTopic = float64(heapInuse()-base)/float64(topics) - scaleBody - c.liteMsg
	if got := r.drainLite(); got != topics {
		tb.Fatalf("drained %d lite messages, want %d", got, topics)
	}
	c.idleTopic = float64(heapInuse()-base) / float64(topics)
	runtime.KeepAlive(r)
	return c
}

// The memory bounds of issue 9: at most 1 KB per stored message beyond its
// body, at most 300 B per lite topic beyond its messages, with a small
// backlog or idle (see the definitions at the top of the file).
func TestScaleMemoryBounds(t *testing.T) {
	// Not parallel: it measures the heap.
	c := measureScale(t, 50_000, 100_000)
	t.Logf("B/msg normal %.0f, lite %.0f; B/lite-topic backlog %.0f, idle %.0f", c.normalMsg, c.liteMsg, c.liteTopic, c.idleTopic)
	if c.normalMsg > 1024 || c.liteMsg > 1024 {
		t.Errorf("a stored message costs %.0f B (normal) and %.0f B (lite) beyond its body, want <= 1024", c.normalMsg, c.liteMsg)
	}
	if c.liteTopic > 300 || c.idleTopic > 300 {
		t.Errorf("a lite topic costs %.0f B with one message (beyond it) and %.0f B idle, want <= 300", c.liteTopic, c.idleTopic)
	}
}

// BenchmarkScaleMemory reports the memory figures at a larger scale:
//
//	go test -run '^$' -bench BenchmarkScaleMemory -benchtime 1x ./rmqfake
func BenchmarkScaleMemory(b *testing.B) {
	for _, sz := range []struct{ msgs, topics int }{{200_000, 1_000_000}} {
		b.Run(fmt.Sprintf("msgs=%d/lite=%d", sz.msgs, sz.topics), func(b *testing.B) {
			var c scaleCosts
			for range b.N {
				c = measureScale(b, sz.msgs, sz.topics)
			}
			b.ReportMetric(c.normalMsg, "B/msg-normal")
			b.ReportMetric(c.liteMsg, "B/msg-lite")
			b.ReportMetric(c.liteTopic, "B/lite-topic")
			b.ReportMetric(c.idleTopic, "B/idle-lite-topic")
			b.ReportMetric(0, "ns/op")
		})
	}
}
