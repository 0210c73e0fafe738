package main

import (
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/rmqflow/rmqflow/internal/rmqtest"
)

// TestLiteDispatchCommand: lite-dispatch's exit codes as its help lists
// them: 2 for missing flags, 3 when nothing answers at -broker, and on the
// real broker 4 for an unknown group, 1 for a group that is not a lite
// group, 0 for a wildcard lite group, with -json lines that carry the
// broker's code and remark. consume refuses -lite-dispatch-broker outside
// lite mode.
func TestLiteDispatchCommand(t *testing.T) {
	realEP, addr := os.Getenv(rmqtest.EnvEndpoint), rmqtest.BrokerAddr()
	clearEnv(t)
	for _, args := range [][]string{
		{"lite-dispatch", "-group", "g"},
		{"lite-dispatch", "-broker", "127.0.0.1:1"},
		{"lite-dispatch", "-broker", "127.0.0.1:1", "-group", "g", "-timeout", "0s"},
		{"consume", "-endpoint", "127.0.0.1:1", "-mode", "simple", "-topic", "t", "-group", "g", "-lite-dispatch-broker", "127.0.0.1:1"},
	} {
		if code, _, stderr := runCLI(t, "", args...); code != exitUsage {
			t.Errorf("%v: exit %d, want 2; stderr %s", args, code, stderr)
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	lis.Close()
	if code, _, stderr := runCLI(t, "", "lite-dispatch", "-broker", closed, "-group", "g"); code != exitUnreachable || !strings.Contains(stderr, closed) {
		t.Errorf("nothing at -broker: exit %d, want 3 naming %s; stderr %s", code, closed, stderr)
	}

	t.Run("broker", func(t *testing.T) {
		if realEP == "" {
			rmqtest.Endpoint(t) // skips or fails as every real-broker test does
		}
		for _, c := range []struct {
			group string
			code  int
			resp  int // the broker's response code
		}{
			{"rmqflow-no-such-group-cli", exitNotFound, 26},
			{"rmqflow-normal-kick-g", exitFailure, 29},
			{"rmqflow-lite-kick-group-g", exitOK, 0}, // scenario aa's kicked group: one more kick changes nothing
		} {
			code, stdout, stderr := runCLI(t, "", "lite-dispatch", "-broker", addr, "-group", c.group, "-json")
			var out struct {
				OK     bool   `json:"ok"`
				Code   *int   `json:"code"`
				Remark string `json:"remark"`
				Group  string `json:"group"`
			}
			if err := json.Unmarshal([]byte(stdout), &out); err != nil {
				t.Errorf("%s: -json output %q: %v", c.group, stdout, err)
				continue
			}
			got := 0
			if out.Code != nil {
				got = *out.Code
			}
			if code != c.code || got != c.resp || out.OK != (c.code == exitOK) || out.Group != c.group || (c.resp != 0 && !strings.Contains(out.Remark, c.group)) {
				t.Errorf("%s: exit %d %+v, want exit %d with response code %d; stdout %s stderr %s", c.group, code, out, c.code, c.resp, stdout, stderr)
			}
		}
		code, stdout, stderr := runCLI(t, "", "lite-dispatch", "-broker", addr, "-group", "rmqflow-lite-kick-group-g")
		if code != exitOK || !strings.Contains(stdout, "dispatched lite group rmqflow-lite-kick-group-g") {
			t.Errorf("plain: exit %d, stdout %q stderr %q", code, stdout, stderr)
		}
	})
}
