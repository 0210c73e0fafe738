package rmqflow

// groupMaxAttempts is the delivery attempt at which the broker gives up on a
// message of group that is not acked (it goes to the group's dead-letter
// queue next): the max attempts of the retry policy the broker sent in the
// session settings (the group's retry max + 1). Zero when not known (the
// source is not started, or the broker sent no policy).
func (s *Source[T]) groupMaxAttempts(group string) int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.binds {
		if b.group != group || b.sess == nil {
			continue
		}
		if st := b.sess.Settings(); st != nil {
			return st.GetBackoffPolicy().GetMaxAttempts()
		}
	}
	return 0
}
