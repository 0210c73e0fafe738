package rmqfake

// Counts are message counts for one group, on one topic, lite topic or in
// total.
type Counts struct {
	// Backlog is what the group has yet to receive: stored messages past its
	// position, plus redeliveries waiting (including expired in-flight
	// messages of ordered queues).
	Backlog int64
	// InFlight is what the group received and has not acked, still invisible.
	InFlight int64
	// Acked counts acks that took effect, since the server started.
	Acked int64
	// DeadLettered counts messages sent to the group's DLQ, since the server
	// started.
	DeadLettered int64
}

func (c *Counts) add(o Counts) {
	c.Backlog += o.Backlog
	c.InFlight += o.InFlight
	c.Acked += o.Acked
	c.DeadLettered += o.DeadLettered
}

// TopicStats describes one topic.
type TopicStats struct {
	Type TopicType
	// Sent counts messages stored into the topic since the server started.
	Sent int64
	// Stored is how many messages the topic holds now (its queues, its lite
	// topics, and delayed messages not yet due). Messages every consuming
	// group has taken are freed.
	Stored int64
	// Scheduled is how many delayed messages are not yet due.
	Scheduled int64
	// Counts sums the counts of every group on this topic.
	Counts
	// LiteTopics describes the lite topics of a LITE main topic.
	LiteTopics map[string]LiteTopicStats
}

// LiteTopicStats describes one lite topic.
type LiteTopicStats struct {
	Stored int64
	// Counts sums the counts of every group on this lite topic.
	Counts
}

// GroupStats describes one consumer group.
type GroupStats struct {
	// Counts sums the group's counts over all its topics.
	Counts
	// Topics are the group's counts per topic (for a lite group, its main
	// topic, summed over lite topics).
	Topics map[string]Counts
	// LiteTopics are a lite group's counts per lite topic.
	LiteTopics map[string]Counts
	// LiteEvents is how many lite topics wait in the event sets of a
	// wildcard group's clients (with FastLiteDispatch, in the one set they
	// share): what their pops will try next (see MaxClientEventCount). A
	// lite topic waiting in two clients' sets counts twice.
	LiteEvents int
}

// Stats is a snapshot of the server's state. Names are "namespace%name" for
// resources in a namespace.
type Stats struct {
	Topics map[string]TopicStats
	Groups map[string]GroupStats
	// Sessions is how many client ids have Telemetry settings.
	Sessions int
	// Pollers is how many ReceiveMessage calls are parked in long polling.
	Pollers int
	// Held is how many messages the server references in all: stored,
	// waiting for redelivery, or in flight. Acked messages are released.
	Held int64
	// Timers is how many broker timers are pending (invisibility ends,
	// unblocks, delayed messages, the expiry of clients whose stream ended).
	Timers int
	// StoredBytes is what the stored messages count against MaxStoredBytes.
	StoredBytes int64
	// Streams is how many Telemetry streams are open.
	Streams int
	// LiteSubscriptions counts the lite subscriptions of all clients, one
	// per (client, lite topic), a wildcard subscription as one.
	LiteSubscriptions int
}

// Stats returns a snapshot of topics, groups and counts.
func (s *Server) Stats() Stats {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.nowMS()
	st := Stats{Topics: map[string]TopicStats{}, Groups: map[string]GroupStats{}, Sessions: len(b.sessions), Pollers: b.pollers, Timers: len(b.timers), StoredBytes: b.storedBytes(),
		LiteSubscriptions: b.liteSubscriptions()}
	st.Streams = b.lim.open
	groupStats := func(g *group) GroupStats {
		gs, ok := st.Groups[g.key.String()]
		if !ok {
			gs = GroupStats{Topics: map[string]Counts{}}
		}
		return gs
	}
	for _, g := range b.groups {
		gs := groupStats(g)
		gs.LiteEvents = b.liteEvents(g)
		st.Groups[g.key.String()] = gs
	}
	for _, t := range b.topics {
		ts := TopicStats{Type: t.typ, Sent: t.sent, Scheduled: int64(len(t.scheduled))}
		ts.Stored = ts.Scheduled
		st.Held += ts.Scheduled
		for _, q := range t.queues {
			ts.Stored += int64(len(q.msgs))
		}
		st.Held += ts.Stored - ts.Scheduled
		for g, gt := range t.consumers {
			c := gt.counts(now)
			ts.Counts.add(c)
			gs := groupStats(g)
			gs.Counts.add(c)
			gs.Topics[t.key.String()] = c
			st.Groups[g.key.String()] = gs
			st.Held += int64(len(gt.retry))
			for _, d := range gt.inflight {
				if d.key.retry || d.msg.offset < t.queues[d.key.queue].base {
					st.Held++ // no longer in its queue: the delivery holds it
				}
			}
		}
		if t.lite != nil {
			ts.LiteTopics = map[string]LiteTopicStats{}
			for name, lq := range t.lite {
				ls := LiteTopicStats{Stored: int64(len(lq.q.msgs))}
				ts.Stored += ls.Stored
				st.Held += ls.Stored
				for c := range lq.all() {
					g := c.g
					cc := c.counts(now)
					ls.Counts.add(cc)
					gs := groupStats(g)
					if gs.LiteTopics == nil {
						gs.LiteTopics = map[string]Counts{}
					}
					gs.LiteTopics[name] = cc
					live := Counts{Backlog: cc.Backlog, InFlight: cc.InFlight}
					tc := gs.Topics[t.key.String()]
					tc.add(live)
					gs.Topics[t.key.String()] = tc
					gs.Counts.add(live)
					st.Groups[g.key.String()] = gs
					ts.Counts.add(live)
				}
				ts.LiteTopics[name] = ls
			}
			// Acks and dead letters are counted per group, so that they
			// survive lite topics dropped when idle.
			for _, g := range b.boundGroups(t) {
				done := Counts{Acked: g.liteAcked, DeadLettered: g.liteDLQ}
				gs := groupStats(g)
				tc := gs.Topics[t.key.String()]
				tc.add(done)
				gs.Topics[t.key.String()] = tc
				gs.Counts.add(done)
				st.Groups[g.key.String()] = gs
				ts.Counts.add(done)
			}
		}
		st.Topics[t.key.String()] = ts
	}
	return st
}

func (gt *groupTopic) counts(now int64) Counts {
	c := Counts{Acked: gt.acked, DeadLettered: gt.dlq, Backlog: int64(len(gt.retry))}
	for i, q := range gt.t.queues {
		pos := max(gt.position(i), q.base)
		c.Backlog += q.end() - pos
		if gt.ord != nil {
			n := int64(gt.ord[i].inflight(now))
			c.InFlight += n
			c.Backlog -= n
		}
	}
	if gt.ord == nil {
		c.InFlight = int64(len(gt.inflight))
	}
	return c
}

func (c *liteCursor) counts(now int64) Counts {
	in := int64(c.ord.inflight(now))
	return Counts{
		Backlog:      c.lq.q.end() - max(c.ord.committed, c.lq.q.base) - in,
		InFlight:     in,
		Acked:        c.acked,
		DeadLettered: int64(c.dlq),
	}
}
