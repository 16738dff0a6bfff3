package limiterwire

// The key of the hottest descriptor values' keyed hash (HMAC-SHA-256). On
// Kubernetes the operator generates one per fleet, keeps it in a Secret the
// fleet owns, and mounts it into the fleet's limiter pods at TopKKeyFile,
// naming the file in TopKKeyFileEnv; the limiter hashes the values it
// reports with it, so that nobody without the key can test a guess (every
// IPv4 address, say) against a reported hash.
const (
	// TopKKeyFileEnv names the file that holds the key.
	TopKKeyFileEnv = "SLUICE_TOPK_KEY_FILE"
	// TopKKeyDir is where limiter pods mount the key's Secret.
	TopKKeyDir = "/etc/sluice/topk"
	// TopKKeyName is the key's name in its Secret, and its file name in
	// TopKKeyDir.
	TopKKeyName = "key"
	// TopKKeyFile is the key file in limiter pods.
	TopKKeyFile = TopKKeyDir + "/" + TopKKeyName
	// TopKKeyBytes is the length of the key the operator generates.
	TopKKeyBytes = 32
)
