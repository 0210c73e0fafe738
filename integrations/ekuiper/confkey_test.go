package rmqkuiper_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUnknownConfKey: a stream whose CONF_KEY names no section of
// etc/sources/rocketmq.yaml does not fall back to "default" (which points
// at another broker here): its rule is stopped by error naming the key and
// the file. A section added while the server runs, after eKuiper read the
// file, is not read: its rule is stopped by error saying to restart the
// server, which then reads it.
func TestUnknownConfKey(t *testing.T) {
	t.Parallel()
	tg := fakeTarget(t, "ck", false)
	home := t.TempDir()
	other := map[string]any{"endpoints": "127.0.0.1:1", "consumer-group": "elsewhere-g"}
	sections := map[string]map[string]any{"default": other, "test": tg.sourceSection()}
	sourceSections(t, home, sections)
	file := filepath.Join(home, "etc", "sources", "rocketmq.yaml")
	srv := startOn(t, tg, home)
	sql := "SELECT n, meta(rocketmq_lite_topic) AS session, meta(rocketmq_seq) AS rocketmq_seq FROM "
	srv.stream("s", tg.in, "test")
	srv.rule("known", sql+"s", []map[string]any{tg.sinkAction(nil)}, nil)
	srv.waitRunning("known")

	stopped := func(id, stream string, want ...string) string {
		t.Helper()
		var last string
		eventually(t, 60*time.Second, "rule "+id+" stopped naming "+strings.Join(want, ", "), func() (bool, string) {
			st := srv.status(id)
			b, _ := json.Marshal(st)
			last = string(b)
			for _, w := range want {
				if !strings.Contains(last, w) {
					return false, last
				}
			}
			return st["status"] != "running", last
		})
		return fmt.Sprint(srv.status(id)["source_"+stream+"_0_last_exception"])
	}
	srv.stream("u", tg.in, "nope")
	srv.rule("unknown", sql+"u", []map[string]any{tg.sinkAction(nil)}, nil)
	t.Logf("unknown CONF_KEY: %s", stopped("unknown", "u", `\"nope\"`, file))

	sections["late"] = tg.sourceSection()
	sourceSections(t, home, sections)
	srv.stream("l", tg.in, "late")
	srv.rule("late", sql+"l", []map[string]any{tg.sinkAction(nil)}, nil)
	t.Logf("section added while running: %s", stopped("late", "l", `\"late\"`, file, "restart"))

	// After a restart the section is read.
	srv.stop()
	srv = startServer(t, home)
	srv.waitRunning("late")
	stopped("unknown", "u", `\"nope\"`)
}
