package rmqkuiper

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestDefaultSourceYAMLListsEveryOption: every stream option the source
// reads (its p.<kind>("key") calls, and the env-var keys) is in
// DefaultSourceYAML's default section, commented out or not, and in
// docs/sql.md's table; and the YAML lists no key the source does not read.
func TestDefaultSourceYAMLListsEveryOption(t *testing.T) {
	call := regexp.MustCompile(`p\.[a-z]+\("([a-z][a-z-]*)"\)`)
	read := map[string]bool{"access-key-env": true, "secret-key-env": true}
	for _, f := range []string{"source.go", "valve.go", "conf.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(b), -1) {
			if !commonSourceKeys[m[1]] {
				read[m[1]] = true
			}
		}
	}
	yamlKey := regexp.MustCompile(`(?m)^\s+#?\s*([a-z][a-z-]*):`)
	listed := map[string]bool{}
	for _, m := range yamlKey.FindAllStringSubmatch(DefaultSourceYAML, -1) {
		listed[m[1]] = true
	}
	doc, err := os.ReadFile("../../docs/sql.md")
	if err != nil {
		t.Fatal(err)
	}
	var missing, extra, undocumented []string
	for k := range read {
		if !listed[k] {
			missing = append(missing, k)
		}
		if !strings.Contains(string(doc), "`"+k+"`") {
			undocumented = append(undocumented, k)
		}
	}
	for k := range listed {
		if !read[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	sort.Strings(undocumented)
	if len(missing)+len(extra)+len(undocumented) > 0 {
		t.Errorf("DefaultSourceYAML lacks %v and lists unknown %v; docs/sql.md lacks %v", missing, extra, undocumented)
	}
}
