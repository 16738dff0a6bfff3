package memory

// What the store holds, and the sweeper that removes what expired.

import "time"

// MaxBytes is the store's bound on Bytes (Options.MaxBytes).
func (s *Store) MaxBytes() int64 { return s.perBytes * shardCount }

// Bytes is the estimated memory of the stored counters and penalty
// states (see Options.MaxBytes), expired ones included until swept.
func (s *Store) Bytes() int64 {
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.bytes
		sh.mu.Unlock()
	}
	return n
}

// Evicted is the number of live keys evicted because the store was full.
func (s *Store) Evicted() uint64 { return s.evicted.Load() }

// Len is the number of stored keys, expired ones included until swept.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.entries)
		sh.mu.Unlock()
	}
	return n
}

// Sweep removes expired keys, idempotency records and penalties now.
func (s *Store) Sweep() {
	n := s.clock().UnixMicro()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.entries {
			if e.expiresAt <= n {
				sh.deleteEntry(k, e)
			}
		}
		for counter, recs := range sh.records {
			for k, r := range recs {
				if r.expiresAt <= n {
					delete(recs, k)
					sh.nrecords--
				}
			}
			if len(recs) == 0 {
				delete(sh.records, counter)
			}
		}
		for k, h := range sh.holds {
			if h.expiresAt <= n {
				delete(sh.holds, k)
			}
		}
		for k, p := range sh.penalties {
			if p.expiresAt <= n {
				sh.deletePenalty(k)
			}
		}
		sh.mu.Unlock()
	}
}

func (s *Store) sweepLoop(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Close stops the sweeper. The store keeps answering.
func (s *Store) Close() error {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	return nil
}
