package kubernetes

import (
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// sidecar.yaml: an app and a `lockmesh agent` sidecar in one pod. The
// sidecar joins the voters' mesh as a non-voter and serves the HTTP API on
// loopback only; the app talks to it there.

// sidecarPod is the sidecar example's StatefulSet, its agent (a native
// sidecar: an init container that restarts Always) and its app container.
func sidecarPod(t *testing.T, m *manifests) (*appsv1.StatefulSet, *corev1.Container, *corev1.Container) {
	t.Helper()
	sts := m.statefulSet(t, sidecarSS)
	pod := sts.Spec.Template.Spec
	var agent *corev1.Container
	for i, c := range pod.InitContainers {
		if slices.Equal(c.Command, []string{"lockmesh", "agent"}) {
			agent = &pod.InitContainers[i]
		}
	}
	if agent == nil {
		t.Fatal("no init container runs lockmesh agent")
	}
	if p := agent.RestartPolicy; p == nil || *p != corev1.ContainerRestartPolicyAlways {
		t.Error("the agent is not a native sidecar (restartPolicy: Always): it would have to exit before the app starts")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d app containers, want 1", len(pod.Containers))
	}
	return sts, agent, &pod.Containers[0]
}

// The API listens on loopback only, in plain HTTP and without -api-open:
// only the pod's containers reach it, so it needs no token.
func TestSidecarAPIOnLoopback(t *testing.T) {
	_, agent, app := sidecarPod(t, load(t))
	addr := envValue(t, agent, "LOCKMESH_API_ADDR")
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("LOCKMESH_API_ADDR %q: %v", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Errorf("LOCKMESH_API_ADDR %q is not a loopback address: other pods could reach the API", addr)
	}
	if tlsMode := envValue(t, agent, "LOCKMESH_API_TLS"); tlsMode != "off" {
		t.Errorf("LOCKMESH_API_TLS %q: with the mesh's certificate set, auto serves the API over TLS and the app's http:// fails", tlsMode)
	}
	for _, e := range agent.Env {
		if e.Name == "LOCKMESH_API_OPEN" {
			t.Error("LOCKMESH_API_OPEN is set: the API must stay on loopback")
		}
	}
	for _, p := range agent.Ports {
		if p.ContainerPort == int32(mustAtoi(t, port)) {
			t.Errorf("container port %s publishes the API's port %s", p.Name, port)
		}
	}
	// The app's URL is the sidecar's API.
	u, err := url.Parse(envValue(t, app, "LOCKMESH_URL"))
	if err != nil || u.Scheme != "http" || u.Host != addr {
		t.Errorf("the app's LOCKMESH_URL %q (%v); want http://%s", envValue(t, app, "LOCKMESH_URL"), err, addr)
	}
}

// The sidecar is a node of the voters' mesh: the same seeds, gossip key and
// label, TLS from the mesh's CA; but no voter, so no voters list and no
// data directory.
func TestSidecarJoinsTheVotersMesh(t *testing.T) {
	m := load(t)
	vsts := m.statefulSet(t, voters)
	voter := container(t, vsts)
	sts, agent, _ := sidecarPod(t, m)
	if agent.Image != voter.Image {
		t.Errorf("the sidecar runs %s, the voters %s", agent.Image, voter.Image)
	}
	for _, name := range []string{"LOCKMESH_SEEDS", "LOCKMESH_GOSSIP_LABEL", "LOCKMESH_PROFILE", "LOCKMESH_BIND"} {
		if got, want := envValue(t, agent, name), envValue(t, voter, name); got != want {
			t.Errorf("%s: the sidecar's %q, the voters' %q", name, got, want)
		}
	}
	gk, vk := envVar(t, agent, "LOCKMESH_GOSSIP_KEY").ValueFrom, envVar(t, voter, "LOCKMESH_GOSSIP_KEY").ValueFrom
	if gk == nil || gk.SecretKeyRef == nil || vk == nil || vk.SecretKeyRef == nil ||
		gk.SecretKeyRef.Name != vk.SecretKeyRef.Name || gk.SecretKeyRef.Key != vk.SecretKeyRef.Key {
		t.Error("the sidecar's gossip key is not the voters' Secret")
	}
	if f := envVar(t, agent, "LOCKMESH_NAME").ValueFrom; f == nil || f.FieldRef == nil || f.FieldRef.FieldPath != "metadata.name" {
		t.Error("the sidecar's LOCKMESH_NAME is not its pod's name (its certificate names it)")
	}
	for _, e := range agent.Env {
		switch e.Name {
		case "LOCKMESH_VOTERS", "LOCKMESH_BOOTSTRAP_EXPECT", "LOCKMESH_DATA_DIR", "LOCKMESH_NEW_MESH":
			t.Errorf("the sidecar sets %s: it is not a voter", e.Name)
		}
	}
	// TLS: the files on a read-only Secret volume, refreshed in place; the
	// Secret is not the voters', whose keys the app's pods must not hold.
	for _, name := range []string{"LOCKMESH_TLS_CERT", "LOCKMESH_TLS_KEY", "LOCKMESH_TLS_CA"} {
		mount := mountAt(t, agent, filepath.Dir(envValue(t, agent, name)))
		if !mount.ReadOnly || mount.SubPath != "" {
			t.Errorf("%s: mounted writable or with a subPath", name)
		}
		v := volume(t, sts, mount.Name)
		if v.Secret == nil {
			t.Fatalf("%s: volume %q is not a Secret", name, mount.Name)
		}
		if v.Secret.SecretName == volume(t, vsts, mountAt(t, voter, filepath.Dir(envValue(t, voter, name))).Name).Secret.SecretName {
			t.Errorf("%s: the sidecar mounts the voters' Secret %q, every voter's key with it", name, v.Secret.SecretName)
		}
	}
	// Probes come to the pod's IP: the -http port, not loopback.
	httpPort := containerPort(t, agent, "http").ContainerPort
	if got := envValue(t, agent, "LOCKMESH_HTTP"); strings.HasPrefix(got, "127.") || !strings.HasSuffix(got, ":"+itoa(httpPort)) {
		t.Errorf("LOCKMESH_HTTP %q: the probes need the container port http (%d) on the pod's address", got, httpPort)
	}
	for what, p := range map[string]*corev1.Probe{"startup": agent.StartupProbe, "readiness": agent.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe %+v: want GET /readyz on port http (the app starts once the agent is ready)", what, p)
		}
	}
	if !labels.SelectorFromSet(m.service(t, sidecarSS).Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)) ||
		sts.Spec.ServiceName != sidecarSS {
		t.Error("the sidecar StatefulSet's governing Service does not select its pods")
	}
}

