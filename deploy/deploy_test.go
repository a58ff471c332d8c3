package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/sophon-dl/sophon/internal/metricsrv"
)

// otherValues differ from the defaults wherever a template branches or
// substitutes, so that a value rendered into one place but not the other
// shows.
const otherValues = `
namespace: ml-data
createNamespace: false
clusterDomain: k8s.example
cluster: lab
images: {storage: "reg.example/s:1", compute: "reg.example/c:1", trainer: "reg.example/t:1", pullPolicy: Always}
uid: 1000
secrets: {storageTLS: st, computeTLS: ct, gossipKey: gk}
ports: {grpc: 7171, gossip: 7947}
storage:
  nodeLabel: example.com/role
  nodeLabelValue: data
  dataHostPath: /mnt/imagenet/train
  indexHostPath: /var/cache/sophon
  cpus: 2.5
  memory: 1500Mi
  metricsPort: 9300
  pipelines: [imagenet-train, imagenet-eval]
  startupSeconds: 600
  logLevel: debug
  manifest: sophon/imagenet.manifest
training:
  name: resnet
  nodes: 3
  backoffLimit: 2
  gpus: 0
  nodeSelector: {nvidia.com/gpu.present: "true"}
  certName: c1
  socketDir: /var/run/sophon-x
  metricsPort: 9400
  minStorage: 2
  pipeline: imagenet-train
  batch: 64
  policy: ""
  plan: resizeoff
  ringBytes: 536870912
  agentCPU: 1500m
  agentMemory: 1Gi
  trainerCommand: [python3, -u, /app/train.py]
  trainerArgs: [--epochs, "90"]
  trainerSocketFlag: ""
`

// manifests are the decoded objects of one render.
type manifests struct {
	namespaces []*corev1.Namespace
	secrets    map[string]*corev1.Secret
	services   []*corev1.Service
	daemonSets []*appsv1.DaemonSet
	jobs       []*batchv1.Job
}

// decodeStrict splits a multi-document stream and decodes every document
// into the API type its apiVersion and kind name, strictly: an unknown or
// duplicate field, or a value of the wrong type, is an error.
func decodeStrict(t *testing.T, stream []byte) manifests {
	t.Helper()
	m := manifests{secrets: map[string]*corev1.Secret{}}
	for i, doc := range splitDocs(stream) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, doc)
		}
		var obj any
		switch tm.APIVersion + "/" + tm.Kind {
		case "v1/Namespace":
			o := &corev1.Namespace{}
			m.namespaces, obj = append(m.namespaces, o), o
		case "v1/Secret":
			o := &corev1.Secret{}
			obj = o
			defer func() { m.secrets[o.Name] = o }()
		case "v1/Service":
			o := &corev1.Service{}
			m.services, obj = append(m.services, o), o
		case "apps/v1/DaemonSet":
			o := &appsv1.DaemonSet{}
			m.daemonSets, obj = append(m.daemonSets, o), o
		case "batch/v1/Job":
			o := &batchv1.Job{}
			m.jobs, obj = append(m.jobs, o), o
		default:
			t.Fatalf("document %d: unexpected %s %s", i, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("document %d (%s): %v\n%s", i, tm.Kind, err, doc)
		}
	}
	return m
}

func splitDocs(stream []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), stream...), []byte("\n---\n")) {
		if len(bytes.TrimSpace(d)) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

func TestDecodeStrictCatchesUnknownFields(t *testing.T) {
	// The check the manifests rely on: a misspelt field fails.
	doc := []byte("apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      hostNetwrk: true\n")
	if err := yaml.UnmarshalStrict(doc, &appsv1.DaemonSet{}); err == nil {
		t.Fatal("an unknown field decoded without error")
	}
	dup := []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: x, name: y}\n")
	if err := yaml.UnmarshalStrict(dup, &corev1.Namespace{}); err == nil {
		t.Fatal("a duplicate field decoded without error")
	}
}

// certsDir makes a development CA, certificates and gossip key with the
// real storage-agent certs subcommand, as make certs does.
func certsDir(t *testing.T, v Values, storageNodes []string) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join(binaries(t), "storage-agent"), "certs", "--out", dir, "--cluster", v.Cluster,
		"--storage", strings.Join(storageNodes, ","), "--compute", v.Training.CertName, "--hosts", "localhost,10.0.0.5")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("storage-agent certs: %v\n%s", err, out)
	}
	return dir
}

