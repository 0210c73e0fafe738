package rmqio

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/rmqflow/rmqflow/rmqfake"
)

// TestReadRefusedCredentials: a broker that refuses the job's credentials
// (a wrong secret) fails the job at once: the pipeline's run returns an
// error that names the credentials to fix (before: the job failed with the
// broker's "UNAUTHORIZED ... check signature failed" deep in the bundle's
// error, not saying which setting it was).
func TestReadRefusedCredentials(t *testing.T) {
	s := rmqfake.NewForTest(t, rmqfake.WithProjectFixtures(), rmqfake.Credentials("rmqio-ak", "right-secret"))
	closeReaders(t)
	t.Setenv("RMQIO_AUTH_AK", "rmqio-ak")
	t.Setenv("RMQIO_AUTH_SK", "wrong-secret")
	conn := Connection{Endpoints: s.Addr(), AccessKeyEnv: "RMQIO_AUTH_AK", SecretKeyEnv: "RMQIO_AUTH_SK"}
	p, sc := beam.NewPipelineWithRoot()
	beam.ParDo(sc, &recordFn{Label: "refused"}, Read(sc, ReadConfig{Connection: conn, MainTopic: "rmqflow-beam-a",
		Group: "rmqflow-beam-a-g", MaxBundleTime: 200 * time.Millisecond, StopAfterIdle: 5 * time.Second}))
	start := time.Now()
	err := ptest.Run(p)
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil {
		t.Fatal("the job with a refused credential succeeded")
	}
	if msg := err.Error(); !strings.Contains(msg, "refused the credentials of RMQIO_AUTH_AK and RMQIO_AUTH_SK") {
		t.Errorf("job error %q: want rmqio's, naming the refused credentials", msg)
	}
}
