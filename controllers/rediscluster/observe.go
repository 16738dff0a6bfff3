package rediscluster

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
)

// view is one member as it answered this pass.
type view struct {
	m Member
	c *conn
	// err is set when the member has no address or did not answer; the
	// fields below are then empty.
	err   *NodeError
	id    string
	nodes []Node
	info  map[string]string
	keys  int64
	// masterLink is master_link_status from INFO replication: "up" once a
	// replica has synced, "" on a master.
	masterLink string
	// masterAddr is the master_host:master_port a replica syncs from.
	masterAddr string
	// offset is a replica's slave_repl_offset: how much of its master's
	// stream it holds.
	offset int64
	// usedMemory and maxMemory are used_memory and maxmemory from INFO
	// memory, in bytes.
	usedMemory, maxMemory int64
}

func (v *view) ok() bool { return v.err == nil }

// self is the member's own CLUSTER NODES line.
func (v *view) self() Node {
	for _, n := range v.nodes {
		if n.ID == v.id {
			return n
		}
	}
	return Node{ID: v.id}
}

// node is the line for id in the member's view, if it knows id.
func (v *view) node(id string) (Node, bool) {
	for _, n := range v.nodes {
		if n.ID == id {
			return n, true
		}
	}
	return Node{}, false
}

// handshakeTo reports whether the member is in handshake with addr.
func (v *view) handshakeTo(addr string) bool {
	for _, n := range v.nodes {
		if n.Has("handshake") && n.Addr == addr {
			return true
		}
	}
	return false
}

// observe asks every member with an address who it is and what it sees,
// in parallel.
func observe(ctx context.Context, spec Spec, o *options) []*view {
	views := make([]*view, len(spec.Members))
	var wg sync.WaitGroup
	for i, m := range spec.Members {
		v := &view{m: m}
		views[i] = v
		if m.Addr == "" {
			v.err = &NodeError{Pod: m.Pod, Reason: ReasonUnreachable, Err: fmt.Errorf("pod has no IP yet")}
			continue
		}
		v.c = dialMember(m, &spec, o)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := v.load(ctx); err != nil {
				v.err = v.c.nodeError(err)
			}
		}()
	}
	wg.Wait()
	return views
}

func (v *view) load(ctx context.Context) error {
	pong, err := v.c.text(ctx, "PING")
	if err != nil {
		return fmt.Errorf("PING: %w", err)
	}
	if pong != "PONG" {
		return garbage(fmt.Errorf("PING answered %q", truncate(pong, 40)))
	}
	if v.id, err = v.c.text(ctx, "CLUSTER", "MYID"); err != nil {
		return fmt.Errorf("CLUSTER MYID: %w", err)
	}
	if !validID(v.id) {
		return garbage(fmt.Errorf("CLUSTER MYID answered %q", truncate(v.id, 60)))
	}
	s, err := v.c.text(ctx, "CLUSTER", "NODES")
	if err != nil {
		return fmt.Errorf("CLUSTER NODES: %w", err)
	}
	if v.nodes, err = ParseNodes(s); err != nil {
		return garbage(err)
	}
	if !v.self().Has("myself") {
		return garbage(fmt.Errorf("CLUSTER NODES has no line for its own ID %s", v.id))
	}
	if s, err = v.c.text(ctx, "CLUSTER", "INFO"); err != nil {
		return fmt.Errorf("CLUSTER INFO: %w", err)
	}
	if v.info, err = ParseInfo(s); err != nil || !strings.Contains(s, "cluster_state:") {
		return garbage(fmt.Errorf("CLUSTER INFO answered %q", truncate(s, 80)))
	}
	k, err := v.c.do(ctx, "DBSIZE")
	if err != nil {
		return fmt.Errorf("DBSIZE: %w", err)
	}
	n, ok := k.(int64)
	if !ok {
		return garbage(fmt.Errorf("DBSIZE answered %v", k))
	}
	v.keys = n
	if s, err = v.c.text(ctx, "INFO", "replication", "memory"); err != nil {
		return fmt.Errorf("INFO replication memory: %w", err)
	}
	repl, err := ParseInfo(s)
	if err != nil {
		return garbage(err)
	}
	v.usedMemory, _ = strconv.ParseInt(repl["used_memory"], 10, 64)
	v.maxMemory, _ = strconv.ParseInt(repl["maxmemory"], 10, 64)
	v.masterLink = repl["master_link_status"]
	if h := repl["master_host"]; h != "" {
		v.masterAddr = net.JoinHostPort(h, repl["master_port"])
	}
	v.offset, _ = strconv.ParseInt(repl["slave_repl_offset"], 10, 64) // absent on masters
	return nil
}
