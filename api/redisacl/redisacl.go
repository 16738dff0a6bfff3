/*
Copyright 2026 The Sluice Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package redisacl holds the Redis ACL rules of a limiter's Redis store, as
// pure data, for both sides: limiter/store/redis (whose ACLRules returns
// them) and the operator, which writes them into the ACL file of the Redis
// it runs. It imports the standard library only, so that the operator
// links neither go-redis nor the limiter's servers.
//
// The store reads the commands its Lua scripts call from their source
// (limiter/store/redis.ACLCommands); a test there fails when
// LimiterCommands differs from what it reads, naming both.
package redisacl

import "strings"

// DefaultKeyPrefix starts every key of a store whose key prefix is empty.
const DefaultKeyPrefix = "sl"

// LimiterCommands are the commands, lower case with "|" before a subcommand,
// that a limiter's Redis store sends or that its scripts call, sorted.
var LimiterCommands = []string{
	"asking", "auth", "cluster|nodes", "cluster|shards", "cluster|slots", "command",
	"eval", "evalsha", "exists", "get", "hdel", "hello", "hget", "hgetall", "hset",
	"pexpire", "ping", "pttl", "readonly", "script|load", "set", "time",
	"zadd", "zcard", "zpopmin", "zrange", "zrangebyscore", "zrem", "zremrangebyscore", "zscore",
}

// LimiterRules are the rules, in ACL SETUSER syntax, of a Redis user that
// may run a limiter's store with keyPrefix ("" for DefaultKeyPrefix) and
// nothing else: no command but LimiterCommands, on no key but those that
// start with "<prefix>:{", and no channel.
func LimiterRules(keyPrefix string) string {
	return Rules(keyPrefix, LimiterCommands)
}

// Rules are the ACL SETUSER rules that reset keys and channels, allow the
// keys that start with "<keyPrefix>:{" ("" for DefaultKeyPrefix), deny
// every command and then allow cmds.
func Rules(keyPrefix string, cmds []string) string {
	if keyPrefix == "" {
		keyPrefix = DefaultKeyPrefix
	}
	rules := []string{"resetkeys", "~" + keyPrefix + ":{*", "resetchannels", "-@all"}
	for _, c := range cmds {
		rules = append(rules, "+"+c)
	}
	return strings.Join(rules, " ")
}