func TestManifests(t *testing.T) {
	other, err := ParseValues([]byte(otherValues))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		v    Values
	}{{"default", DefaultValues()}, {"other", other}} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := []string{"node-a", "gpu-storage-1.example"}
			certs := certsDir(t, tc.v, nodes)
			var out bytes.Buffer
			if err := Render(&out, tc.v, Options{Certs: certs}); err != nil {
				t.Fatal(err)
			}
			m := decodeStrict(t, out.Bytes())
			checkObjects(t, tc.v, m)
			checkSecrets(t, tc.v, m, certs, nodes)
			checkStorage(t, tc.v, m, nodes)
			checkTraining(t, tc.v, m)

			// Without --certs the Secrets are left to kubectl; the rest is
			// the same.
			var bare bytes.Buffer
			if err := Render(&bare, tc.v, Options{}); err != nil {
				t.Fatal(err)
			}
			if b := decodeStrict(t, bare.Bytes()); len(b.secrets) != 0 {
				t.Errorf("rendered %d Secrets without --certs", len(b.secrets))
			}
		})
	}
}

func checkObjects(t *testing.T, v Values, m manifests) {
	t.Helper()
	if got, want := len(m.namespaces), map[bool]int{true: 1, false: 0}[v.CreateNamespace]; got != want {
		t.Errorf("%d Namespaces, want %d", got, want)
	}
	if len(m.namespaces) == 1 && m.namespaces[0].Name != v.Namespace {
		t.Errorf("Namespace %q, want %q", m.namespaces[0].Name, v.Namespace)
	}
	if len(m.services) != 1 || len(m.daemonSets) != 1 || len(m.jobs) != 1 || len(m.secrets) != 3 {
		t.Fatalf("%d Services, %d DaemonSets, %d Jobs, %d Secrets; want 1, 1, 1, 3",
			len(m.services), len(m.daemonSets), len(m.jobs), len(m.secrets))
	}
	metas := []metav1.ObjectMeta{m.services[0].ObjectMeta, m.daemonSets[0].ObjectMeta, m.jobs[0].ObjectMeta}
	for _, s := range m.secrets {
		metas = append(metas, s.ObjectMeta)
	}
	for _, o := range metas {
		if o.Namespace != v.Namespace {
			t.Errorf("%s is in namespace %q, want %q", o.Name, o.Namespace, v.Namespace)
		}
	}
}

func checkSecrets(t *testing.T, v Values, m manifests, certs string, nodes []string) {
	t.Helper()
	want := map[string][]string{
		v.Secrets.StorageTLS: {"ca.pem"},
		v.Secrets.ComputeTLS: {"ca.pem", "compute-" + v.Training.CertName + ".pem", "compute-" + v.Training.CertName + "-key.pem"},
		v.Secrets.GossipKey:  {"gossip.key"},
	}
	for _, n := range nodes {
		want[v.Secrets.StorageTLS] = append(want[v.Secrets.StorageTLS], "storage-"+n+".pem", "storage-"+n+"-key.pem")
	}
	for name, keys := range want {
		s := m.secrets[name]
		if s == nil {
			t.Errorf("no Secret %q", name)
			continue
		}
		slices.Sort(keys)
		if got := sortedKeys(s.Data); !slices.Equal(got, keys) {
			t.Errorf("Secret %s holds %v, want %v", name, got, keys)
		}
		for k, b := range s.Data {
			file, err := os.ReadFile(filepath.Join(certs, k))
			if err != nil || !bytes.Equal(file, b) {
				t.Errorf("Secret %s key %s differs from %s (%v)", name, k, filepath.Join(certs, k), err)
			}
			if k == "ca-key.pem" {
				t.Errorf("Secret %s holds the CA's key", name)
			}
		}
	}
}

// podEnv is what a container's env gives its args: literal values, and
// plausible ones for the downward API.
func podEnv(t *testing.T, c corev1.Container, nodeName string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = map[string]string{
				"spec.nodeName": nodeName, "status.hostIP": "10.0.0.5", "status.podIP": "10.244.1.7",
				"metadata.annotations['batch.kubernetes.io/job-completion-index']": "0",
			}[e.ValueFrom.FieldRef.FieldPath]
			if env[e.Name] == "" {
				t.Errorf("env %s: unexpected field %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		default:
			t.Errorf("env %s: unexpected source", e.Name)
		}
	}
	return env
}

