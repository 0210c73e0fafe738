package quickstart

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// block is one marked ```sh block.
type block struct {
	file    string // relative to the repository root
	line    int    // of the opening fence
	name    string
	wait    []string      // addresses, one per background command in order
	vary    []string      // tokens of the shown output that may differ
	timeout time.Duration // of the whole block
	cmds    []command
}

// command is one shell command of a block, as written.
type command struct {
	text       string   // its line(s)
	line       int      // of its first line in the file
	background bool     // ends with &
	expect     []string // the output the document shows after it
}

func (b block) String() string { return fmt.Sprintf("%s:%d (%s)", b.file, b.line, b.name) }

// docFiles are the documents whose ```sh blocks are inventoried: the
// README, docs/*.md, and the READMEs of the integrations and the benchmark.
func docFiles(root string) ([]string, error) {
	files := []string{"README.md"}
	for _, pattern := range []string{"docs/*.md", "integrations/*/README.md", "bench/README.md"} {
		found, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pattern)))
		if err != nil {
			return nil, err
		}
		for _, f := range found {
			rel, err := filepath.Rel(root, f)
			if err != nil {
				return nil, err
			}
			files = append(files, rel)
		}
	}
	return files, nil
}

var (
	markerRE = regexp.MustCompile(`^<!-- quickstart ([a-z0-9-]+)((?: [a-z]+=[^ ]+)*) -->$`)
	skipRE   = regexp.MustCompile(`^<!-- quickstart-skip: .+ -->$`)
	extRE    = regexp.MustCompile(`^<!-- external-module\b.* -->$`)
)

// unmarked is a ```sh block with no marker.
type unmarked struct {
	file string
	line int
}

// parseDoc returns the marked blocks of a document and its unmarked ```sh
// blocks; a malformed marker is an error.
func parseDoc(root, file string) ([]block, []unmarked, error) {
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return nil, nil, err
	}
	lines := strings.Split(string(b), "\n")
	var blocks []block
	var bare []unmarked
	parts := map[string]int{} // block name -> parts read so far
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```sh" {
			continue
		}
		marker := ""
		if i > 0 {
			marker = strings.TrimSpace(lines[i-1])
		}
		end := i + 1
		for end < len(lines) && strings.TrimSpace(lines[end]) != "```" {
			end++
		}
		if end == len(lines) {
			return nil, nil, fmt.Errorf("%s:%d: ```sh block not closed", file, i+1)
		}
		body := lines[i+1 : end]
		switch {
		case skipRE.MatchString(marker), extRE.MatchString(marker):
		case strings.HasPrefix(marker, "<!-- quickstart"):
			m := markerRE.FindStringSubmatch(marker)
			if m == nil {
				return nil, nil, fmt.Errorf("%s:%d: malformed marker %q", file, i, marker)
			}
			blk := block{file: file, line: i + 1, name: m[1], timeout: 90 * time.Second}
			part := 1
			for _, kv := range strings.Fields(m[2]) {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "part":
					// A later part of a block: its attributes are part 1's.
					if part, err = strconv.Atoi(v); err != nil || part < 2 || v != strconv.Itoa(part) || strings.TrimSpace(m[2]) != kv {
						return nil, nil, fmt.Errorf("%s:%d: %q: a later part is marked part=N alone, N ≥ 2", file, i, strings.TrimSpace(m[2]))
					}
				case "wait":
					blk.wait = strings.Split(v, ",")
				case "vary":
					blk.vary = strings.Split(v, ",")
				case "timeout":
					if blk.timeout, err = time.ParseDuration(v); err != nil {
						return nil, nil, fmt.Errorf("%s:%d: %v", file, i, err)
					}
				default:
					return nil, nil, fmt.Errorf("%s:%d: unknown marker attribute %q", file, i, k)
				}
			}
			if blk.cmds, err = splitCommands(body, i+2); err != nil {
				return nil, nil, fmt.Errorf("%s: %v", file, err)
			}
			switch {
			case part == 1 && parts[blk.name] > 0:
				return nil, nil, fmt.Errorf("%s:%d: name %s already used in this file (a later part is marked part=N)", file, i, blk.name)
			case parts[blk.name]+1 != part:
				return nil, nil, fmt.Errorf("%s:%d: %s part %d follows part %d of that name in this file; want part %d", file, i, blk.name, part, parts[blk.name], parts[blk.name]+1)
			case part > 1 && blocks[len(blocks)-1].name != blk.name:
				// Another block between would run beside the parts, out
				// of the document's order.
				return nil, nil, fmt.Errorf("%s:%d: %s part %d comes after block %s: the parts of a block follow one another (prose and skipped blocks between)", file, i, blk.name, part, blocks[len(blocks)-1].name)
			}
			parts[blk.name] = part
			if part > 1 {
				// The same block, on in the same shell.
				last := &blocks[len(blocks)-1]
				last.cmds = append(last.cmds, blk.cmds...)
				break
			}
			blocks = append(blocks, blk)
		default:
			bare = append(bare, unmarked{file, i + 1})
		}
		i = end
	}
	return blocks, bare, nil
}

