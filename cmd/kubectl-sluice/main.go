// Command kubectl-sluice is the kubectl plugin of Sluice (kubectl sluice):
//
//	kubectl sluice explain --limiter URL --fleet NS/NAME --domain D key=value ...
//	kubectl sluice top --limiter URL --fleet NS/NAME [-A | -n NAMESPACE] [--sort decisions|limited]
//	kubectl sluice status [-A | -n NAMESPACE]
//
// explain asks a limiter's admin plane (limiterwire.ExplainPath) which
// policies a request matches, each one's counter, remaining, reset,
// failure mode and penalty, and prints whether the request would be
// allowed now, and if not when it would pass, without spending anything.
// It calls with a token it mints for the fleet's admin audience alone
// (token.go), never the kubeconfig's own credential, so the limiter shows
// a policy in full only where that ServiceAccount may get
// ratelimitpolicies (see limiter/adminauth). top lists the policies with the most decisions
// (or denials) on that limiter and their hottest keys, hashed as the
// policies' status shows them (limiterwire.TopPath), again only of the
// namespaces where the user may get ratelimitpolicies. status summarizes LimiterFleets and
// RateLimitPolicies from the API server, with the user's credentials.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const usageText = `kubectl sluice: see why a request is limited, and the fleet at a glance.

Commands:
  explain --limiter URL --fleet NS/NAME --domain DOMAIN key=value ...
      which policies a request matches, their counters, and why it would be
      allowed or denied and when it would pass; nothing is spent
  top --limiter URL --fleet NS/NAME [-A | -n NAMESPACE] [--sort decisions|limited] [--top N]
      the hottest policies on one limiter and their hottest keys (hashed)
  status [-A | -n NAMESPACE]
      LimiterFleets and RateLimitPolicies with their conditions

Run kubectl sluice COMMAND -h for a command's flags.
`

// run is the plugin on args, answering its exit code: 0, 1 for a failure
// of the call, 2 for bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return 2
	}
	switch args[0] {
	case "explain":
		return explain(args[1:], stdout, stderr)
	case "top":
		return top(args[1:], stdout, stderr)
	case "status":
		return status(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usageText)
		return 0
	default:
		fmt.Fprintf(stderr, "kubectl sluice: unknown command %q\n\n%s", args[0], usageText)
		return 2
	}
}
