// Package kubernetes checks the example manifests: every YAML document
// decodes strictly into its Kubernetes API type, and the manifests keep the
// promises README.md makes about them. It is a module of its own so that
// the Kubernetes API types stay out of lockmesh's dependencies; .ci/run
// tests it.
package kubernetes

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// agentLeaveTimeout is how long `lockmesh agent` takes at most to leave
// after SIGTERM (cmd/lockmesh's leaveTimeout).
const agentLeaveTimeout = 5

// manifests are the decoded documents of every *.yaml file here.
type manifests struct {
	statefulSets []*appsv1.StatefulSet
	services     []*corev1.Service
	budgets      []*policyv1.PodDisruptionBudget
	configMaps   []*corev1.ConfigMap
}

// The voters' StatefulSet and Service, and the sidecar example's.
const (
	voters    = "lockmesh"
	sidecarSS = "lock-demo"
)

func (m *manifests) statefulSet(t *testing.T, name string) *appsv1.StatefulSet {
	t.Helper()
	for _, s := range m.statefulSets {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no StatefulSet %q", name)
	return nil
}

func (m *manifests) service(t *testing.T, name string) *corev1.Service {
	t.Helper()
	for _, s := range m.services {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no Service %q", name)
	return nil
}

// kinds maps apiVersion and kind to a new value of the type to decode into.
var kinds = map[string]func(*manifests) any{
	"apps/v1 StatefulSet": func(m *manifests) any {
		v := new(appsv1.StatefulSet)
		m.statefulSets = append(m.statefulSets, v)
		return v
	},
	"v1 Service": func(m *manifests) any {
		v := new(corev1.Service)
		m.services = append(m.services, v)
		return v
	},
	"policy/v1 PodDisruptionBudget": func(m *manifests) any {
		v := new(policyv1.PodDisruptionBudget)
		m.budgets = append(m.budgets, v)
		return v
	},
	"v1 ConfigMap": func(m *manifests) any {
		v := new(corev1.ConfigMap)
		m.configMaps = append(m.configMaps, v)
		return v
	},
}

func load(t *testing.T) *manifests {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	m := new(manifests)
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(f))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			if err := decode(m, doc); err != nil {
				t.Errorf("%s, document %d: %v", file, i+1, err)
			}
		}
		f.Close()
	}
	if t.Failed() {
		t.FailNow()
	}
	return m
}

