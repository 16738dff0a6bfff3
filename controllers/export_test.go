package controllers

// The two writers of a RateLimitPolicy's status, for the tests of package
// controllers_test that run them against the API server.
var (
	ApplyConditions  = applyConditions
	ApplyEnforcement = applyEnforcement
)