// containerFlags checks a container's args against the binary's flags and
// returns them by name, with $(VAR) expanded for node.
func containerFlags(t *testing.T, bin string, c corev1.Container, node string) map[string]string {
	t.Helper()
	if len(c.Command) != 0 {
		t.Errorf("container %s overrides the image's entrypoint (%v)", c.Name, c.Command)
	}
	return agentArgs(t, bin, expand(t, c.Args, podEnv(t, c, node)))
}

// port reads the port of a host:port flag value.
func port(t *testing.T, hostport string) int32 {
	t.Helper()
	i := strings.LastIndex(hostport, ":")
	p, err := strconv.Atoi(hostport[i+1:])
	if i < 0 || err != nil {
		t.Errorf("%q is not host:port", hostport)
	}
	return int32(p)
}

// served says whether the agents' metrics handler answers GET path with 200.
func served(path string) bool {
	srv := httptest.NewServer(metricsrv.Handler(prometheus.NewRegistry()))
	defer srv.Close()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// checkProbesAndScrape checks that every HTTP probe of c and the pod's
// Prometheus annotations point at its --metrics port, on paths the agents
// serve.
func checkProbesAndScrape(t *testing.T, c corev1.Container, annotations map[string]string, metrics string) {
	t.Helper()
	mport := port(t, metrics)
	probes := map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe}
	for _, kind := range []string{"liveness", "readiness"} {
		if probes[kind] == nil || probes[kind].HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", c.Name, kind)
		}
	}
	for kind, p := range probes {
		if p == nil || p.HTTPGet == nil {
			continue
		}
		if got := p.HTTPGet.Port.IntValue(); got != int(mport) {
			t.Errorf("%s %s probe on port %d, --metrics is %s", c.Name, kind, got, metrics)
		}
		if !served(p.HTTPGet.Path) {
			t.Errorf("%s %s probe on %s, which the metrics server does not serve", c.Name, kind, p.HTTPGet.Path)
		}
	}
	if annotations["prometheus.io/scrape"] != "true" {
		t.Errorf("%s: prometheus.io/scrape %q", c.Name, annotations["prometheus.io/scrape"])
	}
	if got := annotations["prometheus.io/port"]; got != strconv.Itoa(int(mport)) {
		t.Errorf("%s: prometheus.io/port %q, --metrics is %s", c.Name, got, metrics)
	}
	if p := annotations["prometheus.io/path"]; p != "/metrics" || !served(p) {
		t.Errorf("%s: prometheus.io/path %q is not the metrics endpoint", c.Name, p)
	}
	if !hasPort(c, "metrics", mport, corev1.ProtocolTCP) {
		t.Errorf("%s declares no metrics port %d", c.Name, mport)
	}
}

func hasPort(c corev1.Container, name string, p int32, proto corev1.Protocol) bool {
	for _, cp := range c.Ports {
		if cp.ContainerPort == p && cp.Protocol == proto && strings.HasPrefix(cp.Name, name) {
			return true
		}
	}
	return false
}

// checkFiles checks that each file flag names a file the pod has: under the
// mount of a Secret volume, with an item or (Secrets rendered) a key of
// that name.
func checkFiles(t *testing.T, pod corev1.PodSpec, c corev1.Container, flags map[string]string, secrets map[string]*corev1.Secret, names ...string) {
	t.Helper()
	for _, name := range names {
		file := flags[name]
		if file == "" {
			t.Errorf("%s: no --%s", c.Name, name)
			continue
		}
		vm := mountOf(c, file)
		if vm == nil {
			t.Errorf("%s: --%s=%s is under no volume mount", c.Name, name, file)
			continue
		}
		vol := volume(pod, vm.Name)
		if vol == nil || vol.Secret == nil {
			t.Errorf("%s: --%s=%s: volume %s is not a Secret", c.Name, name, file, vm.Name)
			continue
		}
		rel := strings.TrimPrefix(file, strings.TrimSuffix(vm.MountPath, "/")+"/")
		key := rel
		if vol.Secret.Items != nil {
			key = ""
			for _, it := range vol.Secret.Items {
				if it.Path == rel {
					key = it.Key
				}
			}
			if key == "" {
				t.Errorf("%s: --%s=%s: Secret volume %s projects no %s", c.Name, name, file, vm.Name, rel)
				continue
			}
		}
		s := secrets[vol.Secret.SecretName]
		if s == nil {
			t.Errorf("%s: volume %s mounts Secret %s, which is not rendered", c.Name, vm.Name, vol.Secret.SecretName)
		} else if _, ok := s.Data[key]; !ok {
			t.Errorf("%s: --%s=%s: Secret %s has no key %s", c.Name, name, file, s.Name, key)
		}
	}
}

