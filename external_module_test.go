package rmqflow_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// externalModuleCode is a small user package per integration: it imports the
// integration (and its engine) as a service of one's own would.
var externalModuleCode = map[string]string{
	"watermill": `package myservice

import (
	"github.com/ThreeDotsLabs/watermill/message"
	rmqwatermill "github.com/rmqflow/rmqflow/integrations/watermill"
)

var _ message.Subscriber = (*rmqwatermill.Subscriber)(nil)
`,
	"benthos": `package myservice

import (
	"github.com/redpanda-data/benthos/v4/public/service"
	rmqbenthos "github.com/rmqflow/rmqflow/integrations/benthos"
)

func Env() (*service.Environment, error) {
	env := service.NewEmptyEnvironment()
	return env, rmqbenthos.Register(env)
}
`,
	"beam": `package myservice

import (
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	rmqio "github.com/rmqflow/rmqflow/integrations/beam"
)

func Pipeline(cfg rmqio.ReadConfig) *beam.Pipeline {
	p, s := beam.NewPipelineWithRoot()
	rmqio.Read(s, cfg)
	return p
}
`,
	"ekuiper": `package myservice

import rmqkuiper "github.com/rmqflow/rmqflow/integrations/ekuiper"

func Init() { rmqkuiper.Register() }
`,
}

// TestExternalModule follows README.md's "Using rmqflow from your own
// module" exactly — its lines, run one by one in a shell, next to a checkout
// named rmqflow — for each of the four integrations (the go work line names
// the integration used, as the README says), with a package that imports it.
// The modules are not published, so this is the one way in from another
// module, and it must keep working.
func TestExternalModule(t *testing.T) {
	t.Parallel() // runs beside the other long one at the end, not on the serial path of the package
	if testing.Short() {
		t.Skip("builds four modules (-short)")
	}
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "<!-- external-module")
	if !ok {
		t.Fatal("README.md has no external-module block")
	}
	block, _, _ = strings.Cut(block, "<!-- /external-module -->")
	_, block, _ = strings.Cut(block, "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) != 4 || !strings.Contains(lines[2], "integrations/watermill") || !strings.HasPrefix(lines[3], "go build ./...") {
		t.Fatalf("README.md's external-module lines changed; update this test: %q", lines)
	}
	repo, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"watermill", "benthos", "beam", "ekuiper"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Symlink(repo, filepath.Join(dir, "rmqflow")); err != nil {
				t.Fatal(err)
			}
			run := func(wd, line string) {
				t.Helper()
				cmd := exec.Command("sh", "-c", line)
				cmd.Dir = wd
				// -race: the integrations' own suites build the same
				// packages with -race later in make test, and reuse them.
				cmd.Env = append(os.Environ(), "GOWORK=", "GOFLAGS=-race")
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%s (in %s): %v\n%s", line, wd, err, out)
				}
			}
			// Line 1 makes the module's directory and enters it; the
			// shell of each line starts where the previous one left.
			run(dir, lines[0])
			mod := filepath.Join(dir, "myservice")
			run(mod, lines[1])
			run(mod, strings.ReplaceAll(lines[2], "integrations/watermill", "integrations/"+name))
			if err := os.WriteFile(filepath.Join(mod, "svc.go"), []byte(externalModuleCode[name]), 0o644); err != nil {
				t.Fatal(err)
			}
			run(mod, lines[3])
		})
	}
}