// Both containers run as the image's non-root user, with read-only root
// filesystems, no privilege escalation and no capabilities; the agent's
// sockets go to a writable volume.
func TestSidecarLockedDown(t *testing.T) {
	sts, agent, app := sidecarPod(t, load(t))
	pod := sts.Spec.Template.Spec
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != imageUID {
		t.Errorf("the pod does not run as non-root uid %d (the image's user)", imageUID)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token it never uses")
	}
	for _, c := range []*corev1.Container{agent, app} {
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: the root filesystem is writable", c.Name)
		}
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: privilege escalation allowed", c.Name)
		}
		if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: capabilities not dropped", c.Name)
		}
		if sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			t.Errorf("%s: runs as root", c.Name)
		}
	}
	dir := filepath.Dir(envValue(t, agent, "LOCKMESH_SOCKET"))
	if v := volume(t, sts, mountAt(t, agent, dir).Name); v.EmptyDir == nil {
		t.Errorf("the agent's sockets in %s: not on an emptyDir", dir)
	}
}

// The app is the script of the ConfigMap, beside the Python client, and it
// reads the sidecar's URL from LOCKMESH_URL.
func TestSidecarApp(t *testing.T) {
	m := load(t)
	sts, _, app := sidecarPod(t, m)
	script := strings.TrimPrefix(app.Command[len(app.Command)-1], "/app/")
	mount := mountAt(t, app, "/app")
	v := volume(t, sts, mount.Name)
	if v.Projected == nil {
		t.Fatalf("/app is not a projected volume")
	}
	var maps []string
	for _, s := range v.Projected.Sources {
		if s.ConfigMap != nil {
			maps = append(maps, s.ConfigMap.Name)
		}
	}
	if !slices.Contains(maps, "lockmesh-python") {
		t.Errorf("/app lacks the ConfigMap lockmesh-python (clients/python/lockmesh.py); it has %v", maps)
	}
	var code string
	for _, cm := range m.configMaps {
		if slices.Contains(maps, cm.Name) && cm.Data[script] != "" {
			code = cm.Data[script]
		}
	}
	if code == "" {
		t.Fatalf("no ConfigMap of /app (%v) holds %s", maps, script)
	}
	for _, want := range []string{"import lockmesh", `os.environ["LOCKMESH_URL"]`, "lease.valid()", "lease.token"} {
		if !strings.Contains(code, want) {
			t.Errorf("%s lacks %s", script, want)
		}
	}
	// Python, if it is here to ask, finds the script well formed.
	if py, err := exec.LookPath("python3"); err == nil {
		cmd := exec.Command(py, "-c", "import ast, sys; ast.parse(sys.stdin.read())")
		cmd.Stdin = strings.NewReader(code)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s does not parse: %v\n%s", script, err, out)
		}
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q is not a number", s)
	}
	return n
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