// mountOf returns the deepest mount of c that holds file.
func mountOf(c corev1.Container, file string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	for i, vm := range c.VolumeMounts {
		if strings.HasPrefix(file, strings.TrimSuffix(vm.MountPath, "/")+"/") && (best == nil || len(vm.MountPath) > len(best.MountPath)) {
			best = &c.VolumeMounts[i]
		}
	}
	return best
}

func volume(pod corev1.PodSpec, name string) *corev1.Volume {
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == name {
			return &pod.Volumes[i]
		}
	}
	return nil
}

// checkVolumes checks that every mount names a volume of the pod and every
// Secret volume a Secret of the values.
func checkVolumes(t *testing.T, v Values, pod corev1.PodSpec) {
	t.Helper()
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		for _, vm := range c.VolumeMounts {
			if volume(pod, vm.Name) == nil {
				t.Errorf("%s mounts volume %s, which the pod lacks", c.Name, vm.Name)
			}
		}
	}
	known := []string{v.Secrets.StorageTLS, v.Secrets.ComputeTLS, v.Secrets.GossipKey}
	for _, vol := range pod.Volumes {
		if vol.Secret != nil && !slices.Contains(known, vol.Secret.SecretName) {
			t.Errorf("volume %s mounts Secret %s, not one of %v", vol.Name, vol.Secret.SecretName, known)
		}
	}
}

func checkNonRoot(t *testing.T, pod corev1.PodSpec, c corev1.Container) int64 {
	t.Helper()
	uid := pod.SecurityContext.RunAsUser
	nonRoot := pod.SecurityContext.RunAsNonRoot
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		uid = c.SecurityContext.RunAsUser
	}
	if uid == nil || *uid == 0 || nonRoot == nil || !*nonRoot {
		t.Errorf("%s may run as root", c.Name)
		return 0
	}
	return *uid
}

