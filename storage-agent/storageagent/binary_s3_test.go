package storageagent

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/storage-agent/dataset/datasettest"
)

// testBinarySIGTERMStarting starts the agent on a bucket whose server
// stalls its start-up at each point (the check, the listing, the hashing
// GETs) and checks that SIGTERM stops it there: it exits with 0 and a log
// line saying so.
func testBinarySIGTERMStarting(t *testing.T, bin string) {
	jpeg := datasettest.JPEG(t, 1)
	for _, c := range []struct {
		name    string
		stallAt int64
	}{{"check", 1}, {"listing", 3}, {"hashing", 0}} {
		t.Run(c.name, func(t *testing.T) {
			s := newStallingS3(t, c.stallAt, jpeg)
			var logs bytes.Buffer
			cmd := exec.Command(bin, "--data", "s3://bkt/p", "--insecure", "--listen", "127.0.0.1:0", "--index", "-", "--log-format", "json",
				"--s3-page-timeout", "1m", "--s3-list-timeout", "5m")
			cmd.Env = append(os.Environ(), "AWS_ENDPOINT_URL="+s.srv.URL, "AWS_REGION=us-east-1",
				"AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s", "AWS_SESSION_TOKEN=", "AWS_PROFILE=")
			cmd.Stdout, cmd.Stderr = &logs, &logs
			datasettest.Must(t, cmd.Start())
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case what := <-s.stalled:
				t.Logf("stalled %s", what)
			case err := <-exited:
				t.Fatalf("the agent exited before the stall: %v\n%s", err, logs.String())
			}
			datasettest.Must(t, cmd.Process.Signal(syscall.SIGTERM))
			sent := time.Now()
			select {
			case err := <-exited:
				took := time.Since(sent)
				t.Logf("exited %v after SIGTERM (%d requests)", took, s.requests.Load())
				if err != nil {
					t.Errorf("exit after SIGTERM: %v\n%s", err, logs.String())
				}
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-exited
				t.Fatalf("the agent still ran 10 s after SIGTERM\n%s", logs.String())
			}
			if !strings.Contains(logs.String(), "start-up stopped by signal") {
				t.Errorf("no log line for the stopped start-up:\n%s", logs.String())
			}
		})
	}
}
