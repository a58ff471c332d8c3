// Package deploy renders the Kubernetes manifests of deploy/k8s from a
// values file: the storage agents as a DaemonSet on labelled storage nodes,
// and a training Job whose pods run the compute agent as a native sidecar
// beside the trainer. deploy/render is its command; docs/deploy.md says how
// to use them. The container build files (deploy/docker), the Slurm batch
// template (deploy/slurm) and the Grafana dashboard (deploy/grafana) live
// beside it and are checked by its tests.
package deploy

import (
	"bytes"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

//go:embed k8s/values.yaml k8s/*.yaml.tmpl
var files embed.FS

// ErrValues means a values file is malformed or asks for something the
// agents cannot do.
var ErrValues = errors.New("deploy: bad values")

// Values are what the manifests are rendered from; k8s/values.yaml holds the
// defaults and documents each key.
type Values struct {
	Namespace       string      `yaml:"namespace"`
	CreateNamespace bool        `yaml:"createNamespace"`
	ClusterDomain   string      `yaml:"clusterDomain"`
	Cluster         string      `yaml:"cluster"`
	Images          Images      `yaml:"images"`
	UID             int64       `yaml:"uid"`
	Secrets         SecretNames `yaml:"secrets"`
	Ports           Ports       `yaml:"ports"`
	Storage         Storage     `yaml:"storage"`
	Training        Training    `yaml:"training"`
}

// Images are the container images and their pull policy.
type Images struct {
	Storage    string `yaml:"storage"`
	Compute    string `yaml:"compute"`
	Trainer    string `yaml:"trainer"`
	PullPolicy string `yaml:"pullPolicy"`
}

// SecretNames are the names of the Secrets the pods mount.
type SecretNames struct {
	StorageTLS string `yaml:"storageTLS"`
	ComputeTLS string `yaml:"computeTLS"`
	GossipKey  string `yaml:"gossipKey"`
}

// Ports are the storage agents' gRPC port and every agent's gossip port.
type Ports struct {
	GRPC   int `yaml:"grpc"`
	Gossip int `yaml:"gossip"`
}

// Storage are the storage agents' DaemonSet values.
type Storage struct {
	NodeLabel      string   `yaml:"nodeLabel"`
	NodeLabelValue string   `yaml:"nodeLabelValue"`
	DataHostPath   string   `yaml:"dataHostPath"`
	IndexHostPath  string   `yaml:"indexHostPath"`
	CPUs           float64  `yaml:"cpus"`
	Memory         string   `yaml:"memory"`
	MetricsPort    int      `yaml:"metricsPort"`
	Pipelines      []string `yaml:"pipelines"`
	StartupSeconds int      `yaml:"startupSeconds"`
	LogLevel       string   `yaml:"logLevel"`
	// Replicas, ShardSize and Egress are --replicas, --shard-size and
	// --egress (docs/architecture.md, "Shards and replicas").
	Replicas  int    `yaml:"replicas"`
	ShardSize int    `yaml:"shardSize"`
	Egress    string `yaml:"egress"`
	// SendBuffer is --send-buffer: each connection's kernel send buffer in
	// bytes, which keeps the link busy while the CPU limit throttles the
	// agent (docs/deploy.md, "CPU limits and the send buffer").
	SendBuffer int `yaml:"sendBuffer"`
	// Manifest is the whole dataset's manifest (storage-agent manifest),
	// a path relative to dataHostPath, when each node has only part of
	// the files (--manifest); empty: every node has the whole dataset.
	Manifest string `yaml:"manifest"`
}

// Training are the training Job's values.
type Training struct {
	Name              string            `yaml:"name"`
	Nodes             int               `yaml:"nodes"`
	BackoffLimit      int               `yaml:"backoffLimit"`
	GPUs              int               `yaml:"gpus"`
	NodeSelector      map[string]string `yaml:"nodeSelector"`
	CertName          string            `yaml:"certName"`
	SocketDir         string            `yaml:"socketDir"`
	MetricsPort       int               `yaml:"metricsPort"`
	MinStorage        int               `yaml:"minStorage"`
	Pipeline          string            `yaml:"pipeline"`
	Batch             int               `yaml:"batch"`
	Policy            string            `yaml:"policy"`
	Plan              string            `yaml:"plan"`
	RingBytes         int64             `yaml:"ringBytes"`
	AgentCPU          string            `yaml:"agentCPU"`
	AgentMemory       string            `yaml:"agentMemory"`
	TrainerCommand    []string          `yaml:"trainerCommand"`
	TrainerArgs       []string          `yaml:"trainerArgs"`
	TrainerSocketFlag string            `yaml:"trainerSocketFlag"`
	TrainerCPU        string            `yaml:"trainerCPU"`
	TrainerMemory     string            `yaml:"trainerMemory"`
}

// Socket is the trainer socket's path: the compute agent's
// --trainer-socket and the trainer's $SOPHON_SOCKET.
func (t Training) Socket() string { return path.Join(t.SocketDir, "trainer.sock") }

// StartupFailures is the startup probe's failure threshold at one probe
// every 10 s: StartupSeconds, rounded up.
func (s Storage) StartupFailures() int { return (s.StartupSeconds + 9) / 10 }

// Workers is the storage agent's worker count for its --cpus: ceil(cpus),
// as storageagent sizes its pool.
func (s Storage) Workers() int64 { return int64(math.Ceil(s.CPUs)) }

// The storage agent's memory bounds per worker (storage-agent's defaults):
// its Go heap limit is 256 MiB plus 32 MiB per worker, and libjpeg may
// allocate --decode-memory (128 MiB) per decode on top.
const (
	storageHeapBase      = 256 << 20
	storageHeapPerWorker = 32 << 20
	storageDecodeMemory  = 128 << 20
	// ringHeadroom is the compute agent's own memory above its rings.
	ringHeadroom = 512 << 20
)

// MinStorageMemory is the least memory limit a storage agent with this many
// workers needs so that the kernel does not kill it before its own bounds
// apply.
func MinStorageMemory(workers int64) int64 {
	return storageHeapBase + workers*(storageHeapPerWorker+storageDecodeMemory)
}

// MinAgentMemory is the least memory limit of a compute agent with rings of
// ringBytes: the rings' pages are charged to the agent that fills them.
func MinAgentMemory(ringBytes int64) int64 { return ringBytes + ringHeadroom }

// DefaultValues returns the values of k8s/values.yaml.
func DefaultValues() Values {
	b, err := files.ReadFile("k8s/values.yaml")
	if err != nil {
		panic(err) // embedded
	}
	var v Values
	if err := decodeValues(b, &v); err != nil {
		panic(fmt.Sprintf("deploy: k8s/values.yaml: %v", err))
	}
	return v
}

// ParseValues reads a values file over the defaults: a key it leaves out
// keeps its default. Unknown keys are errors.
func ParseValues(b []byte) (Values, error) {
	v := DefaultValues()
	if err := decodeValues(b, &v); err != nil {
		return v, err
	}
	return v, v.Validate()
}

// LoadValues is ParseValues on the file at path.
func LoadValues(path string) (Values, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Values{}, err
	}
	v, err := ParseValues(b)
	if err != nil {
		return v, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

func decodeValues(b []byte, v *Values) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %v", ErrValues, err)
	}
	return nil
}