func checkStorage(t *testing.T, v Values, m manifests, nodes []string) {
	t.Helper()
	ds, svc := m.daemonSets[0], m.services[0]
	pod := ds.Spec.Template.Spec
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
		t.Fatalf("storage pod: %d containers, %d init containers; want 1, 0", len(pod.Containers), len(pod.InitContainers))
	}
	c := pod.Containers[0]
	bin := filepath.Join(binaries(t), "storage-agent")
	var flags map[string]string
	for _, node := range nodes {
		flags = containerFlags(t, bin, c, node)
		checkFiles(t, pod, c, flags, m.secrets, "tls-cert", "tls-key", "tls-ca", "gossip-key-file")
		if flags["name"] != node {
			t.Errorf("--name=%s on node %s: the certificate names the node", flags["name"], node)
		}
	}

	if got := pod.NodeSelector[v.Storage.NodeLabel]; got != v.Storage.NodeLabelValue || len(pod.NodeSelector) != 1 {
		t.Errorf("nodeSelector %v, want %s=%s", pod.NodeSelector, v.Storage.NodeLabel, v.Storage.NodeLabelValue)
	}
	if !labelsMatch(svc.Spec.Selector, ds.Spec.Template.Labels) {
		t.Errorf("Service selector %v does not select the storage pods %v", svc.Spec.Selector, ds.Spec.Template.Labels)
	}
	if !labelsMatch(ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels) {
		t.Errorf("DaemonSet selector %v does not select its pods %v", ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
	}

	// The manifest, when the nodes have part of the dataset, is inside the
	// data mount.
	if want := v.Storage.Manifest; want == "" && flags["manifest"] != "" || want != "" && flags["manifest"] != flags["data"]+"/"+want {
		t.Errorf("--manifest=%q, want %q under --data=%s", flags["manifest"], want, flags["data"])
	}

	// CPU: the limit is the budget the agent plans with.
	cpus, err := strconv.ParseFloat(flags["cpus"], 64)
	if err != nil || cpus != v.Storage.CPUs {
		t.Errorf("--cpus=%s, want %v", flags["cpus"], v.Storage.CPUs)
	}
	lim, req := c.Resources.Limits[corev1.ResourceCPU], c.Resources.Requests[corev1.ResourceCPU]
	if lim.MilliValue() != int64(math.Round(cpus*1000)) || lim.Cmp(req) != 0 {
		t.Errorf("cpu limit %s and request %s, want both --cpus=%s", lim.String(), req.String(), flags["cpus"])
	}
	// Memory: the agent's own bounds fit under the limit, so the kernel
	// does not kill it first. The per-worker decode bound is the binary's.
	decode, err := strconv.ParseInt(helpFlags(t, bin)["decode-memory"].deflt, 10, 64)
	if err != nil || decode != storageDecodeMemory {
		t.Errorf("storage-agent --decode-memory defaults to %q, deploy assumes %d", helpFlags(t, bin)["decode-memory"].deflt, storageDecodeMemory)
	}
	workers := int64(math.Ceil(cpus))
	mem := c.Resources.Limits[corev1.ResourceMemory]
	if need := int64(256<<20) + workers*(32<<20+decode); mem.Value() < need {
		t.Errorf("memory limit %s under the %d MiB %d workers may use", mem.String(), need>>20, workers)
	}

	// The dataset: the hostPath, read-only, at --data.
	dataMount := mountOf(c, flags["data"]+"/x")
	if dataMount == nil || dataMount.MountPath != flags["data"] {
		t.Fatalf("--data=%s is not a volume mount", flags["data"])
	}
	if !dataMount.ReadOnly {
		t.Errorf("the dataset mount %s is writable", dataMount.MountPath)
	}
	if dv := volume(pod, dataMount.Name); dv == nil || dv.HostPath == nil || dv.HostPath.Path != v.Storage.DataHostPath {
		t.Errorf("the dataset volume is not hostPath %s", v.Storage.DataHostPath)
	}
	// The index goes to its own writable volume, never the dataset.
	if im := mountOf(c, flags["index"]); im == nil || im.ReadOnly || im.Name == dataMount.Name {
		t.Errorf("--index=%s is not on a writable volume of its own", flags["index"])
	} else if iv := volume(pod, im.Name); (v.Storage.IndexHostPath == "") != (iv.EmptyDir != nil) {
		t.Errorf("index volume %+v for indexHostPath %q", iv.VolumeSource, v.Storage.IndexHostPath)
	}
	checkVolumes(t, v, pod)
	if got := strings.Join(strings.Fields(strings.ReplaceAll(flags["pipeline"], ",", " ")), ","); got != strings.Join(v.Storage.Pipelines, ",") {
		t.Errorf("--pipeline=%s, want %v", flags["pipeline"], v.Storage.Pipelines)
	}

	// Network: the node's, with the node IP announced to gossip.
	if !pod.HostNetwork || pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v, dnsPolicy %s; want true, ClusterFirstWithHostNet", pod.HostNetwork, pod.DNSPolicy)
	}
	if !strings.HasPrefix(flags["gossip"], "10.0.0.5:") {
		t.Errorf("--gossip=%s does not bind the node IP", flags["gossip"])
	}
	checkJoin(t, v, m, flags["join"])
	if p := port(t, flags["gossip"]); p != int32(v.Ports.Gossip) || !hasPort(c, "gossip", p, corev1.ProtocolTCP) || !hasPort(c, "gossip", p, corev1.ProtocolUDP) {
		t.Errorf("--gossip=%s: the container ports do not match (TCP and UDP)", flags["gossip"])
	}
	if p := port(t, flags["listen"]); p != int32(v.Ports.GRPC) || !hasPort(c, "grpc", p, corev1.ProtocolTCP) {
		t.Errorf("--listen=%s: the container ports do not match", flags["listen"])
	}
	if flags["cluster"] != v.Cluster {
		t.Errorf("--cluster=%s, want %s", flags["cluster"], v.Cluster)
	}
	checkProbesAndScrape(t, c, ds.Spec.Template.Annotations, flags["metrics"])
	if c.StartupProbe == nil || c.StartupProbe.HTTPGet == nil {
		t.Error("the storage agent has no startup probe: the liveness probe would kill it while it hashes the dataset")
	} else if s := c.StartupProbe.PeriodSeconds * c.StartupProbe.FailureThreshold; int(s) < v.Storage.StartupSeconds {
		t.Errorf("startup probe gives up after %d s, want %d", s, v.Storage.StartupSeconds)
	}
	checkNonRoot(t, pod, c)
}

