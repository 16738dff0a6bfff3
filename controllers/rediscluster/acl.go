package rediscluster

import "strings"

// OperatorCommands are the commands Reconcile sends, lower case with "|"
// before a subcommand, and SELECT and RESTORE-ASKING, which a source node's
// MIGRATE sends to the target as the same user.
var OperatorCommands = []string{
	"auth", "hello", "ping", "info", "dbsize",
	"cluster|myid", "cluster|nodes", "cluster|info",
	"cluster|meet", "cluster|addslotsrange", "cluster|replicate", "cluster|failover", "cluster|forget",
	"cluster|setslot", "cluster|countkeysinslot", "cluster|getkeysinslot",
	"migrate", "select", "restore-asking",
}

// OperatorACLRules are the rules, in ACL SETUSER syntax, of the Redis user
// that Reconcile authenticates as (Spec.Username): OperatorCommands and no
// other; every key, which MIGRATE moves but no command reads; no channel.
// It can't flush, reconfigure, reset, shut down or script a node.
func OperatorACLRules() string { return rules("~*", OperatorCommands) }

// ReplicaCommands are what a replica sends its primary as masteruser:
// PING, REPLCONF and PSYNC (and AUTH).
var ReplicaCommands = []string{"auth", "ping", "replconf", "psync"}

// ReplicaACLRules are the rules of the user replicas authenticate to their
// primary as (masteruser): replication and nothing else, on no key.
func ReplicaACLRules() string { return rules("", ReplicaCommands) }

func rules(keys string, cmds []string) string {
	out := []string{"resetkeys"}
	if keys != "" {
		out = append(out, keys)
	}
	out = append(out, "resetchannels", "-@all")
	for _, c := range cmds {
		out = append(out, "+"+c)
	}
	return strings.Join(out, " ")
}
