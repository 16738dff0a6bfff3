package controllers

import (
	"github.com/sluice-dev/sluice/controllers/observe"
	"github.com/sluice-dev/sluice/controllers/redisfleet"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// Names that moved out of this package stay here as aliases, for
// cmd/operator, the charts tests and this package's tests, which use them as
// controllers.X; new code names them in their packages: controllers/resources
// (the objects a fleet owns), controllers/observe (the pod observers) and
// controllers/redisfleet (the Redis Cluster).

const (
	DefaultEnforcementWindow    = observe.DefaultEnforcementWindow
	LabelInstance               = resources.LabelInstance
	LabelManagedBy              = resources.LabelManagedBy
	LabelRedisShard             = resources.LabelRedisShard
	LimiterAuthDelegatorBinding = resources.LimiterAuthDelegatorBinding
	LimiterDrainDelay           = resources.LimiterDrainDelay
	LimiterGRPCPort             = resources.LimiterGRPCPort
	LimiterGracePeriod          = resources.LimiterGracePeriod
	RedisAuthHashAnnotation     = resources.RedisAuthHashAnnotation
	RedisConfigHashAnnotation   = resources.RedisConfigHashAnnotation
	RedisLimiterAuthAnnotation  = resources.RedisLimiterAuthAnnotation
	RedisLimiterPasswordKey     = resources.RedisLimiterPasswordKey
	RedisLimiterUser            = resources.RedisLimiterUser
	RedisOperatorPasswordKey    = resources.RedisOperatorPasswordKey
	RedisOperatorUser           = resources.RedisOperatorUser
	RedisReplicationPasswordKey = resources.RedisReplicationPasswordKey
	RedisReplicationUser        = resources.RedisReplicationUser
	RedisTLSHashAnnotation      = resources.RedisTLSHashAnnotation
	RedisUser                   = resources.RedisUser
	RedisUsersKey               = resources.RedisUsersKey
)

var (
	AdminTLSSecretName          = resources.AdminTLSSecretName
	AdminTLSServerName          = resources.AdminTLSServerName
	BuildLimiterAuthDelegation  = resources.BuildLimiterAuthDelegation
	BuildLimiterDeployment      = resources.BuildLimiterDeployment
	BuildLimiterHeadlessService = resources.BuildLimiterHeadlessService
	BuildLimiterNetworkPolicy   = resources.BuildLimiterNetworkPolicy
	BuildLimiterPDB             = resources.BuildLimiterPDB
	BuildLimiterRole            = resources.BuildLimiterRole
	BuildLimiterRoleBinding     = resources.BuildLimiterRoleBinding
	BuildLimiterService         = resources.BuildLimiterService
	BuildLimiterServiceAccount  = resources.BuildLimiterServiceAccount
	BuildRedisAuthSecret        = resources.BuildRedisAuthSecret
	BuildRedisConfigMap         = resources.BuildRedisConfigMap
	BuildRedisNetworkPolicy     = resources.BuildRedisNetworkPolicy
	BuildRedisPDB               = resources.BuildRedisPDB
	BuildRedisService           = resources.BuildRedisService
	BuildRedisStatefulSet       = resources.BuildRedisStatefulSet
	BuildSnapshotConfigMap      = resources.BuildSnapshotConfigMap
	BuildTopKKeySecret          = resources.BuildTopKKeySecret
	IssueRedisCert              = redisfleet.IssueRedisCert
	LimiterArgs                 = resources.LimiterArgs
	LimiterHeadlessName         = resources.LimiterHeadlessName
	LimiterLabels               = resources.LimiterLabels
	LimiterName                 = resources.LimiterName
	LimiterNetworkPolicyName    = resources.LimiterNetworkPolicyName
	LimiterSelectorLabels       = resources.LimiterSelectorLabels
	NewRedisCA                  = redisfleet.NewRedisCA
	ParseRedisCA                = redisfleet.ParseRedisCA
	RedisAuthHash               = redisfleet.RedisAuthHash
	RedisAuthSecretName         = resources.RedisAuthSecretName
	RedisCASecretName           = resources.RedisCASecretName
	RedisCertCurrent            = redisfleet.RedisCertCurrent
	RedisClientTLS              = redisfleet.RedisClientTLS
	RedisConfig                 = resources.RedisConfig
	RedisConfigMapName          = resources.RedisConfigMapName
	RedisLabels                 = resources.RedisLabels
	RedisLimiterAuthHash        = redisfleet.RedisLimiterAuthHash
	RedisMaxMemory              = resources.RedisMaxMemory
	RedisName                   = resources.RedisName
	RedisNetworkPolicyName      = resources.RedisNetworkPolicyName
	RedisSeeds                  = resources.RedisSeeds
	RedisSelectorLabels         = resources.RedisSelectorLabels
	RedisShardName              = resources.RedisShardName
	RedisTLSEnabled             = resources.RedisTLSEnabled
	RedisTLSSecretName          = resources.RedisTLSSecretName
	RedisTLSServerName          = resources.RedisTLSServerName
	RedisUsersConf              = resources.RedisUsersConf
	SnapshotConfigMapName       = resources.SnapshotConfigMapName
	Status                      = redisfleet.Status
	StoreURL                    = resources.StoreURL
	TopKKeySecretName           = resources.TopKKeySecretName
)

type (
	LimiterDeploymentOptions = resources.LimiterDeploymentOptions
	NetworkPolicyOptions     = resources.NetworkPolicyOptions
	RedisCA                  = redisfleet.RedisCA
	RedisPasswords           = resources.RedisPasswords
	RedisSecretHashes        = resources.RedisSecretHashes
)
