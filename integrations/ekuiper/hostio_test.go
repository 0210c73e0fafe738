package rmqkuiper

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnderDir: the file sink's path is taken under its directory, and
// refused when it is a template, the directory itself, outside it (.. or
// absolute) or leads out through a symbolic link.
func TestUnderDir(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for v, want := range map[any]string{
		nil:                                   filepath.Join(dir, "cache"),
		"out.txt":                             filepath.Join(dir, "out.txt"),
		"sub/deeper/out.txt":                  filepath.Join(dir, "sub/deeper/out.txt"),
		filepath.Join(dir, "a.txt"):           filepath.Join(dir, "a.txt"),
		"../x.txt":                            "not a file under",
		filepath.Join(outside, "x.txt"):       "not a file under",
		dir:                                   "not a file under",
		".":                                   "not a file under",
		"link/x.txt":                          "symbolic link",
		"link/new/x.txt":                      "symbolic link",
		"{{.session}}.txt":                    "template",
		filepath.Join(dir, "{{.a}}", "x.txt"): "template",
		42:                                    "want a file name",
		"":                                    "want a file name",
	} {
		got, err := underDir(dir, dir, v)
		switch {
		case strings.HasPrefix(want, "/"):
			if err != nil || got != want {
				t.Errorf("%v: %q, %v; want %q", v, got, err, want)
			}
		case err == nil || !strings.Contains(err.Error(), want):
			t.Errorf("%v: %q, %v; want an error saying %q", v, got, err, want)
		}
	}
}
