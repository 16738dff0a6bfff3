package redis

// Warm says whether the store knows its shards: a Redis Cluster's once its
// slot map was first loaded (until then one breaker guards every slot, and
// the first round trips wait for go-redis to learn the cluster and dial
// its nodes); a standalone server's from the start.
func (s *Store) Warm() bool {
	return !s.opts.Cluster || s.shards.loaded.Load()
}
