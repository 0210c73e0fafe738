package rmqflow_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsNameRealTests: every test, benchmark, fuzz target or example the
// README and docs/ cite as pinning a claim (`TestX`, `pkg.TestX`, ...) exists
// in the repository, and so does every conformance scenario the scenario
// table of docs/broker-semantics.md names. A renamed or deleted test makes
// the claim unpinned; this catches it.
func TestDocsNameRealTests(t *testing.T) {
	funcs := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (?:\([^)]*\) )?([A-Za-z_][A-Za-z0-9_]*)[\[(]`)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".cache" || d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			funcs[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	docs := []string{"README.md"}
	more, _ := filepath.Glob("docs/*.md")
	docs = append(docs, more...)
	cited := regexp.MustCompile("`(?:[a-z]+\\.)?((?:Test|Benchmark|Fuzz|Example)[A-Z][A-Za-z0-9_]*)`")
	scenario := regexp.MustCompile("(?m)^\\| [a-z] \\| [^|]+\\| `([A-Za-z]+)` \\|")
	n := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range cited.FindAllStringSubmatch(string(b), -1) {
			n++
			if !funcs[m[1]] {
				t.Errorf("%s cites %s, which no Go file declares", doc, m[1])
			}
		}
		if doc == filepath.Join("docs", "broker-semantics.md") {
			for _, m := range scenario.FindAllStringSubmatch(string(b), -1) {
				n++
				if !funcs[m[1]] {
					t.Errorf("%s's scenario table names %s, which conformance/ does not declare", doc, m[1])
				}
			}
		}
	}
	t.Logf("%d citations checked", n)
	if n < 50 {
		t.Errorf("found only %d citations: the pattern no longer matches the docs", n)
	}
}

// TestCoreDependencies pins "the core module may depend only on gRPC,
// protobuf, the official stubs and the OpenTelemetry API": the non-test
// packages (the library, client, rmqfake and the CLI) build from those
// modules and their own dependencies only; the OpenTelemetry SDK is a test
// dependency.
func TestCoreDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", ".", "./client", "./rmqfake", "./cmd/rmqflow").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := map[string]bool{
		"github.com/rmqflow/rmqflow":                   true,
		"github.com/apache/rocketmq-clients/golang/v5": true, // the generated stubs only
		"google.golang.org/grpc":                       true,
		"google.golang.org/protobuf":                   true,
		"google.golang.org/genproto/googleapis/rpc":    true, // gRPC's status protos
		"go.opentelemetry.io/otel":                     true,
		"go.opentelemetry.io/otel/metric":              true,
		"golang.org/x/net":                             true, // gRPC's
		"golang.org/x/sys":                             true,
		"golang.org/x/text":                            true,
	}
	for _, m := range strings.Fields(string(out)) {
		if !allowed[m] {
			t.Errorf("a non-test package depends on module %s", m)
		}
	}
	pkgs, err := exec.Command("go", "list", "-deps", ".", "./client", "./rmqfake", "./cmd/rmqflow").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range strings.Fields(string(pkgs)) {
		if strings.HasPrefix(p, "github.com/apache/rocketmq-clients/golang/v5") && p != "github.com/apache/rocketmq-clients/golang/v5/protocol/v2" {
			t.Errorf("a non-test package imports %s beyond the official stubs", p)
		}
	}
}
