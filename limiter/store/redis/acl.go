package redis

import (
	"regexp"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/api/redisacl"
)

// ACLRules are the rules of a Redis ACL user that may run a Store with
// keyPrefix (Options.KeyPrefix, "" for the default) and nothing else, in
// ACL SETUSER syntax: no command but those the store sends, on no key but
// its own, and no channel.
//
// The store sends HELLO or AUTH when it connects, PING (readiness, probes),
// EVALSHA and, after NOSCRIPT, EVAL, and in cluster mode CLUSTER SLOTS
// (its slot map), CLUSTER NODES (the config epoch each node that answers
// a map load knows: slotsource.go) and COMMAND (go-redis's routing table);
// SCRIPT LOAD is allowed for clients that preload scripts. A script runs
// with its caller's rights, so the commands the scripts call are read from
// their source and allowed too: no command is listed by hand twice.
// CLUSTER SHARDS is the other topology read of a cluster client, and
// READONLY is allowed for a client that reads from replicas.
// EXISTS is the breakers' probe of a shard, on a key of the store's.
// ASKING is what the cluster client sends before a command it follows to a
// node that imports the key's slot (an ASK reply while slots move).
// Every key the store writes starts with "<prefix>:{" (RedisKey, RecordsKey, RecordIndexKey,
// PodsKey, and the breakers' probe keys).
func ACLRules(keyPrefix string) string {
	return redisacl.Rules(keyPrefix, ACLCommands())
}

// ACLCommands are the commands, lower case with "|" before a subcommand,
// that a Store sends or that its scripts call, sorted.
func ACLCommands() []string {
	cmds := []string{
		"hello", "auth", "ping", "evalsha", "eval", "script|load",
		"cluster|slots", "cluster|shards", "cluster|nodes", "readonly", "command", "asking",
		"exists",
	}
	all := append(append([]script{grantScript}, scripts[:]...), holdScripts[:]...)
	for _, sc := range all {
		cmds = append(cmds, ScriptCommands(sc.src)...)
	}
	slices.Sort(cmds)
	return slices.Compact(cmds)
}

// scriptCall is a call from Lua to Redis with a literal command name.
var scriptCall = regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z]+)'`)

// ScriptCommands are the commands a Lua script calls by literal name,
// lower case, in order of appearance.
func ScriptCommands(src string) []string {
	var out []string
	for _, m := range scriptCall.FindAllStringSubmatch(src, -1) {
		out = append(out, strings.ToLower(m[1]))
	}
	return out
}

// defaultKeyPrefix starts every key when Options.KeyPrefix is empty.
const defaultKeyPrefix = redisacl.DefaultKeyPrefix