// splitCommands cuts a block's lines (the first at line first of the file)
// into commands and the output shown after each.
func splitCommands(lines []string, first int) ([]command, error) {
	var cmds []command
	var cur []string
	start := 0
	afterCmd := false // the previous line ended a command: a comment shows its output
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		if len(cur) == 0 {
			switch {
			case trimmed == "":
				afterCmd = false
				continue
			case strings.HasPrefix(trimmed, "#"):
				if afterCmd {
					c := &cmds[len(cmds)-1]
					c.expect = append(c.expect, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
				}
				continue
			}
			start = first + i
		}
		cur = append(cur, l)
		text := strings.Join(cur, "\n")
		if strings.HasSuffix(l, "\\") || strings.Count(stripComment(text), "'")%2 == 1 {
			continue
		}
		cmds = append(cmds, command{text: text, line: start, background: strings.HasSuffix(stripComment(text), "&")})
		cur = nil
		afterCmd = true
	}
	if len(cur) > 0 {
		return nil, fmt.Errorf("line %d: command not finished at the end of the block", start)
	}
	return cmds, nil
}

// stripComment drops a trailing `# comment` (a # after a blank, outside
// quotes) and the blanks before it.
func stripComment(s string) string {
	inS, inD := false, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' && !inD:
			inS = !inS
		case c == '"' && !inS:
			inD = !inD
		case c == '#' && !inS && !inD && i > 0 && (s[i-1] == ' ' || s[i-1] == '\t'):
			return strings.TrimSpace(s[:i])
		}
	}
	return strings.TrimSpace(s)
}

// allBlocks parses every document.
func allBlocks(t *testing.T, root string) ([]block, []unmarked) {
	t.Helper()
	files, err := docFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []block
	var bare []unmarked
	for _, f := range files {
		b, u, err := parseDoc(root, f)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, b...)
		bare = append(bare, u...)
	}
	return blocks, bare
}

// TestQuickstartInventory: every ```sh block of the documents (docFiles) is
// either run (a quickstart marker) or left out with a reason, so that a new
// block cannot go untested by accident; names are unique; and the parser
// reads the shapes the blocks use.
func TestQuickstartInventory(t *testing.T) {
	blocks, bare := allBlocks(t, repoRoot(t))
	for _, u := range bare {
		t.Errorf("%s:%d: a ```sh block with neither <!-- quickstart NAME --> nor <!-- quickstart-skip: REASON --> above it", u.file, u.line)
	}
	seen := map[string]block{}
	for _, b := range blocks {
		if o, ok := seen[b.name]; ok {
			t.Errorf("%v: name already used by %v", b, o)
		}
		seen[b.name] = b
		if len(b.cmds) == 0 {
			t.Errorf("%v: no command", b)
		}
		bg := 0
		for _, c := range b.cmds {
			if c.background {
				bg++
			}
		}
		if len(b.wait) > bg {
			t.Errorf("%v: %d wait addresses for %d background commands", b, len(b.wait), bg)
		}
	}
	if len(blocks) == 0 {
		t.Error("no quickstart block found")
	}
}

