// Command chartgen writes the generated parts of the Helm chart
// (charts/sluice) from the project's other generated files, so that they
// are never edited by hand:
//
//	chartgen crds   -in config/crd/bases   -out charts/sluice/templates
//	chartgen rbac   -in config/rbac/role.yaml -out charts/sluice/templates/_operator-rules.tpl
//	chartgen readme -chart charts/sluice
//
// `make manifests` runs the first two after controller-gen; `make helm-docs`
// runs the third. `make verify` fails when any output is stale.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	var err error
	switch os.Args[1] {
	case "crds":
		in := fs.String("in", "config/crd/bases", "`directory` of controller-gen CRDs")
		out := fs.String("out", "charts/sluice/templates", "chart templates `directory`")
		_ = fs.Parse(os.Args[2:])
		err = writeCRDTemplates(*in, *out)
	case "rbac":
		in := fs.String("in", "config/rbac/role.yaml", "controller-gen ClusterRole `file`")
		out := fs.String("out", "charts/sluice/templates/_operator-rules.tpl", "named templates `file` to write")
		_ = fs.Parse(os.Args[2:])
		err = writeRulesTemplate(*in, *out)
	case "readme":
		chart := fs.String("chart", "charts/sluice", "chart `directory`")
		_ = fs.Parse(os.Args[2:])
		err = writeReadme(*chart)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chartgen %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: chartgen crds|rbac|readme [flags]")
	os.Exit(2)
}

// writeIfChanged writes data to path unless the file already holds it, so
// that make and git see no change when nothing changed.
func writeIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
		return nil
	}
	return os.WriteFile(path, data, 0o644)
}