// decode converts a YAML document to JSON (refusing duplicate keys) and
// decodes it into the type its kind names, refusing unknown fields.
func decode(m *manifests, doc []byte) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return err
	}
	newValue := kinds[tm.APIVersion+" "+tm.Kind]
	if newValue == nil {
		return fmt.Errorf("apiVersion %q kind %q: not a kind this test knows; add it to kinds", tm.APIVersion, tm.Kind)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(newValue(m)); err != nil {
		return fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return nil
}

func stripComments(doc []byte) []byte {
	return regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAll(doc, nil)
}

// The manifests decode strictly: a misspelt or misplaced field fails here,
// not at kubectl apply.
func TestManifestsDecodeStrictly(t *testing.T) {
	m := load(t)
	// The voters' StatefulSet, Service and budget; the sidecar example's
	// StatefulSet, Service and ConfigMap.
	if len(m.statefulSets) != 2 || len(m.services) != 2 || len(m.budgets) != 1 || len(m.configMaps) != 1 {
		t.Fatalf("%d StatefulSets, %d Services, %d PodDisruptionBudgets, %d ConfigMaps; want 2, 2, 1, 1",
			len(m.statefulSets), len(m.services), len(m.budgets), len(m.configMaps))
	}
	for _, name := range []string{voters, sidecarSS} {
		m.statefulSet(t, name)
		m.service(t, name)
	}
}

func TestStrictDecodeRefusesUnknownFields(t *testing.T) {
	bad := []string{
		"apiVersion: policy/v1\nkind: PodDisruptionBudget\nspec:\n  maxUnavailabel: 1\n",
		"apiVersion: v1\nkind: Service\nspec:\n  publishNotReadyAddresses: true\n  publishNotReadyAddresses: false\n",
		"apiVersion: apps/v1beta1\nkind: StatefulSet\n",
	}
	for _, doc := range bad {
		if err := decode(new(manifests), []byte(doc)); err == nil {
			t.Errorf("decoded without error:\n%s", doc)
		}
	}
}

// The headless Service gives every pod, ready or not, a DNS name.
func TestHeadlessServiceForSeeds(t *testing.T) {
	m := load(t)
	sts, svc := m.statefulSet(t, voters), m.service(t, voters)
	if sts.Spec.ServiceName != svc.Name {
		t.Errorf("StatefulSet serviceName %q, Service %q", sts.Spec.ServiceName, svc.Name)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service clusterIP %q, want None (headless)", svc.Spec.ClusterIP)
	}
	if !svc.Spec.PublishNotReadyAddresses {
		t.Error("Service does not publish not-ready addresses: voters could not find each other before being ready")
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("Service selector %v does not select the pods %v", svc.Spec.Selector, sts.Spec.Template.Labels)
	}
	c := container(t, sts)
	for _, p := range svc.Spec.Ports {
		cp := containerPort(t, c, p.TargetPort.String())
		if cp.ContainerPort != p.Port || cp.Protocol != p.Protocol {
			t.Errorf("Service port %s (%d/%s) targets container port %d/%s", p.Name, p.Port, p.Protocol, cp.ContainerPort, cp.Protocol)
		}
	}
}

// A new mesh's voters start together, and pod names are node names.
func TestStatefulSet(t *testing.T) {
	m := load(t)
	sts := m.statefulSet(t, voters)
	spec := sts.Spec
	if spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q, want Parallel", spec.PodManagementPolicy)
	}
	if spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Errorf("updateStrategy %q, want RollingUpdate", spec.UpdateStrategy.Type)
	}
	sel, err := metav1.LabelSelectorAsSelector(spec.Selector)
	if err != nil || !sel.Matches(labels.Set(spec.Template.Labels)) {
		t.Errorf("selector %v does not select the pod template's labels %v (%v)", spec.Selector, spec.Template.Labels, err)
	}
	c := container(t, sts)
	if got := strings.Join(append(c.Command, c.Args...), " "); got != "lockmesh agent" {
		t.Errorf("the container runs %q, want lockmesh agent", got)
	}
	if f := envVar(t, c, "LOCKMESH_NAME").ValueFrom; f == nil || f.FieldRef == nil || f.FieldRef.FieldPath != "metadata.name" {
		t.Error("LOCKMESH_NAME is not the pod's name")
	}

	// The founding voters are the pods the StatefulSet starts, and each is
	// a seed at its DNS name under the headless Service, on the gossip port.
	replicas := int(*spec.Replicas)
	var pods, seeds []string
	gossip := containerPort(t, c, "gossip-tcp").ContainerPort
	for i := range replicas {
		pod := fmt.Sprintf("%s-%d", sts.Name, i)
		pods = append(pods, pod)
		seeds = append(seeds, fmt.Sprintf("%s.%s:%d", pod, spec.ServiceName, gossip))
	}
	if got := strings.Split(envValue(t, c, "LOCKMESH_VOTERS"), ","); !slices.Equal(got, pods) {
		t.Errorf("LOCKMESH_VOTERS %v, want the pods %v", got, pods)
	}
	if got := strings.Split(envValue(t, c, "LOCKMESH_SEEDS"), ","); !slices.Equal(got, seeds) {
		t.Errorf("LOCKMESH_SEEDS %v, want %v", got, seeds)
	}
	if got := envValue(t, c, "LOCKMESH_BIND"); !strings.HasSuffix(got, ":"+strconv.Itoa(int(gossip))) {
		t.Errorf("LOCKMESH_BIND %q, not the gossip port %d", got, gossip)
	}
	if ballot := containerPort(t, c, "ballot").ContainerPort; ballot != gossip+1 {
		t.Errorf("ballot port %d: the agent listens on the gossip port + 1 (%d)", ballot, gossip+1)
	}
	// $(VAR) references must name a variable defined above them.
	defined := map[string]bool{}
	for _, e := range c.Env {
		for _, ref := range regexp.MustCompile(`\$\(([A-Z_]+)\)`).FindAllStringSubmatch(e.Value, -1) {
			if !defined[ref[1]] {
				t.Errorf("%s refers to $(%s), not defined before it", e.Name, ref[1])
			}
		}
		defined[e.Name] = true
	}
}