func labelsMatch(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// checkJoin checks that a --join list reaches the storage agents: through
// the headless Service that selects them, on the gossip port.
func checkJoin(t *testing.T, v Values, m manifests, join string) {
	t.Helper()
	svc := m.services[0]
	want := fmt.Sprintf("%s.%s.svc.%s:%d", svc.Name, svc.Namespace, v.ClusterDomain, v.Ports.Gossip)
	if !slices.Contains(strings.Split(join, ","), want) {
		t.Errorf("--join=%s lacks the storage Service %s", join, want)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: clusterIP %q, publishNotReadyAddresses %v; want a headless Service of every pod", svc.Name, svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
	}
	var tcp, udp bool
	for _, p := range svc.Spec.Ports {
		if p.Port == int32(v.Ports.Gossip) {
			tcp = tcp || p.Protocol == corev1.ProtocolTCP
			udp = udp || p.Protocol == corev1.ProtocolUDP
		}
	}
	if !tcp || !udp {
		t.Errorf("Service %s lacks the gossip port %d in TCP and UDP", svc.Name, v.Ports.Gossip)
	}
}

func checkTraining(t *testing.T, v Values, m manifests) {
	t.Helper()
	job := m.jobs[0]
	pod := job.Spec.Template.Spec
	if len(pod.InitContainers) != 1 || len(pod.Containers) != 1 {
		t.Fatalf("training pod: %d init containers, %d containers; want 1, 1", len(pod.InitContainers), len(pod.Containers))
	}
	agent, trainer := pod.InitContainers[0], pod.Containers[0]
	// The native sidecar: an init container that keeps running.
	if agent.RestartPolicy == nil || *agent.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("the compute agent is not a native sidecar (init container restartPolicy %v)", agent.RestartPolicy)
	}
	if pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("pod restartPolicy %s, want Never (a Job; the sidecar restarts by its own policy)", pod.RestartPolicy)
	}
	bin := filepath.Join(binaries(t), "compute-agent")
	flags := containerFlags(t, bin, agent, "gpu-1")
	checkFiles(t, pod, agent, flags, m.secrets, "tls-cert", "tls-key", "tls-ca", "gossip-key-file")
	checkVolumes(t, v, pod)

	// The socket: what the agent serves is what the trainer opens, in a
	// folder both mount from one emptyDir.
	sock := flags["trainer-socket"]
	if sock != v.Training.Socket() {
		t.Errorf("--trainer-socket=%s, want %s", sock, v.Training.Socket())
	}
	tenv := podEnv(t, trainer, "gpu-1")
	if tenv["SOPHON_SOCKET"] != sock {
		t.Errorf("trainer SOPHON_SOCKET=%q, the agent serves %s", tenv["SOPHON_SOCKET"], sock)
	}
	if f := v.Training.TrainerSocketFlag; f != "" {
		if !slices.Contains(trainer.Args, f+"="+sock) {
			t.Errorf("trainer args %v lack %s=%s", trainer.Args, f, sock)
		}
	} else if slices.ContainsFunc(trainer.Args, func(a string) bool { return strings.Contains(a, sock) }) {
		t.Errorf("trainer args %v pass the socket though trainerSocketFlag is empty", trainer.Args)
	}
	am, tm := mountOf(agent, sock), mountOf(trainer, sock)
	if am == nil || tm == nil || am.Name != tm.Name || am.MountPath != path.Dir(sock) || tm.MountPath != am.MountPath {
		t.Errorf("the socket %s is not in one volume both containers mount at its folder (%+v, %+v)", sock, am, tm)
	} else if vol := volume(pod, am.Name); vol == nil || vol.EmptyDir == nil {
		t.Errorf("the socket's volume %s is not an emptyDir", am.Name)
	} else if am.ReadOnly || tm.ReadOnly {
		t.Error("the socket's folder is mounted read-only")
	}
	// The socket is the agent's, mode 0755 under umask 022: the trainer
	// must run as the same user to connect.
	if a, tr := checkNonRoot(t, pod, agent), checkNonRoot(t, pod, trainer); a != tr {
		t.Errorf("agent runs as uid %d, trainer as %d: the trainer cannot connect to the socket", a, tr)
	}
	// The trainer starts when the socket exists.
	if p := agent.StartupProbe; p == nil || p.Exec == nil || !slices.Equal(p.Exec.Command, []string{"test", "-S", sock}) {
		t.Errorf("the agent's startup probe does not wait for %s: %+v", sock, p)
	}
	checkProbesAndScrape(t, agent, job.Spec.Template.Annotations, flags["metrics"])

	// The rings are charged to the agent's container.
	ring, err := strconv.ParseInt(flags["ring-bytes"], 10, 64)
	if err != nil {
		t.Errorf("--ring-bytes=%q: %v", flags["ring-bytes"], err)
	}
	if mem := agent.Resources.Limits[corev1.ResourceMemory]; mem.Value() < ring+512<<20 {
		t.Errorf("agent memory limit %s under --ring-bytes=%d plus 512 MiB", mem.String(), ring)
	}

	// Ranks: one pod per node, RANK the completion index.
	if job.Spec.CompletionMode == nil || *job.Spec.CompletionMode != batchv1.IndexedCompletion ||
		job.Spec.Completions == nil || job.Spec.Parallelism == nil ||
		*job.Spec.Completions != int32(v.Training.Nodes) || *job.Spec.Parallelism != int32(v.Training.Nodes) {
		t.Errorf("Job completions %v, parallelism %v, mode %v; want %d, %d, Indexed",
			job.Spec.Completions, job.Spec.Parallelism, job.Spec.CompletionMode, v.Training.Nodes, v.Training.Nodes)
	}
	if tenv["WORLD_SIZE"] != strconv.Itoa(v.Training.Nodes) || tenv["LOCAL_WORLD_SIZE"] != "1" || tenv["LOCAL_RANK"] != "0" {
		t.Errorf("trainer WORLD_SIZE %q LOCAL_WORLD_SIZE %q LOCAL_RANK %q", tenv["WORLD_SIZE"], tenv["LOCAL_WORLD_SIZE"], tenv["LOCAL_RANK"])
	}
	rank := ""
	for _, e := range trainer.Env {
		if e.Name == "RANK" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			rank = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if rank != "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
		t.Errorf("trainer RANK from %q, want the completion index", rank)
	}
	gpus := trainer.Resources.Limits["nvidia.com/gpu"]
	if gpus.Value() != int64(v.Training.GPUs) {
		t.Errorf("trainer asks for %s GPUs, want %d", gpus.String(), v.Training.GPUs)
	}
	if !slices.Equal(trainer.Command, v.Training.TrainerCommand) {
		t.Errorf("trainer command %v, want %v", trainer.Command, v.Training.TrainerCommand)
	}
	checkJoin(t, v, m, flags["join"])
	if !strings.HasPrefix(flags["gossip"], "10.244.1.7:") || port(t, flags["gossip"]) != int32(v.Ports.Gossip) {
		t.Errorf("--gossip=%s, want the pod IP and port %d", flags["gossip"], v.Ports.Gossip)
	}
	if flags["cluster"] != v.Cluster || flags["min-storage"] != strconv.Itoa(v.Training.MinStorage) {
		t.Errorf("--cluster=%s --min-storage=%s", flags["cluster"], flags["min-storage"])
	}
	if (flags["policy"] != "") == (flags["plan"] != "") || flags["policy"] != v.Training.Policy {
		t.Errorf("--policy=%q --plan=%q for policy %q, plan %q: want exactly one", flags["policy"], flags["plan"], v.Training.Policy, v.Training.Plan)
	}
	for k, want := range v.Training.NodeSelector {
		if pod.NodeSelector[k] != want {
			t.Errorf("training nodeSelector %v lacks %s=%s", pod.NodeSelector, k, want)
		}
	}
}