// Validate refuses values that would render manifests the API server
// rejects or agents that cannot run as asked.
func (v Values) Validate() error {
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	for _, n := range []struct{ what, v string }{
		{"namespace", v.Namespace}, {"secrets.storageTLS", v.Secrets.StorageTLS},
		{"secrets.computeTLS", v.Secrets.ComputeTLS}, {"secrets.gossipKey", v.Secrets.GossipKey},
		{"training.name", v.Training.Name},
	} {
		if e := validation.IsDNS1123Label(n.v); len(e) > 0 {
			bad("%s %q: %s", n.what, n.v, strings.Join(e, "; "))
		}
	}
	if e := validation.IsDNS1123Subdomain(v.ClusterDomain); len(e) > 0 {
		bad("clusterDomain %q: %s", v.ClusterDomain, strings.Join(e, "; "))
	}
	for _, n := range []struct{ what, v string }{{"cluster", v.Cluster}, {"training.certName", v.Training.CertName}} {
		if !plainLabel(n.v) {
			bad("%s %q: want letters, digits, '-', '_' or '.'", n.what, n.v)
		}
	}
	for _, im := range []struct{ what, v string }{{"storage", v.Images.Storage}, {"compute", v.Images.Compute}, {"trainer", v.Images.Trainer}} {
		if im.v == "" || strings.ContainsAny(im.v, " \t\n") {
			bad("images.%s %q: want an image reference", im.what, im.v)
		}
	}
	switch v.Images.PullPolicy {
	case "Always", "IfNotPresent", "Never":
	default:
		bad("images.pullPolicy %q: Always, IfNotPresent or Never", v.Images.PullPolicy)
	}
	if v.UID < 1 {
		bad("uid %d: the agents run as a user other than root", v.UID)
	}
	ports := map[string]int{"ports.grpc": v.Ports.GRPC, "ports.gossip": v.Ports.Gossip,
		"storage.metricsPort": v.Storage.MetricsPort, "training.metricsPort": v.Training.MetricsPort}
	for _, name := range sortedKeys(ports) {
		if p := ports[name]; p < 1024 || p > 65535 {
			bad("%s %d: want 1024-65535 (the agents are not root)", name, p)
		}
	}
	if v.Storage.MetricsPort == v.Ports.GRPC || v.Storage.MetricsPort == v.Ports.Gossip {
		bad("storage.metricsPort %d: taken by gRPC or gossip on the node", v.Storage.MetricsPort)
	}
	if v.Training.MetricsPort == v.Ports.Gossip {
		bad("training.metricsPort %d: taken by gossip in the pod", v.Training.MetricsPort)
	}
	s := v.Storage
	if e := validation.IsQualifiedName(s.NodeLabel); len(e) > 0 {
		bad("storage.nodeLabel %q: %s", s.NodeLabel, strings.Join(e, "; "))
	}
	if e := validation.IsValidLabelValue(s.NodeLabelValue); len(e) > 0 {
		bad("storage.nodeLabelValue %q: %s", s.NodeLabelValue, strings.Join(e, "; "))
	}
	for _, p := range []struct{ what, v string }{{"storage.dataHostPath", s.DataHostPath}, {"training.socketDir", v.Training.SocketDir}} {
		if !path.IsAbs(p.v) {
			bad("%s %q: want an absolute path", p.what, p.v)
		}
	}
	if s.IndexHostPath != "" && !path.IsAbs(s.IndexHostPath) {
		bad("storage.indexHostPath %q: want an absolute path or empty", s.IndexHostPath)
	}
	if !(s.CPUs > 0) || math.IsInf(s.CPUs, 0) || s.CPUs*1000 != math.Trunc(s.CPUs*1000) {
		bad("storage.cpus %v: want a positive number of cores in steps of 0.001", s.CPUs)
	} else if m, err := resource.ParseQuantity(s.Memory); err != nil {
		bad("storage.memory %q: %v", s.Memory, err)
	} else if min := MinStorageMemory(s.Workers()); m.Value() < min {
		bad("storage.memory %s: %d workers (cpus %v) need %d MiB at least", s.Memory, s.Workers(), s.CPUs, min>>20)
	}
	for _, p := range s.Pipelines {
		if p == "" || strings.ContainsAny(p, ", ") {
			bad("storage.pipelines: %q is not a pipeline name", p)
		}
	}
	if s.StartupSeconds < 10 {
		bad("storage.startupSeconds %d: want 10 at least", s.StartupSeconds)
	}
	if s.Replicas < 0 || s.ShardSize < 1 {
		bad("storage: replicas %d must not be negative, shardSize %d must be positive", s.Replicas, s.ShardSize)
	}
	if s.Manifest != "" && (!filepath.IsLocal(s.Manifest) || strings.ContainsAny(s.Manifest, "\n\"$")) {
		bad("storage.manifest %q: want a path inside dataHostPath, relative to it", s.Manifest)
	}
	if s.SendBuffer < 0 {
		bad("storage.sendBuffer %d: want bytes, or 0 for the kernel's autotuning", s.SendBuffer)
	}
	if s.Egress == "" || strings.ContainsAny(s.Egress, " ,=") {
		bad("storage.egress %q: want a rate such as 10gbit, or 0 for unknown", s.Egress)
	}
	t := v.Training
	if t.Nodes < 1 || t.BackoffLimit < 0 || t.GPUs < 0 || t.MinStorage < 1 || t.Batch < 1 {
		bad("training: nodes %d, minStorage %d and batch %d must be positive, backoffLimit %d and gpus %d not negative",
			t.Nodes, t.MinStorage, t.Batch, t.BackoffLimit, t.GPUs)
	}
	if t.Pipeline == "" || (t.Policy == "" && t.Plan == "") {
		bad("training: a pipeline and a policy or plan are needed")
	}
	for k, val := range t.NodeSelector {
		if len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(val)) > 0 {
			bad("training.nodeSelector %q: %q: not a label", k, val)
		}
	}
	for _, q := range []struct{ what, v string }{{"agentCPU", t.AgentCPU}, {"trainerCPU", t.TrainerCPU}, {"trainerMemory", t.TrainerMemory}} {
		if _, err := resource.ParseQuantity(q.v); err != nil {
			bad("training.%s %q: %v", q.what, q.v, err)
		}
	}
	if m, err := resource.ParseQuantity(t.AgentMemory); err != nil {
		bad("training.agentMemory %q: %v", t.AgentMemory, err)
	} else if t.RingBytes < 1 || m.Value() < MinAgentMemory(t.RingBytes) {
		bad("training.agentMemory %s: the rings (ringBytes %d) and 512 MiB need %d MiB at least",
			t.AgentMemory, t.RingBytes, MinAgentMemory(t.RingBytes)>>20)
	}
	if len(t.TrainerCommand) == 0 {
		bad("training.trainerCommand: empty")
	}
	if f := t.TrainerSocketFlag; f != "" && (!strings.HasPrefix(f, "-") || strings.ContainsAny(f, "= ")) {
		bad("training.trainerSocketFlag %q: want a flag name such as --socket, or empty", f)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrValues, strings.Join(errs, "; "))
	}
	return nil
}