// The operator's word that the mesh is brand-new is for a first start
// only: a manifest that carries it would let a pod whose volume was lost
// take its own emptiness for proof that it never voted.
func TestNoNewMeshInTheManifests(t *testing.T) {
	c := container(t, load(t).statefulSet(t, voters))
	for _, e := range c.Env {
		if e.Name == "LOCKMESH_NEW_MESH" {
			t.Errorf("the StatefulSet sets LOCKMESH_NEW_MESH (%q): it is for a mesh's first start only", e.Value)
		}
	}
	for _, a := range append(slices.Clone(c.Command), c.Args...) {
		if strings.Contains(a, "new-mesh") {
			t.Errorf("the agent's command line has %q: -new-mesh is for a mesh's first start only", a)
		}
	}
}

// The data directory the agent is given is the volume claim's mount.
func TestDataDirOnPersistentVolume(t *testing.T) {
	sts := load(t).statefulSet(t, voters)
	c := container(t, sts)
	dir := envValue(t, c, "LOCKMESH_DATA_DIR")
	mount := mountAt(t, c, dir)
	var claim *corev1.PersistentVolumeClaim
	for i, vc := range sts.Spec.VolumeClaimTemplates {
		if vc.Name == mount.Name {
			claim = &sts.Spec.VolumeClaimTemplates[i]
		}
	}
	if claim == nil {
		t.Fatalf("LOCKMESH_DATA_DIR %s is mounted from %q, not a volume claim template", dir, mount.Name)
	}
	if mount.ReadOnly {
		t.Error("the data directory is mounted read-only")
	}
	if !slices.Contains(claim.Spec.AccessModes, corev1.ReadWriteOnce) {
		t.Errorf("the data claim's access modes %v lack ReadWriteOnce", claim.Spec.AccessModes)
	}
	if _, ok := claim.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
		t.Error("the data claim requests no storage")
	}
}

// TLS files come from a Secret mounted read-only; the gossip key from a
// Secret, as an environment variable.
func TestSecrets(t *testing.T) {
	sts := load(t).statefulSet(t, voters)
	c := container(t, sts)
	for _, name := range []string{"LOCKMESH_TLS_CERT", "LOCKMESH_TLS_KEY", "LOCKMESH_TLS_CA"} {
		file := envValue(t, c, name)
		mount := mountAt(t, c, filepath.Dir(file))
		if !mount.ReadOnly {
			t.Errorf("%s: %s is mounted writable", name, mount.MountPath)
		}
		if mount.SubPath != "" {
			t.Errorf("%s: a subPath mount is never updated, so certificates could not rotate", name)
		}
		v := volume(t, sts, mount.Name)
		if v.Secret == nil {
			t.Errorf("%s: volume %q is not a Secret", name, mount.Name)
		} else if m := v.Secret.DefaultMode; m == nil || *m != 0o440 {
			t.Errorf("%s: the Secret's files have mode %v, want 0440 (the agent's group reads them, nobody else)", name, m)
		}
	}
	if f := envVar(t, c, "LOCKMESH_GOSSIP_KEY").ValueFrom; f == nil || f.SecretKeyRef == nil {
		t.Error("LOCKMESH_GOSSIP_KEY does not come from a Secret")
	}
	// With a read-only root, the agent's socket needs a writable volume.
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		return
	}
	mountAt(t, c, filepath.Dir(envValue(t, c, "LOCKMESH_SOCKET")))
}

