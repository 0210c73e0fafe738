package rmqkuiper

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lf-edge/ekuiper/contract/v2/api"
	"github.com/lf-edge/ekuiper/v2/pkg/model"
	"github.com/lf-edge/ekuiper/v2/pkg/modules"
)

// localSinks are eKuiper's built-in sinks (v2.4.0, -tags core and the
// default build) that act on the server's host rather than over the
// network, with what each does there. The others: rest, mqtt, redis and
// redisPub call the network (rest refuses private addresses unless
// basic.enablePrivateNet); log and logToMemory write to eKuiper's own log
// or memory; memory hands rows to other rules in the process; nop drops
// them; rocketmq and rocketmq_ack are this module's.
var localSinks = map[string]string{
	"file":      "it writes files on the server's host",
	"neuron":    "it talks to a socket of the server's host (nng, ipc:// by default)",
	"websocket": "it serves the rule's rows on the httppush listener to any websocket client, web pages of any origin included",
	"sse":       "it serves the rule's rows on the httppush listener to any client, web pages of any origin included",
}

// localSources are the same for eKuiper's built-in sources. The others:
// mqtt, httppull and redisSub read the network; memory reads other rules;
// simulator and nexmark generate rows; rocketmq is this module's.
var localSources = map[string]string{
	"file":      "it reads (and with actionAfterRead moves or deletes) files of the server's host",
	"neuron":    "it talks to a socket of the server's host (nng, ipc:// by default)",
	"httppush":  "it takes rows from any client of the httppush listener, web pages of any origin included (no credential, any CORS origin)",
	"websocket": "it takes rows from any websocket client of the httppush listener, web pages of any origin included",
}

// HostAccess is which of eKuiper's sinks and sources that act on the
// server's host (docs/sql.md lists them) rules may use; GuardHostAccess
// applies it.
type HostAccess struct {
	// Sinks and Sources are the local sinks and sources allowed. Empty:
	// none.
	Sinks, Sources []string
	// FileDir is the directory the file sink writes under, required when
	// Sinks has "file": a relative path of an action is taken under it,
	// and an absolute one must lie under it.
	FileDir string
	// SinksSetting, SourcesSetting and FileDirSetting name the settings
	// that set the three fields, in the refusals. Empty: "HostAccess.Sinks"
	// and so on.
	SinksSetting, SourcesSetting, FileDirSetting string
}

// GuardHostAccess replaces eKuiper's local sinks and sources that h does
// not allow by ones that refuse to be provisioned (creating a rule that
// uses one fails, naming it and the setting), and an allowed file sink by
// one that writes only under h.FileDir. Call it after every module is
// registered (rmqflow-sql calls it before eKuiper starts).
func GuardHostAccess(h HostAccess) error {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&h.SinksSetting, "HostAccess.Sinks")
	def(&h.SourcesSetting, "HostAccess.Sources")
	def(&h.FileDirSetting, "HostAccess.FileDir")
	for _, k := range h.Sinks {
		if _, ok := localSinks[k]; !ok {
			return fmt.Errorf("%s: %q is not one of eKuiper's local sinks (%s)", h.SinksSetting, k, strings.Join(sortedKeys(localSinks), ", "))
		}
	}
	for _, k := range h.Sources {
		if _, ok := localSources[k]; !ok {
			return fmt.Errorf("%s: %q is not one of eKuiper's local sources (%s)", h.SourcesSetting, k, strings.Join(sortedKeys(localSources), ", "))
		}
	}
	for k, why := range localSinks {
		if _, registered := modules.Sinks[k]; !registered {
			continue
		}
		if !slices.Contains(h.Sinks, k) {
			err := fmt.Errorf("sink %q is refused: %s; %s names the local sinks rules may use (docs/sql.md)", k, why, h.SinksSetting)
			modules.Sinks[k] = func() api.Sink { return refusedSink{err} }
		}
	}
	if slices.Contains(h.Sinks, "file") {
		if h.FileDir == "" {
			return fmt.Errorf("%s names the file sink: set %s, the directory it writes under", h.SinksSetting, h.FileDirSetting)
		}
		real, err := fileDir(h.FileDir)
		if err != nil {
			return fmt.Errorf("%s: %w", h.FileDirSetting, err)
		}
		newFile := modules.Sinks["file"]
		if newFile == nil {
			return fmt.Errorf("%s names the file sink, which this build has not", h.SinksSetting)
		}
		inner, ok := newFile().(fileSinkAPI)
		if !ok {
			return errors.New("eKuiper's file sink is not the one the guard knows (a bytes collector and stream writer)")
		}
		switch inner.(type) {
		case model.SinkInfoNode, model.PropsConsumer:
			return errors.New("eKuiper's file sink has an interface the guard would hide: update hostio.go")
		}
		modules.Sinks["file"] = func() api.Sink {
			return &fileSinkGuard{fileSinkAPI: newFile().(fileSinkAPI), dir: filepath.Clean(h.FileDir), real: real, setting: h.FileDirSetting}
		}
	} else if h.FileDir != "" {
		return fmt.Errorf("%s is set but %s does not name the file sink", h.FileDirSetting, h.SinksSetting)
	}
	for k, why := range localSources {
		if _, registered := modules.Sources[k]; !registered {
			continue
		}
		if !slices.Contains(h.Sources, k) {
			err := fmt.Errorf("source %q is refused: %s; %s names the local sources rules may use (docs/sql.md)", k, why, h.SourcesSetting)
			modules.Sources[k] = func() api.Source { return refusedSource{err} }
		}
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

// fileDir is dir made absolute with its symbolic links resolved; it must
// be an existing directory.
func fileDir(dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("%q is not an absolute path", dir)
	}
	d, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(d)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	return d, nil
}

