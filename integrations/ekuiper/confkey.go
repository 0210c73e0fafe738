package rmqkuiper

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// sourceFile is the rocketmq source's configuration file as eKuiper reads
// it: Config.SourceFile, else $KuiperBaseKey/etc/sources/rocketmq.yaml.
func sourceFile() string {
	restMu.RLock()
	f := restCfg.SourceFile
	restMu.RUnlock()
	if f != "" {
		return f
	}
	return filepath.Join(os.Getenv("KuiperBaseKey"), "etc", "sources", "rocketmq.yaml")
}

// streamDef is the part of GET /streams/{name} the CONF_KEY check reads.
type streamDef struct {
	Options struct {
		ConfKey string `json:"confKey"`
	} `json:"Options"`
}

// errNoStream is GET /streams/{name} answering 404: the source runs under
// a node name that is no stream's (a shared stream's subtopology).
var errNoStream = errors.New("no such stream")

// fetchStream gets GET /streams/{name}, retrying while the REST API is not
// up yet, until ctx ends.
func fetchStream(ctx context.Context, name string) (streamDef, error) {
	u := ruleAPI() + "/streams/" + url.PathEscape(name)
	var last error
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		var d streamDef
		err := getJSON(ctx, u, &d)
		if err == nil {
			return d, nil
		}
		var st *statusError
		if errors.As(err, &st) && st.code == http.StatusNotFound {
			return d, errNoStream
		}
		last = err
		select {
		case <-ctx.Done():
			return streamDef{}, fmt.Errorf("rocketmq: reading stream %s from %s: %w", name, u, last)
		case <-time.After(wait):
		}
	}
}

// checkConfKey refuses a stream whose CONF_KEY eKuiper did not find: it then
// hands the source the "default" section alone, without a word (a warning
// in its log), and the rule runs against another broker or group. eKuiper
// reads etc/sources/rocketmq.yaml once per process, when a rule over a
// rocketmq stream is first planned, so a section added (or changed) after
// that is not seen either: the section as the file holds it now must be
// what the source was handed (props), key by key. A key only eKuiper's data
// store holds (a conf key added over the metadata REST API of a build
// without -tags core) passes when that API lists it.
func checkConfKey(ctx context.Context, stream string, props map[string]any) error {
	d, err := fetchStream(ctx, stream)
	if errors.Is(err, errNoStream) {
		return nil
	}
	if err != nil {
		return err
	}
	key := d.Options.ConfKey
	if key == "" || key == "default" {
		return nil
	}
	file := sourceFile()
	sections, err := readSections(file)
	if err != nil {
		return fmt.Errorf("rocketmq: stream %s: CONF_KEY %q: %w", stream, key, err)
	}
	sec, ok := sections[strings.ToLower(key)]
	if !ok {
		if storedConfKey(ctx, key) {
			return nil
		}
		names := sortedSectionNames(sections)
		return &ConfError{Key: "CONF_KEY", Reason: fmt.Sprintf("stream %s: no section %q in %s (its sections: %s), and eKuiper would use \"default\" alone; "+
			"add the section and restart the server: %s", stream, key, file, strings.Join(names, ", "), whenRead)}
	}
	want := map[string]any{}
	for k, v := range sections["default"] {
		want[k] = v
	}
	for k, v := range sec {
		want[k] = v
	}
	for _, k := range sortedAnyKeys(want) {
		if commonSourceKeys[k] {
			continue
		}
		if got, has := props[k]; !has || !sameValue(got, want[k]) {
			return &ConfError{Key: "CONF_KEY", Reason: fmt.Sprintf("stream %s: section %q of %s differs from what the server read (key %s): "+
				"it was added or changed since, and %s; restart the server to read it", stream, key, file, k, whenRead)}
		}
	}
	return nil
}

// whenRead says when eKuiper (v2.4.0) reads the file: it caches it at the
// first read of the process (LoadConfigCache).
const whenRead = "eKuiper reads the file once per run of the server, when a rule over a rocketmq stream is first created or started"

// readSections reads the sections of a rocketmq.yaml, names and keys in
// lower case as eKuiper reads them.
func readSections(file string) (map[string]map[string]any, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]map[string]any{}, nil
	} else if err != nil {
		return nil, err
	}
	var raw map[string]map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	out := make(map[string]map[string]any, len(raw))
	for name, sec := range raw {
		m := make(map[string]any, len(sec))
		for k, v := range sec {
			m[strings.ToLower(k)] = v
		}
		out[strings.ToLower(name)] = m
	}
	return out, nil
}

// storedConfKey reports whether eKuiper's metadata REST API (builds without
// -tags core) lists key among the rocketmq source's conf keys.
func storedConfKey(ctx context.Context, key string) bool {
	var m map[string]any
	if err := getJSON(ctx, ruleAPI()+"/metadata/sources/yaml/rocketmq", &m); err != nil {
		return false
	}
	_, ok := m[key]
	return ok
}

func sortedSectionNames(m map[string]map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

func sortedAnyKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

// sameValue compares a value eKuiper handed the source with one read from
// the file: numbers by value, anything else by its text.
func sameValue(a, b any) bool {
	fa, aNum := number(a)
	fb, bNum := number(b)
	if aNum && bNum {
		return fa == fb
	}
	return fmt.Sprint(a) == fmt.Sprint(b)
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float64:
		return x, true
	case int32:
		return float64(x), true
	case float32:
		return float64(x), true
	case uint32:
		return float64(x), true
	}
	return 0, false
}