func TestSplitCommands(t *testing.T) {
	cmds, err := splitCommands(strings.Split(`# a prose comment
a -x 1 &   # trailing comment
# shown by a
b \
  -y 2
c -d '{
  "k": "it''s # not a comment"
}'

# prose again
d`, "\n"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 4 {
		t.Fatalf("%d commands: %+v", len(cmds), cmds)
	}
	if !cmds[0].background || len(cmds[0].expect) != 1 || cmds[0].expect[0] != "shown by a" || cmds[0].line != 2 {
		t.Errorf("first: %+v", cmds[0])
	}
	if cmds[1].text != "b \\\n  -y 2" || cmds[1].background {
		t.Errorf("second: %+v", cmds[1])
	}
	if !strings.HasSuffix(cmds[2].text, "}'") || cmds[2].line != 6 {
		t.Errorf("third: %+v", cmds[2])
	}
	if cmds[3].text != "d" || len(cmds[2].expect)+len(cmds[3].expect) != 0 {
		t.Errorf("fourth: %+v", cmds[3])
	}
}

// TestParseParts: a block may go on in a later ```sh block (part=N), in the
// same shell, prose and skipped blocks between: its commands are the first
// part's, then the later part's; a part out of order, after another run
// block, or with attributes of its own is an error.
func TestParseParts(t *testing.T) {
	doc := func(body string) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "d.md"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	const fence = "```"
	root := doc("<!-- quickstart x wait=127.0.0.1:1 -->\n" + fence + "sh\nserve &\n" + fence + "\nprose\n\n" +
		"<!-- quickstart-skip: not this one -->\n" + fence + "sh\nz\n" + fence + "\n" +
		"<!-- quickstart x part=2 -->\n" + fence + "sh\nf() { echo; }\nf\n# shown\n" + fence + "\n")
	blocks, bare, err := parseDoc(root, "d.md")
	if err != nil || len(bare) != 0 || len(blocks) != 1 {
		t.Fatalf("blocks %+v, bare %v, err %v", blocks, bare, err)
	}
	b := blocks[0]
	var got []string
	for _, c := range b.cmds {
		got = append(got, fmt.Sprintf("%d:%s%v", c.line, c.text, c.expect))
	}
	if want := "[3:serve &[] 13:f() { echo; }[] 14:f[shown]]"; fmt.Sprint(got) != want || fmt.Sprint(b.wait) != "[127.0.0.1:1]" || b.line != 2 {
		t.Errorf("block at line %d, wait %v, commands %q; want line 2, wait [127.0.0.1:1], %s", b.line, b.wait, got, want)
	}
	for _, bad := range []string{
		"<!-- quickstart x part=2 -->\n" + fence + "sh\na\n" + fence + "\n",                                                                      // no part 1
		"<!-- quickstart x -->\n" + fence + "sh\na\n" + fence + "\n<!-- quickstart x part=3 -->\n" + fence + "sh\nb\n" + fence + "\n",            // a part skipped
		"<!-- quickstart x -->\n" + fence + "sh\na\n" + fence + "\n<!-- quickstart x part=2 timeout=1s -->\n" + fence + "sh\nb\n" + fence + "\n", // attributes of its own
		"<!-- quickstart x -->\n" + fence + "sh\na\n" + fence + "\n<!-- quickstart x -->\n" + fence + "sh\nb\n" + fence + "\n",
		"<!-- quickstart x -->\n" + fence + "sh\na\n" + fence + "\n<!-- quickstart y -->\n" + fence + "sh\nb\n" + fence + "\n<!-- quickstart x part=2 -->\n" + fence + "sh\nc\n" + fence + "\n", // another block between
		"<!-- quickstart x -->\n" + fence + "sh\na\n" + fence + "\n<!-- quickstart x part=02 -->\n" + fence + "sh\nb\n" + fence + "\n",                                                          // not N
		"<!-- quickstart x part=1 -->\n" + fence + "sh\na\n" + fence + "\n",                                                                                                                     // part 1 is unmarked                   // the same name twice
	} {
		if _, _, err := parseDoc(doc(bad), "d.md"); err == nil {
			t.Errorf("no error for\n%s", bad)
		}
	}
}