// plainLabel is tlsconf's rule for cluster and node names.
func plainLabel(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// Parts are the manifests' parts in the order they are rendered: the
// namespace, the Secrets (only from a certs folder), the storage agents and
// the training Job.
var Parts = []string{"namespace", "secrets", "storage", "training"}

// Options are what Render renders besides the values.
type Options struct {
	// Parts to render; empty means all of [Parts].
	Parts []string
	// Certs is the folder `make certs` wrote. Empty renders no Secrets: they
	// are created with kubectl (docs/deploy.md).
	Certs string
}

// Render writes the manifests of v as a multi-document YAML stream.
func Render(w io.Writer, v Values, opt Options) error {
	if err := v.Validate(); err != nil {
		return err
	}
	want := opt.Parts
	if len(want) == 0 {
		want = Parts
	}
	for _, p := range want {
		if !slices.Contains(Parts, p) {
			return fmt.Errorf("deploy: no part %q (want %s)", p, strings.Join(Parts, ", "))
		}
	}
	data := struct {
		Values
		Certs []Secret
	}{Values: v}
	if opt.Certs != "" && slices.Contains(want, "secrets") {
		s, err := ReadSecrets(opt.Certs, v)
		if err != nil {
			return err
		}
		data.Certs = s
	}
	t, err := template.New("").Funcs(funcs).Option("missingkey=error").ParseFS(files, "k8s/*.yaml.tmpl")
	if err != nil {
		return err
	}
	var out bytes.Buffer
	for _, p := range Parts {
		if !slices.Contains(want, p) {
			continue
		}
		var b bytes.Buffer
		if err := t.ExecuteTemplate(&b, p+".yaml.tmpl", data); err != nil {
			return fmt.Errorf("deploy: render %s: %w", p, err)
		}
		if s := strings.TrimSpace(b.String()); s != "" {
			out.WriteString(s + "\n")
		}
	}
	_, err = w.Write(out.Bytes())
	return err
}

// Secret is a Secret to render: its name and its files by key.
type Secret struct {
	Name string
	Data map[string][]byte
}

// Keys returns the secret's keys in order.
func (s Secret) Keys() []string { return sortedKeys(s.Data) }

// ReadSecrets reads the files `make certs` wrote into dir (ca.pem, the
// storage nodes' and the training certificate's key pairs, gossip.key)
// into the Secrets v names. The CA's key is never read.
func ReadSecrets(dir string, v Values) ([]Secret, error) {
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("deploy: certs: %w (make certs writes it)", err)
		}
		return b, nil
	}
	ca, err := read("ca.pem")
	if err != nil {
		return nil, err
	}
	storage := Secret{Name: v.Secrets.StorageTLS, Data: map[string][]byte{"ca.pem": ca}}
	certs, err := filepath.Glob(filepath.Join(dir, "storage-*.pem"))
	if err != nil {
		return nil, err
	}
	for _, f := range certs {
		if storage.Data[filepath.Base(f)], err = read(filepath.Base(f)); err != nil {
			return nil, err
		}
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("deploy: certs: no storage-NODE.pem in %s (make certs CERTS_STORAGE=node names)", dir)
	}
	compute := Secret{Name: v.Secrets.ComputeTLS, Data: map[string][]byte{"ca.pem": ca}}
	for _, f := range []string{"compute-" + v.Training.CertName + ".pem", "compute-" + v.Training.CertName + "-key.pem"} {
		if compute.Data[f], err = read(f); err != nil {
			return nil, err
		}
	}
	key, err := read("gossip.key")
	if err != nil {
		return nil, err
	}
	gossip := Secret{Name: v.Secrets.GossipKey, Data: map[string][]byte{"gossip.key": key}}
	return []Secret{storage, compute, gossip}, nil
}

var funcs = template.FuncMap{
	// json quotes a value as YAML (JSON is YAML).
	"json": func(v any) (string, error) {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return "", err
		}
		return strings.TrimSuffix(b.String(), "\n"), nil
	},
	// cpus formats a CPU count as both --cpus and a Kubernetes quantity
	// take it: "4", "2.5", "0.125".
	"cpus":       func(c float64) string { return strconv.FormatFloat(c, 'f', -1, 64) },
	"join":       strings.Join,
	"base64":     base64.StdEncoding.EncodeToString,
	"sortedKeys": func(m map[string]string) []string { return sortedKeys(m) },
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
