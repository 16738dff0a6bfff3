package main

import (
	"flag"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeFlags are kubectl's flags that pick a kubeconfig and a context.
type kubeFlags struct {
	kubeconfig, context, namespace string
}

func (k *kubeFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig `file` (default: $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&k.context, "context", "", "kubeconfig `context` to use (default: the current one)")
}

// config is the user's client configuration, and the namespace of its
// context (or -n).
func (k *kubeFlags) config() (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.context})
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	ns := k.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, "", err
		}
	}
	return rc, ns, nil
}
