package docs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The checker itself: it must see what it is meant to catch, or the manual's
// tests could never fail.

func TestCheckerFindsBrokenLinks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/a.md", "# Page A\n\n## A refusal is a denial, never an error\n\n## Limits over a request's lifetime\n\n## `Retry-After`\n")
	write("README.md", strings.Join([]string{
		"[ok](docs/a.md) [ok](docs/a.md#a-refusal-is-a-denial-never-an-error) [ok](docs/a.md#limits-over-a-requests-lifetime)",
		"[ok](docs/a.md#retry-after) [ok](#title) [ok](https://example.com/x.md#nope) `[code](nope.md)`",
		"# Title",
		"[missing file](docs/b.md) [missing anchor](docs/a.md#nope) [missing here](#nope) [outside](../x.md)",
		"```",
		"[in a block](nope.md)",
		"```",
	}, "\n"))
	problems, err := checkLinks(dir, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 4 {
		t.Fatalf("got %d problems, want 4 (missing file, two missing anchors, a link outside):\n%s", len(problems), strings.Join(problems, "\n"))
	}
	for i, want := range []string{"docs/b.md does not exist", "no heading with anchor #nope", "no heading with anchor #nope", "leaves the repository"} {
		if !strings.Contains(problems[i], want) {
			t.Errorf("problem %d: %q, want it to say %q", i, problems[i], want)
		}
	}
}

func TestParseBlocks(t *testing.T) {
	md := strings.Join([]string{
		"intro",
		"<!-- doccheck: skip: the e2e journey runs it -->",
		"```sh",
		"helm install x",
		"```",
		"- a list item:",
		"",
		"  ```yaml",
		"  spec:",
		"    soft: true",
		"  ```",
		"```",
		"drawing",
		"```",
	}, "\n")
	blocks, err := parseBlocks("x.md", md)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 3 {
		t.Fatalf("%d blocks, want 3: %+v", len(blocks), blocks)
	}
	if b := blocks[0]; b.marker != "skip: the e2e journey runs it" || b.info != "sh" || b.line != 3 || b.text != "helm install x\n" {
		t.Errorf("block 0: %+v", b)
	}
	if b := blocks[1]; b.marker != "" || b.info != "yaml" || b.text != "spec:\n  soft: true\n" {
		t.Errorf("block 1 (dedented, no marker): %+v", b)
	}
	if b := blocks[2]; b.info != "" || b.text != "drawing\n" {
		t.Errorf("block 2: %+v", b)
	}
	if _, err := parseBlocks("x.md", "```sh\nnever closed\n"); err == nil {
		t.Error("an unclosed fence parses")
	}
}

func TestCommandsAndCodes(t *testing.T) {
	console := block{info: "console", text: "$ curl -si a \\\n    -d b\nHTTP/1.1 429 Too Many Requests\nRetry-After: 1\n\n{\"a\":1}\n$ curl -s c\n{\"b\":2}\n"}
	cmds := commands(console)
	if len(cmds) != 2 || cmds[0].run != "curl -si a \\\n    -d b" || cmds[1].run != "curl -s c" {
		t.Fatalf("console commands: %+v", cmds)
	}
	if got := codes(cmds[0].want); len(got) != 1 || got[0] != "429" {
		t.Errorf("codes of %q: %v", cmds[0].want, got)
	}
	if got := jsonLines(cmds[1].want); len(got) != 1 || keys(got[0]) != "b" {
		t.Errorf("JSON of %q: %v", cmds[1].want, got)
	}
	sh := block{info: "sh", text: "for i in 1 2; do curl x; done\n# 200 429\n# not codes: 200\n"}
	if cmds := commands(sh); len(cmds) != 1 || strings.Join(codes(cmds[0].want), " ") != "200 429" {
		t.Errorf("sh commands: %+v", cmds)
	}
}

func TestMergeFragment(t *testing.T) {
	obj, err := mergeFragment("policy-spec", "spec:\n  soft: true\n  rate: {limit: 4, period: 1m}\n")
	if err != nil {
		t.Fatal(err)
	}
	spec := obj["spec"].(map[string]any)
	if spec["domain"] != "docs-api" || spec["soft"] != true || spec["rate"].(map[string]any)["limit"] != float64(4) {
		t.Errorf("merged onto the base: %v", spec)
	}
	obj, err = mergeFragment("policy-spec", "spec:\n  domain: llm\n  algorithm: Concurrency\n")
	if err != nil {
		t.Fatal(err)
	}
	if spec := obj["spec"].(map[string]any); spec["rate"] != nil || spec["domain"] != "llm" {
		t.Errorf("a fragment with a domain is a whole spec: %v", spec)
	}
	if _, err := mergeFragment("fleet-spec", "redis:\n  mode: External\n"); err == nil {
		t.Error("a fragment without spec: merges")
	}
	if _, err := decodeObjects("apiVersion: v1\nkind: ConfigMap\n"); err == nil {
		t.Error("a ConfigMap decodes as a Sluice object")
	}
}
