package controllers

import (
	"github.com/sluice-dev/sluice/controllers/observe"
	"github.com/sluice-dev/sluice/controllers/resources"
)

// The names below moved to controllers/resources, which builds the objects a
// fleet owns. They stay here, as aliases, for cmd/operator, the charts tests
// and this package's tests, which use them as controllers.X; new code uses
// resources.X.

const (
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
	LimiterArgs                 = resources.LimiterArgs
	LimiterHeadlessName         = resources.LimiterHeadlessName
	LimiterLabels               = resources.LimiterLabels
	LimiterName                 = resources.LimiterName
	LimiterNetworkPolicyName    = resources.LimiterNetworkPolicyName
	LimiterSelectorLabels       = resources.LimiterSelectorLabels
	RedisAuthSecretName         = resources.RedisAuthSecretName
	RedisCASecretName           = resources.RedisCASecretName
	RedisConfig                 = resources.RedisConfig
	RedisConfigMapName          = resources.RedisConfigMapName
	RedisLabels                 = resources.RedisLabels
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
	StoreURL                    = resources.StoreURL
	TopKKeySecretName           = resources.TopKKeySecretName
)

type (
	LimiterDeploymentOptions = resources.LimiterDeploymentOptions
	NetworkPolicyOptions     = resources.NetworkPolicyOptions
	RedisPasswords           = resources.RedisPasswords
	RedisSecretHashes        = resources.RedisSecretHashes
)

// Defaults of the pod observers, which moved to controllers/observe.
const (
	DefaultEnforcementWindow = observe.DefaultEnforcementWindow
)
