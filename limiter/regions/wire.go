package regions

// The peer endpoint's wire contract, declared once for both sides.

const (
	// GrantPath is the peer endpoint's one route.
	GrantPath = "/v1/peer/grant"
	// MaxBodyBytes bounds a grant call's body.
	MaxBodyBytes = 4 << 10
	// MinTokenBytes is the shortest peer token a region accepts.
	MinTokenBytes = 32
)

// grantCall is what a region sends the home of a key.
type grantCall struct {
	// Region is the caller's region name.
	Region string `json:"region"`
	// Policy is the policy's ID (namespace/name).
	Policy string `json:"policy"`
	// Key is the request's counter key (store.Key.String).
	Key string `json:"key"`
	// Cost is charged now: 1, plus what the caller admitted without a
	// grant (cold advance, partition share).
	Cost int64 `json:"cost"`
	// Want is how many units beyond Cost the caller asks to hold.
	Want int64 `json:"want"`
	// Credit gives back the unspent units of the caller's last grant on
	// Key, taken in window CreditWindow.
	Credit       int64 `json:"credit,omitempty"`
	CreditWindow int64 `json:"creditWindow,omitempty"`
	// Spend: Cost is one request's own, decided here and spent by it
	// (takeAtHome), no unit of it held by the caller; Want is then 0.
	Spend bool `json:"spend,omitempty"`
	// SharePercent is the caller's partition share, 1 to 100: what it
	// admits per period on a key whose home it can't reach.
	SharePercent int32 `json:"sharePercent"`
}

// grantAnswer is the home's answer.
type grantAnswer struct {
	Allowed      bool  `json:"allowed"`
	Granted      int64 `json:"granted"`
	LifetimeMS   int64 `json:"lifetimeMs"`
	Window       int64 `json:"window"`
	Remaining    int64 `json:"remaining"`
	RetryAfterMS int64 `json:"retryAfterMs"`
	// SharePercent is the home's partition share, as in grantCall.
	SharePercent int32 `json:"sharePercent"`
}

// refusal is the body of a refused call: why, for the caller's status.
type refusal struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Reasons a peer is not usable, as Status and refusals say them.
const (
	ReasonReachable     = "Reachable"
	ReasonUnreachable   = "Unreachable"
	ReasonUnauthorized  = "Unauthorized"
	ReasonUnknownRegion = "UnknownRegion"
	ReasonRefused       = "Refused"
	ReasonNoExchange    = "NoExchangeYet"
)
