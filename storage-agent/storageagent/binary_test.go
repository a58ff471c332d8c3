package storageagent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sophon-dl/sophon/internal/tlsconf"
	"github.com/sophon-dl/sophon/storage-agent/dataset/datasettest"

	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// TestBinary runs the storage-agent command (built once, storageBinary).
func TestBinary(t *testing.T) {
	bin := storageBinary(t)
	t.Run("serve", func(t *testing.T) { testBinaryServe(t, bin) })
	t.Run("rejects", func(t *testing.T) { testBinaryRejects(t, bin) })
	t.Run("sigterm starting", func(t *testing.T) { testBinarySIGTERMStarting(t, bin) })
}

// testBinaryServe starts the agent on loopback with a config file and
// flags, fetches over gRPC, scrapes its metrics, and stops it with SIGTERM.
func testBinaryServe(t *testing.T, bin string) {
	dir := t.TempDir()

	if out, err := exec.Command(bin, "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "Example:") || !strings.Contains(string(out), "--cpus") {
		t.Errorf("--help: %v\n%s", err, out)
	}

	data := testData(t)
	addr, metrics := testutil.FreeAddr(t), testutil.FreeAddr(t)
	cfgFile := filepath.Join(dir, "agent.yaml")
	// The file's listen address is overridden by the flag.
	datasettest.WriteFile(t, cfgFile, []byte("data: "+data+"\nlisten: 127.0.0.1:1\ncpus: 1.5\nname: bin-agent\nrequest-timeout: 10s\nmetrics: "+metrics+"\n"))
	// The default start is mutual TLS: certificates from the certs
	// subcommand.
	certs := filepath.Join(dir, "certs")
	if out, err := exec.Command(bin, "certs", "--out", certs, "--storage", "bin-agent", "--compute", "c1").CombinedOutput(); err != nil {
		t.Fatalf("certs: %v\n%s", err, out)
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--config", cfgFile, "--listen", addr, "--log-format", "json", "--shutdown-grace", "2s",
		"--tls-cert", filepath.Join(certs, "storage-bin-agent.pem"), "--tls-key", filepath.Join(certs, "storage-bin-agent-key.pem"),
		"--tls-ca", filepath.Join(certs, "ca.pem"))
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			cmd.Process.Kill()
			<-exited
		}
	}()

	computeFiles := tlsconf.Files{Cert: filepath.Join(certs, "compute-c1.pem"), Key: filepath.Join(certs, "compute-c1-key.pem"), CA: filepath.Join(certs, "ca.pem")}
	tc, err := computeFiles.Client(tlsconf.Expect{Cluster: "sophon", Role: tlsconf.RoleStorage, Name: "bin-agent"})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := dataplanepb.NewStorageClient(conn)
	var info *dataplanepb.InfoResponse
	for deadline := time.Now().Add(10 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err = client.Info(ctx, &dataplanepb.InfoRequest{}, grpc.WaitForReady(true))
		cancel()
		if err == nil {
			break
		}
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("agent exited early: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not answering: %v\n%s", err, logs.String())
		}
	}
	if info.Node != "bin-agent" || info.Cpus != 1.5 || info.Samples != testSamples {
		t.Errorf("Info = %v", info)
	}
	id := preset(t, "imagenet-train").ID()
	got := fetchAll(t, client, []*dataplanepb.FetchRequest{
		{Tag: 1, Sample: 2, Split: 5, PipelineId: id},
		{Tag: 2, Sample: badSample, Split: 5, PipelineId: id},
	})
	if got[1].Error != nil || len(got[1].Data) == 0 {
		t.Errorf("fetch: %v", got[1].Error)
	}
	if e := got[2].Error; e == nil || e.Kind != dataplanepb.ErrorKind_ERROR_KIND_NOT_JPEG {
		t.Errorf("bad sample: %v, want NOT_JPEG", e)
	}
	// A plaintext client is refused, and the refusal logged.
	plain, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err = dataplanepb.NewStorageClient(plain).Info(ctx, &dataplanepb.InfoRequest{})
	cancel()
	plain.Close()
	if err == nil {
		t.Error("a plaintext client was served")
	}

	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `sophon_storage_samples_total{split="5"} 1`) {
		t.Errorf("metrics lack the fetched sample:\n%s", body)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("agent still running 5 s after SIGTERM\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "tls handshake rejected") {
		t.Errorf("no warn line for the plaintext client:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "storage agent stopped") {
		t.Errorf("no shutdown log line:\n%s", logs.String())
	}
}

// testBinaryRejects checks that a bad invocation fails fast.
func testBinaryRejects(t *testing.T, bin string) {
	for _, args := range [][]string{
		{},                               // no --data
		{"--data", os.DevNull + "/nope"}, // no such directory
		{"--data", t.TempDir(), "--cpus", "-1"},
		{"--bogus"},
		{"--config", filepath.Join(t.TempDir(), "missing.yaml")},
		{"certs"}, // no --out
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Errorf("%v: %v, want a non-zero exit\n%s", args, err, out)
		}
	}
	// Without certificates the default start refuses, saying how to get them.
	out, err := exec.Command(bin, "--data", testData(t)).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Errorf("no certificates: %v, want a non-zero exit\n%s", err, out)
	}
	for _, hint := range []string{"make certs", "storage-agent certs", "--insecure"} {
		if !strings.Contains(string(out), hint) {
			t.Errorf("no certificates: the message lacks %q:\n%s", hint, out)
		}
	}
}