// refusedSink is a local sink the configuration does not allow: it cannot
// be provisioned.
type refusedSink struct{ err error }

func (r refusedSink) Provision(api.StreamContext, map[string]any) error        { return r.err }
func (r refusedSink) Connect(api.StreamContext, api.StatusChangeHandler) error { return r.err }
func (r refusedSink) Collect(api.StreamContext, api.RawTuple) error            { return r.err }
func (r refusedSink) Close(api.StreamContext) error                            { return nil }

// refusedSource is the same for a source.
type refusedSource struct{ err error }

func (r refusedSource) Provision(api.StreamContext, map[string]any) error        { return r.err }
func (r refusedSource) Connect(api.StreamContext, api.StatusChangeHandler) error { return r.err }
func (r refusedSource) Close(api.StreamContext) error                            { return nil }
func (r refusedSource) Subscribe(api.StreamContext, api.BytesIngest, api.ErrorIngest) error {
	return r.err
}

// fileSinkAPI is what eKuiper's file sink implements (v2.4.0).
type fileSinkAPI interface {
	api.BytesCollector
	model.StreamWriter
}

// fileSinkGuard is eKuiper's file sink with its path checked: under dir
// (real once its links are resolved).
type fileSinkGuard struct {
	fileSinkAPI
	dir, real, setting string
}

func (g *fileSinkGuard) Provision(ctx api.StreamContext, props map[string]any) error {
	p, err := underDir(g.dir, g.real, props["path"])
	if err != nil {
		return fmt.Errorf("file sink: %w (%s is %s)", err, g.setting, g.dir)
	}
	c := maps.Clone(props)
	c["path"] = p
	return g.fileSinkAPI.Provision(ctx, c)
}

// underDir is the file sink's path v made absolute under dir (a relative
// one is taken under dir; eKuiper's own default is "cache"), or why it is
// refused: a template (eKuiper would evaluate it per row), a path outside
// dir or dir itself, or one whose existing part leads out of dir through a
// symbolic link (real is dir with its links resolved).
func underDir(dir, real string, v any) (string, error) {
	if v == nil {
		v = "cache"
	}
	s, ok := v.(string)
	if !ok || s == "" {
		return "", fmt.Errorf("path: want a file name, got %v", v)
	}
	if strings.Contains(s, "{{") {
		return "", fmt.Errorf("path %q: a template is refused (the path must be fixed, to be checked)", s)
	}
	p := s
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	p = filepath.Clean(p)
	if !inside(dir, p) && !inside(real, p) {
		return "", fmt.Errorf("path %q is not a file under the directory", s)
	}
	// The longest existing ancestor, its links resolved, must still be in
	// the directory.
	for a := filepath.Dir(p); ; a = filepath.Dir(a) {
		r, err := filepath.EvalSymlinks(a)
		if err == nil {
			if r != real && !inside(real, r) {
				return "", fmt.Errorf("path %q leads out of the directory through a symbolic link", s)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || a == filepath.Dir(a) {
			return "", fmt.Errorf("path %q: %w", s, err)
		}
	}
	return p, nil
}

// inside reports whether p is strictly under dir (both clean and absolute).
func inside(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
