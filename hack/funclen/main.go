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

// Command funclen checks the size of non-test Go code: no file over
// -max-file lines and no function (or method, or function literal assigned at
// package level) over -max-func lines. Each argument is a directory, walked
// recursively; a directory given as -enforce=DIR fails the run on an
// offender, one given as -enforce-func=DIR on a function over its limit
// only (its long files are info), the others print theirs as info only.
//
//	go run ./hack/funclen -enforce controllers -enforce limiter
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/sluice-dev/sluice/hack/funclen/check"
)

func main() {
	maxFunc := flag.Int("max-func", 80, "longest function allowed, in lines")
	maxFile := flag.Int("max-file", 400, "longest file allowed, in lines")
	var enforce multiFlag
	flag.Var(&enforce, "enforce", "a directory whose offenders fail the run (repeatable)")
	var enforceFunc multiFlag
	flag.Var(&enforceFunc, "enforce-func", "a directory whose functions over the limit fail the run; its files over the limit are info (repeatable)")
	flag.Parse()

	failed := false
	dirs := append(append(append([]string(nil), enforce...), enforceFunc...), flag.Args()...)
	for i, dir := range dirs {
		offenders, err := check.Dir(dir, check.Limits{MaxFunc: *maxFunc, MaxFile: *maxFile})
		if err != nil {
			fmt.Fprintln(os.Stderr, "funclen:", err)
			os.Exit(2)
		}
		strictFile := i < len(enforce)
		strictFunc := i < len(enforce)+len(enforceFunc)
		for _, o := range offenders {
			if strictFunc && (o.Name != "" || strictFile) {
				failed = true
				fmt.Println("FAIL", o)
			} else {
				fmt.Println("info", o)
			}
		}
	}
	if failed {
		fmt.Printf("funclen: functions over %d lines or files over %d lines in %s (tests excluded)\n",
			*maxFunc, *maxFile, strings.Join(append(enforce, enforceFunc...), ", "))
		os.Exit(1)
	}
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
