package redis_test

import (
	"fmt"
	"strings"
	"testing"

	redisstore "github.com/sluice-dev/sluice/limiter/store/redis"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in      string
		addrs   []string
		cluster bool
		tls     bool
		err     string
	}{
		{in: "rediss://cache.example.com:6380", addrs: []string{"cache.example.com:6380"}, tls: true},
		{in: "rediss-cluster://a:1,b:2", addrs: []string{"a:1", "b:2"}, cluster: true, tls: true},
		{in: "redis://127.0.0.1:6379", addrs: []string{"127.0.0.1:6379"}},
		{in: "redis://u:p%40ss@127.0.0.1:6379/2", addrs: []string{"127.0.0.1:6379"}},
		{in: "redis-cluster://a:1,b:2,c:3", addrs: []string{"a:1", "b:2", "c:3"}, cluster: true},
		{in: "127.0.0.1:6379", err: "want redis://"},
		{in: "redis+tls://x:1", err: `unknown scheme "redis+tls", want redis, rediss, redis-cluster or rediss-cluster`},
		{in: "redis://host", err: "has no port"},
		{in: "redis://a:1,b:2", err: "use redis-cluster://"},
		{in: "redis://a:1/x", err: "bad database"},
		{in: "redis-cluster://", err: "no address"},
	} {
		o, err := redisstore.ParseURL(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(o.Addrs) != fmt.Sprint(tc.addrs) || o.Cluster != tc.cluster || (o.TLS != nil) != tc.tls {
			t.Errorf("%s: got %+v %v", tc.in, o, err)
		}
	}
	if o, _ := redisstore.ParseURL("redis://u:p%40ss@h:1/2"); o.Username != "u" || o.Password != "p@ss" || o.DB != 2 {
		t.Errorf("credentials not parsed: %+v", o)
	}
}