func TestRenderCommand(t *testing.T) {
	bin := filepath.Join(binaries(t), "render")
	v := DefaultValues()
	certs := certsDir(t, v, []string{"s1"})
	out, err := exec.Command(bin, "--values", "k8s/values.yaml", "--certs", certs).Output()
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var want bytes.Buffer
	if err := Render(&want, v, Options{Certs: certs}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, want.Bytes()) {
		t.Error("render --values k8s/values.yaml differs from Render with the defaults")
	}
	out, err = exec.Command(bin, "--part", "storage").Output()
	if err != nil {
		t.Fatalf("render --part storage: %v", err)
	}
	if m := decodeStrict(t, out); len(m.daemonSets) != 1 || len(m.jobs)+len(m.namespaces)+len(m.secrets) != 0 {
		t.Errorf("--part storage rendered %d DaemonSets, %d Jobs, %d Namespaces", len(m.daemonSets), len(m.jobs), len(m.namespaces))
	}
	if err := exec.Command(bin, "--part", "nope").Run(); err == nil {
		t.Error("render --part nope succeeded")
	}
}

func TestValuesFileIsTheDefault(t *testing.T) {
	b, err := os.ReadFile("k8s/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	v, err := ParseValues(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v, DefaultValues()) {
		t.Errorf("k8s/values.yaml parses to %+v, the defaults are %+v", v, DefaultValues())
	}
	// A values file that sets one key keeps the others.
	one, err := ParseValues([]byte("storage: {cpus: 8, memory: 4Gi}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if one.Storage.CPUs != 8 || one.Storage.DataHostPath != DefaultValues().Storage.DataHostPath || !reflect.DeepEqual(one.Training, DefaultValues().Training) {
		t.Errorf("partial values: %+v", one)
	}
}

func TestBadValues(t *testing.T) {
	for _, tc := range []struct{ name, values string }{
		{"unknown key", "storage: {cpu: 4}\n"},
		{"memory under the agent's bounds", "storage: {cpus: 8, memory: 1Gi}\n"},
		{"no cpus", "storage: {cpus: 0}\n"},
		{"cpus finer than a millicore", "storage: {cpus: 0.0005}\n"},
		{"rings over the agent's memory", "training: {ringBytes: 4294967296, agentMemory: 4Gi}\n"},
		{"metrics on the gRPC port", "storage: {metricsPort: 7070}\n"},
		{"privileged port", "ports: {grpc: 80}\n"},
		{"root", "uid: 0\n"},
		{"bad namespace", "namespace: Sophon_Data\n"},
		{"relative dataset", "storage: {dataHostPath: data}\n"},
		{"manifest outside the data", "storage: {manifest: ../m}\n"},
		{"absolute manifest", "storage: {manifest: /etc/m}\n"},
		{"certificate name", "training: {certName: a/b}\n"},
		{"no plan", "training: {policy: '', plan: ''}\n"},
		{"socket flag with a value", "training: {trainerSocketFlag: --socket=/x}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseValues([]byte(tc.values))
			if !errors.Is(err, ErrValues) {
				t.Errorf("ParseValues(%q) = %v, want ErrValues", tc.values, err)
			}
		})
	}
	v := DefaultValues()
	v.Storage.Memory = "100Mi" // Render validates too
	if err := Render(&bytes.Buffer{}, v, Options{}); !errors.Is(err, ErrValues) {
		t.Errorf("Render with 100Mi: %v, want ErrValues", err)
	}
	if err := Render(&bytes.Buffer{}, DefaultValues(), Options{Certs: t.TempDir()}); err == nil {
		t.Error("Render with an empty certs folder succeeded")
	}
}

func TestQuantityOfCPUs(t *testing.T) {
	// The CPU count is rendered once, in the form both --cpus
	// (strconv.ParseFloat) and a Kubernetes quantity read alike.
	for _, c := range []float64{4, 2.5, 0.5, 0.125, 12.75, 96} {
		s := funcs["cpus"].(func(float64) string)(c)
		q, err := resource.ParseQuantity(s)
		f, ferr := strconv.ParseFloat(s, 64)
		if err != nil || ferr != nil || q.MilliValue() != int64(math.Round(c*1000)) || f != c {
			t.Errorf("cpus %v renders %q: quantity %v (%v), float %v (%v)", c, s, q.String(), err, f, ferr)
		}
	}
}