// Readiness is /readyz and metrics /metrics, on the port the agent serves
// HTTP on; liveness never asks about the quorum.
func TestProbesAndMetrics(t *testing.T) {
	sts := load(t).statefulSet(t, voters)
	c := container(t, sts)
	httpPort := containerPort(t, c, "http").ContainerPort
	if got := envValue(t, c, "LOCKMESH_HTTP"); !strings.HasSuffix(got, ":"+strconv.Itoa(int(httpPort))) {
		t.Errorf("LOCKMESH_HTTP %q, but the container port named http is %d", got, httpPort)
	}
	r := c.ReadinessProbe
	if r == nil || r.HTTPGet == nil || r.HTTPGet.Path != "/readyz" || r.HTTPGet.Port.String() != "http" {
		t.Errorf("readiness probe %+v, want GET /readyz on port http", r)
	}
	l := c.LivenessProbe
	if l != nil && (l.HTTPGet == nil || l.HTTPGet.Path != "/healthz") {
		t.Errorf("liveness probe %+v: only /healthz, never /readyz (a missing majority must not restart voters)", l)
	}
	a := sts.Spec.Template.Annotations
	if a["prometheus.io/scrape"] != "true" || a["prometheus.io/path"] != "/metrics" || a["prometheus.io/port"] != strconv.Itoa(int(httpPort)) {
		t.Errorf("Prometheus annotations %v, want /metrics scraped on port %d", a, httpPort)
	}
}

// One voter down at a time; one per machine; the agent has time to leave;
// requests set and no CPU limit.
func TestAvailability(t *testing.T) {
	m := load(t)
	sts, pdb := m.statefulSet(t, voters), m.budgets[0]
	if mu := pdb.Spec.MaxUnavailable; mu == nil || mu.String() != "1" {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", mu)
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("PodDisruptionBudget selector %v does not select the pods (%v)", pdb.Spec.Selector, err)
	}
	pod := sts.Spec.Template.Spec
	anti := pod.Affinity
	if anti == nil || anti.PodAntiAffinity == nil || len(anti.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
		t.Fatal("no required pod anti-affinity")
	}
	term := anti.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
	sel, err = metav1.LabelSelectorAsSelector(term.LabelSelector)
	if term.TopologyKey != corev1.LabelHostname || err != nil || !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("anti-affinity %+v: want the pods apart by %s", term, corev1.LabelHostname)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g <= agentLeaveTimeout {
		t.Errorf("terminationGracePeriodSeconds %v: the agent needs up to %d s to leave", g, agentLeaveTimeout)
	}
	c := container(t, sts)
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Error("a CPU limit: throttling would stall lease renewals")
	}
}

func container(t *testing.T, sts *appsv1.StatefulSet) *corev1.Container {
	t.Helper()
	cs := sts.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("%d containers, want 1", len(cs))
	}
	return &cs[0]
}

func containerPort(t *testing.T, c *corev1.Container, name string) corev1.ContainerPort {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no container port named %q", name)
	return corev1.ContainerPort{}
}

func envVar(t *testing.T, c *corev1.Container, name string) corev1.EnvVar {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("%s not set", name)
	return corev1.EnvVar{}
}

func envValue(t *testing.T, c *corev1.Container, name string) string {
	t.Helper()
	v := envVar(t, c, name).Value
	if v == "" {
		t.Fatalf("%s has no literal value", name)
	}
	return v
}

// mountAt is the volume mount whose path is dir.
func mountAt(t *testing.T, c *corev1.Container, dir string) corev1.VolumeMount {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		if filepath.Clean(vm.MountPath) == filepath.Clean(dir) {
			return vm
		}
	}
	t.Fatalf("nothing is mounted at %s", dir)
	return corev1.VolumeMount{}
}

func volume(t *testing.T, sts *appsv1.StatefulSet, name string) corev1.Volume {
	t.Helper()
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no volume %q", name)
	return corev1.Volume{}
}
