package docs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// The manual is README.md and every Markdown file under docs/. Its fenced
// blocks are checked by TestDocBlocks, its relative links by TestDocLinks.
//
// A block is told how it is checked by an HTML comment on the line before its
// fence (invisible when rendered):
//
//	<!-- doccheck: skip: REASON -->        not run; REASON says what runs it instead
//	<!-- doccheck: policy-spec -->         YAML, the spec: of a RateLimitPolicy (merged onto a base policy)
//	<!-- doccheck: fleet-spec -->          YAML, the spec: of a LimiterFleet (merged onto a base fleet)
//	<!-- doccheck: rejected: MESSAGE -->   YAML objects the API server must refuse, with MESSAGE in its answer
//	<!-- doccheck: limiter policies=A,B --> shell run against a limiter started as make run starts it, on files A and B
//
// Without a comment: a block without an info string (or "text") is a drawing
// or output and is not run; a yaml block of RateLimitPolicy and LimiterFleet
// objects is created on the API server (dry run) and loaded by limiter/config as
// a policy file; a sh or console block that calls the standalone limiter
// (127.0.0.1:8080) runs against one started as make run starts it. Anything
// else fails the test: a block a user would run must be run, or say why not.

// block is one fenced code block of the manual.
type block struct {
	file   string // relative to the repository root
	line   int    // of the opening fence, 1-based
	info   string // the fence's info string, such as "yaml"
	marker string // what follows "doccheck:" in the comment before the fence, trimmed
	text   string // the block's content
}

func (b block) String() string { return fmt.Sprintf("%s:%d (```%s)", b.file, b.line, b.info) }

var markerRE = regexp.MustCompile(`^<!--\s*doccheck:\s*(.*?)\s*-->$`)

// parseBlocks returns the fenced blocks of a Markdown file's content.
func parseBlocks(file, content string) ([]block, error) {
	var (
		blocks []block
		cur    *block
		body   []string
		fence  string
		prev   string // the last non-blank line outside a block
	)
	for i, line := range strings.Split(content, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur == nil {
			if f := fenceOf(trimmed); f != "" {
				cur = &block{file: file, line: i + 1, info: strings.TrimSpace(trimmed[len(f):])}
				if m := markerRE.FindStringSubmatch(prev); m != nil {
					cur.marker = m[1]
				}
				fence, body = f, nil
				continue
			}
			if trimmed != "" {
				prev = trimmed
			}
			continue
		}
		if closes(trimmed, fence) {
			cur.text = dedent(body)
			blocks = append(blocks, *cur)
			cur, prev = nil, ""
			continue
		}
		body = append(body, line)
	}
	if cur != nil {
		return nil, fmt.Errorf("%s: a fence opened on line %d is never closed", cur.file, cur.line)
	}
	return blocks, nil
}

func fenceOf(trimmed string) string {
	for _, f := range []string{"````", "```", "~~~"} {
		if strings.HasPrefix(trimmed, f) {
			return f
		}
	}
	return ""
}

// closes says whether a line closes a block opened with fence.
func closes(trimmed, fence string) bool {
	return strings.HasPrefix(trimmed, fence) && strings.TrimLeft(trimmed, fence[:1]) == ""
}

// dedent removes the indentation every line shares (a block inside a list item).
func dedent(lines []string) string {
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " "))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		if len(l) >= indent && indent > 0 {
			l = l[indent:]
		}
		out[i] = l
	}
	return strings.Join(out, "\n") + "\n"
}

// manualFiles lists README.md and docs/**/*.md, relative to root.
func manualFiles(root string) ([]string, error) {
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(files[1:])
	return files, err
}

var (
	linkRE       = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	inlineCodeRE = regexp.MustCompile("`[^`]*`")
	headingRE    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlAnchorRE = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// links returns the targets of the inline links of a Markdown file, outside
// code, with the line of each.
func links(content string) (targets []string, lines []int) {
	inFence := ""
	for i, line := range strings.Split(content, "\n") {
		trimmed := strings.TrimSpace(line)
		if inFence != "" {
			if closes(trimmed, inFence) {
				inFence = ""
			}
			continue
		}
		if f := fenceOf(trimmed); f != "" {
			inFence = f
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(inlineCodeRE.ReplaceAllString(line, ""), -1) {
			targets = append(targets, m[1])
			lines = append(lines, i+1)
		}
	}
	return targets, lines
}

// anchors returns the anchors GitHub gives a Markdown file's headings (and
// explicit <a name=...> anchors).
func anchors(content string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	inFence := ""
	for _, line := range strings.Split(content, "\n") {
		trimmed := strings.TrimSpace(line)
		if inFence != "" {
			if closes(trimmed, inFence) {
				inFence = ""
			}
			continue
		}
		if f := fenceOf(trimmed); f != "" {
			inFence = f
			continue
		}
		for _, m := range htmlAnchorRE.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := slugify(m[2])
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// slugify is GitHub's heading anchor: lower case, punctuation dropped but
// for - and _, spaces turned into -.
func slugify(heading string) string {
	heading = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(heading, "$1") // a link's text
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// checkLinks returns a problem for each relative link of file (relative to
// root) to a file that does not exist or an anchor its target lacks.
func checkLinks(root, file string) ([]string, error) {
	content, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return nil, err
	}
	var problems []string
	targets, lines := links(string(content))
	for i, target := range targets {
		if regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`).MatchString(target) {
			continue // https:, mailto:
		}
		path, anchor, _ := strings.Cut(target, "#")
		resolved := file
		if path != "" {
			if strings.HasPrefix(path, "/") {
				problems = append(problems, fmt.Sprintf("%s:%d: link %q: make it relative to the file", file, lines[i], target))
				continue
			}
			resolved = filepath.ToSlash(filepath.Join(filepath.Dir(file), path))
			if strings.HasPrefix(resolved, "../") {
				problems = append(problems, fmt.Sprintf("%s:%d: link %q leaves the repository", file, lines[i], target))
				continue
			}
			if _, err := os.Stat(filepath.Join(root, resolved)); err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: link %q: %s does not exist", file, lines[i], target, resolved))
				continue
			}
		}
		if anchor == "" || !strings.HasSuffix(resolved, ".md") {
			continue
		}
		targetContent, err := os.ReadFile(filepath.Join(root, resolved))
		if err != nil {
			return nil, err
		}
		if !anchors(string(targetContent))[anchor] {
			problems = append(problems, fmt.Sprintf("%s:%d: link %q: %s has no heading with anchor #%s", file, lines[i], target, resolved, anchor))
		}
	}
	return problems, nil
}
